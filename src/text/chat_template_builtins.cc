// Built-in chat templates (see chat_template_builtins.h). Each renders a
// tool-less conversation as its family's published template does
// (python/tests/test_chat_template_jinja.py compares them).
#include "text/chat_template_builtins.h"

#include <utility>

namespace qkv::text {

namespace {

// ChatML: <|im_start|>role\ncontent<|im_end|>\n per message.
constexpr std::string_view kChatML = R"jinja({%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %})jinja";

// Qwen 2.5: ChatML with Qwen's system prompt when the conversation has none.
constexpr std::string_view kQwen = R"jinja({%- if not messages or messages[0].role != 'system' %}
{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %})jinja";

// Gemma: user and model turns alternating; a system message becomes the
// first user turn's opening paragraph.
constexpr std::string_view kGemma = R"jinja({{- bos_token }}
{%- set state = namespace(prefix='', turns=messages) %}
{%- if messages and messages[0].role == 'system' %}
{%- set state.prefix = messages[0].content + '\n\n' %}
{%- set state.turns = messages[1:] %}
{%- endif %}
{%- for message in state.turns %}
{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
{{- raise_exception('Gemma turns alternate user/assistant/user/..., starting with user') }}
{%- endif %}
{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\n' }}
{{- (state.prefix if loop.first else '') + message.content | trim + '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<start_of_turn>model\n' }}
{%- endif %})jinja";

// Llama 3.x: header-delimited turns after a dated system header.
constexpr std::string_view kLlama3 = R"jinja({{- bos_token }}
{%- set state = namespace(system='', turns=messages) %}
{%- if messages and messages[0].role == 'system' %}
{%- set state.system = messages[0].content | trim %}
{%- set state.turns = messages[1:] %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n' }}
{{- 'Today Date: ' + strftime_now('%d %b %Y') + '\n\n' + state.system + '<|eot_id|>' }}
{%- for message in state.turns %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %})jinja";

constexpr std::pair<std::string_view, std::string_view> kBuiltins[] = {
    {"chatml", kChatML}, {"gemma", kGemma}, {"llama3", kLlama3}, {"qwen", kQwen}};

}  // namespace

std::optional<std::string_view> builtin_chat_template(std::string_view name) {
  for (const auto& [n, source] : kBuiltins)
    if (n == name) return source;
  return std::nullopt;
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> names;
  for (const auto& entry : kBuiltins) names.emplace_back(entry.first);
  return names;
}

}  // namespace qkv::text
