// Chat messages -> prompt text, for the ChatML family of chat templates
// (<|im_start|>role\ncontent<|im_end|>\n), the template of SmolLM2, Qwen and
// others. The jinja source (GGUF tokenizer.chat_template) is not executed:
// it is recognised, and its default system prompt (the text the template
// puts first when the first message is not a system message) taken from it.
// The result equals transformers' apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...) for these templates
// (python/tests/test_bpe_parity.py).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace qkv::text {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  // Plain ChatML; default_system, when given, is put first as a system
  // message when the first message is not one.
  explicit ChatTemplate(std::optional<std::string> default_system = std::nullopt)
      : default_system_(std::move(default_system)) {}

  // Recognises a jinja chat template. Throws qkv::Error (kValue) quoting its
  // first characters when it is not ChatML ("only ChatML is supported"), or
  // when it is ChatML with features this formatter does not reproduce
  // (tools, reasoning/<think> handling, a default system prompt it cannot
  // read).
  static ChatTemplate from_jinja(std::string_view source);

  // The prompt: every message as <|im_start|>role\ncontent<|im_end|>\n, then
  // <|im_start|>assistant\n when add_generation_prompt.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
};

}  // namespace qkv::text
