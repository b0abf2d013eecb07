// Chat messages -> prompt text, by a model's chat template: the Jinja source
// of its GGUF tokenizer.chat_template (or tokenizer_config.json), executed by
// qkv's own interpreter of the Jinja that chat templates use (loops,
// conditions, set/namespace, macros, the filters and tests of jinja2 and
// raise_exception). It renders as transformers' apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...) does, with jinja2 configured as
// transformers configures it (trim_blocks, lstrip_blocks; tools and documents
// none); python/tests/test_chat_template_jinja.py holds it to jinja2 on the
// templates of SmolLM2, Qwen 2.5, Qwen 3, Gemma 3 and Llama 3.2.
//
// A template is untrusted input (it comes with a downloaded model): syntax
// errors, raise_exception(...) and templates that would run away (output,
// loop iterations, nesting or work beyond fixed bounds) end in qkv::Error
// naming the template line, never a hang or a crash.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

namespace jinja {
struct Program;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The special tokens a template may print ({{ bos_token }}), as text.
struct ChatTokens {
  std::string bos;
  std::string eos;
};

class ChatTemplate {
 public:
  // Parses a Jinja chat template; throws qkv::Error naming the line of a
  // syntax error or of a statement chat templates do not use (include, ...).
  static ChatTemplate from_jinja(std::string_view source, ChatTokens tokens = {});
  // A template qkv carries, for files without one: builtin_names() lists them
  // (chatml, gemma, llama3, qwen). Throws qkv::Error naming them for another name.
  static ChatTemplate builtin(std::string_view name, ChatTokens tokens = {});
  static std::vector<std::string> builtin_names();

  // The prompt for `messages` (each a dict of role and content to the
  // template), ending with the assistant's turn opened when
  // add_generation_prompt.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The template rendered with the variables of a JSON object: messages (of
  // any shape: tool_calls, reasoning_content, ...), add_generation_prompt and
  // whatever else the template reads (enable_thinking, tools, ...).
  // bos_token, eos_token, tools and documents default to the ChatTokens and none.
  std::string render_json(std::string_view variables_json) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, ChatTokens tokens);

  std::string source_;
  ChatTokens tokens_;
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace qkv::text
