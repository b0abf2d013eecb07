// The chat templates qkv carries for models whose file has none
// (`qkv chat --chat-template NAME`): tool-less forms of the common families.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

// The Jinja source of a built-in template, or nullopt for an unknown name.
std::optional<std::string_view> builtin_chat_template(std::string_view name);
std::vector<std::string> builtin_chat_template_names();

}  // namespace qkv::text
