// Chat templates executed by qkv's Jinja interpreter (see chat_template.h).
#include "qkv/text/chat_template.h"

#include "qkv/error.h"
#include "text/chat_template_builtins.h"
#include "text/jinja_evaluator.h"
#include "text/jinja_json.h"
#include "text/jinja_parser.h"

namespace qkv::text {

namespace {

// transformers' variables beside the caller's: the special tokens, and
// tools and documents passed as none.
jinja::Object with_defaults(jinja::Object variables, const ChatTokens& tokens) {
  const auto add = [&](const char* name, jinja::Value v) {
    for (const auto& entry : variables)
      if (entry.first == name) return;
    variables.emplace_back(name, std::move(v));
  };
  add("bos_token", jinja::Value(tokens.bos));
  add("eos_token", jinja::Value(tokens.eos));
  add("tools", jinja::Value(jinja::None{}));
  add("documents", jinja::Value(jinja::None{}));
  add("add_generation_prompt", jinja::Value(false));
  return variables;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, ChatTokens tokens)
    : source_(std::move(source)), tokens_(std::move(tokens)) {
  const jinja::Limits limits;
  program_ = std::make_shared<const jinja::Program>(jinja::parse(source_, limits.max_parse_depth));
}

ChatTemplate ChatTemplate::from_jinja(std::string_view source, ChatTokens tokens) {
  return ChatTemplate(std::string(source), std::move(tokens));
}

ChatTemplate ChatTemplate::builtin(std::string_view name, ChatTokens tokens) {
  const std::optional<std::string_view> source = builtin_chat_template(name);
  if (!source) {
    std::string names;
    for (const std::string& n : builtin_chat_template_names())
      names += (names.empty() ? "" : ", ") + n;
    QKV_CHECK(false, "no built-in chat template named \"", name, "\"; the built-in ones are ",
              names);
  }
  return ChatTemplate(std::string(*source), std::move(tokens));
}

std::vector<std::string> ChatTemplate::builtin_names() { return builtin_chat_template_names(); }

std::string ChatTemplate::apply(std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
  jinja::Array list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages)
    list.emplace_back(
        jinja::Object{{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}});
  jinja::Object variables{{"messages", jinja::Value(std::move(list))},
                          {"add_generation_prompt", jinja::Value(add_generation_prompt)}};
  return jinja::render(*program_, with_defaults(std::move(variables), tokens_));
}

std::string ChatTemplate::render_json(std::string_view variables_json) const {
  const jinja::Limits limits;
  const jinja::Value v = jinja::parse_json_value(variables_json, limits.max_value_depth);
  QKV_CHECK(v.kind() == jinja::Kind::kObject,
            "template variables must be a JSON object, got a JSON ", jinja::type_name(v));
  return jinja::render(*program_, with_defaults(v.object(), tokens_), limits);
}

}  // namespace qkv::text
