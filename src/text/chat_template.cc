// ChatML recognised in a jinja chat template (see chat_template.h).
#include "qkv/text/chat_template.h"

#include <vector>

#include "qkv/error.h"

namespace qkv::text {

namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

// The first characters of a template, for error messages.
std::string quote(std::string_view source) {
  constexpr size_t kShown = 60;
  std::string shown(source.substr(0, kShown));
  for (char& c : shown)
    if (c == '\n') c = ' ';
  return "\"" + shown + (source.size() > kShown ? "...\"" : "\"");
}

// The string literals inside the {{ }} and {% %} tags of a jinja source,
// with their escapes (\n \t \r \\ \' \") resolved as jinja does.
std::vector<std::string> string_literals(std::string_view source) {
  std::vector<std::string> literals;
  size_t i = 0;
  while (true) {
    const size_t open = source.find('{', i);
    if (open == std::string_view::npos || open + 1 >= source.size()) break;
    const char kind = source[open + 1];
    if (kind != '{' && kind != '%') {
      i = open + 1;
      continue;
    }
    const std::string_view close = kind == '{' ? "}}" : "%}";
    i = open + 2;
    while (i < source.size() && source.compare(i, 2, close) != 0) {
      const char quote_char = source[i];
      if (quote_char != '\'' && quote_char != '"') {
        ++i;
        continue;
      }
      std::string literal;
      for (++i; i < source.size() && source[i] != quote_char; ++i) {
        if (source[i] != '\\' || i + 1 >= source.size()) {
          literal.push_back(source[i]);
          continue;
        }
        const char e = source[++i];
        switch (e) {
          case 'n':
            literal.push_back('\n');
            break;
          case 't':
            literal.push_back('\t');
            break;
          case 'r':
            literal.push_back('\r');
            break;
          case '\\':
          case '\'':
          case '"':
            literal.push_back(e);
            break;
          default:
            literal.push_back('\\');
            literal.push_back(e);
        }
      }
      literals.push_back(std::move(literal));
      ++i;  // the closing quote
    }
    i += 2;
  }
  return literals;
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(std::string_view source) {
  QKV_CHECK(source.find(kStart) != std::string_view::npos, "chat template ", quote(source),
            " is not a ChatML template (it has no <|im_start|>); only ChatML is supported");
  for (const std::string_view feature : {"tool", "<think>", "reasoning"}) {
    QKV_CHECK(source.find(feature) == std::string_view::npos, "chat template ", quote(source),
              " is ChatML with \"", feature,
              "\" handling, which is not supported; only plain ChatML is");
  }
  // The default system prompt: a literal "<|im_start|>system\n...<|im_end|>\n"
  // written out under a test of the first message's role.
  const std::string head = std::string(kStart) + "system\n";
  const std::string tail = std::string(kEnd) + "\n";
  std::optional<std::string> default_system;
  for (const std::string& literal : string_literals(source)) {
    if (literal.compare(0, head.size(), head) != 0) continue;
    QKV_CHECK(!default_system && literal.size() >= head.size() + tail.size() &&
                  literal.compare(literal.size() - tail.size(), tail.size(), tail) == 0,
              "chat template ", quote(source),
              " writes a system message in a form not understood; only plain ChatML is "
              "supported");
    default_system = literal.substr(head.size(), literal.size() - head.size() - tail.size());
  }
  const bool tests_role = source.find("!= 'system'") != std::string_view::npos ||
                          source.find("!= \"system\"") != std::string_view::npos;
  const bool found = default_system.has_value();
  QKV_CHECK(found == tests_role, "chat template ", quote(source),
            found ? " writes a default system prompt under a condition not understood"
                  : " tests for a system message but has no default system prompt literal",
            "; only plain ChatML is supported");
  return ChatTemplate(std::move(default_system));
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
  std::string out;
  const auto append = [&](std::string_view role, std::string_view content) {
    out.append(kStart).append(role).append("\n").append(content).append(kEnd).append("\n");
  };
  if (default_system_ && !messages.empty() && messages.front().role != "system")
    append("system", *default_system_);
  for (const ChatMessage& m : messages) append(m.role, m.content);
  if (add_generation_prompt) out.append(kStart).append("assistant\n");
  return out;
}

}  // namespace qkv::text
