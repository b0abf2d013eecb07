// text::ChatTemplate: a model's Jinja chat template executed by qkv's
// interpreter (transformers' apply_chat_template is the reference in
// python/tests/test_chat_template_jinja.py; the pieces are in test_jinja.cc).
#include <gtest/gtest.h>

#include <functional>
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

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, SmolLM2PutsItsSystemPromptFirst) {
  const ChatTemplate t = ChatTemplate::from_jinja(kSmolLM2);
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

TEST(ChatTemplate, OtherFamiliesRenderToo) {
  // Templates that are not ChatML, with the special tokens given.
  const std::string llama =
      "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      "{% endif %}";
  const ChatTemplate t = ChatTemplate::from_jinja(llama, {.bos = "<|begin_of_text|>"});
  const std::vector<ChatMessage> chat = {{"user", "  a\n"}};
  EXPECT_EQ(t.apply(chat, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // The built-in Gemma template refuses turns that do not alternate, by raise_exception.
  const ChatTemplate gemma = ChatTemplate::builtin("gemma", {.bos = "<bos>"});
  EXPECT_EQ(gemma.apply(chat, true),
            "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\n");
  const std::vector<ChatMessage> assistant_first = {{"assistant", "x"}};
  EXPECT_NE(error_of([&] { (void)gemma.apply(assistant_first, true); }).find("alternate"),
            std::string::npos);
}

TEST(ChatTemplate, RenderJsonTakesAnyVariables) {
  const ChatTemplate t = ChatTemplate::from_jinja(
      "{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}"
      "{{ m.tool_calls | tojson }}{% endif %};{% endfor %}{{ extra }}{{ bos_token }}",
      {.bos = "<s>"});
  EXPECT_EQ(t.render_json(R"({"messages": [{"role": "assistant", "content": "",
                 "tool_calls": [{"name": "f", "arguments": {"b": 1, "a": [true, null]}}]}],
                 "extra": "!"})"),
            "assistant:[{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": [true, null]}}];!<s>");
  EXPECT_NE(error_of([&] { (void)t.render_json("{"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)t.render_json("[1]"); }).find("must be a JSON object"),
            std::string::npos);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(error_of([&] { (void)t.render_json("{\"x\": " + deep + "}"); }).find("nest deeper"),
            std::string::npos);
}

TEST(ChatTemplate, BrokenTemplatesAndNamesAreRefused) {
  EXPECT_NE(error_of([] {
              (void)ChatTemplate::from_jinja("a\n{% for m in messages %}");
            }).find("chat template line 2: the template ends before {% endfor %}"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)ChatTemplate::from_jinja("{{ 'abc"); }).find("never closed"),
            std::string::npos);
  const std::string e = error_of([] { (void)ChatTemplate::builtin("vicuna"); });
  EXPECT_NE(e.find("no built-in chat template named \"vicuna\"; the built-in ones are chatml, "
                   "gemma, llama3, qwen"),
            std::string::npos)
      << e;
  for (const std::string& name : ChatTemplate::builtin_names())
    EXPECT_FALSE(ChatTemplate::builtin(name).apply({}, true).empty()) << name;
}

}  // namespace
