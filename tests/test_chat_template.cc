// text::ChatTemplate: ChatML recognised in jinja templates, formatted as the
// templates do (transformers' apply_chat_template is the reference in
// python/tests/test_bpe_parity.py); other templates are refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/text/chat_template.h"

namespace {

using qkv::text::ChatMessage;
using qkv::text::ChatTemplate;

// SmolLM2-135M-Instruct's tokenizer.chat_template, as in its GGUF file.
const std::string kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// transformers' plain ChatML, with jinja escapes instead of raw newlines.
const std::string kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplate, SmolLM2PutsItsSystemPromptFirst) {
  const ChatTemplate t = ChatTemplate::from_jinja(kSmolLM2);
  ASSERT_TRUE(t.default_system().has_value());
  EXPECT_EQ(*t.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<ChatMessage> user = {{"user", "Hi!"}};
  EXPECT_EQ(t.apply(user, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}};
  EXPECT_EQ(t.apply(with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
  EXPECT_EQ(t.apply({}, false), "");
  EXPECT_EQ(t.apply({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, PlainChatMLHasNoDefault) {
  const ChatTemplate t = ChatTemplate::from_jinja(kChatML);
  EXPECT_FALSE(t.default_system().has_value());
  const std::vector<ChatMessage> user = {{"user", "a\nb"}};
  EXPECT_EQ(t.apply(user, true), "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n");
}

std::string error_of(const std::string& source) {
  try {
    (void)ChatTemplate::from_jinja(source);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, OtherTemplatesAreRefused) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' %}";
  const std::string e = error_of(llama3);
  EXPECT_NE(e.find("\"{% set loop_messages = messages %}{% for message in loop_mes...\""),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("only ChatML is supported"), std::string::npos) << e;
  EXPECT_NE(error_of("").find("only ChatML is supported"), std::string::npos);
  EXPECT_NE(error_of("{%- if tools %}<|im_start|>{%- endif %}").find("\"tool\""),
            std::string::npos);
  EXPECT_NE(error_of("{{ '<|im_start|>assistant\n<think>' }}").find("<think>"), std::string::npos);
  // A system literal with no test of the first role, or the reverse.
  EXPECT_NE(error_of("{{ '<|im_start|>system\nX<|im_end|>\n' }}").find("condition"),
            std::string::npos);
  EXPECT_NE(error_of("{% if messages[0]['role'] != 'system' %}<|im_start|>{% endif %}")
                .find("no default system prompt"),
            std::string::npos);
  // Unterminated tags and literals are not a crash.
  EXPECT_NO_THROW((void)error_of("<|im_start|>{{ 'abc"));
  EXPECT_NO_THROW((void)error_of("<|im_start|>{% '\\"));
}

}  // namespace
