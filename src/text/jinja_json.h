// JSON text -> Jinja values: how variables reach a template from outside
// (the Python binding passes transformers' messages, tools, ... as JSON).
// Objects keep their key order, as Python's dicts do (hence not
// io::parse_json, whose objects sort their keys).
#pragma once

#include <string_view>

#include "text/jinja_value.h"

namespace qkv::text::jinja {

// Throws qkv::Error for text that is not JSON, integers beyond 64 bits, or
// nesting deeper than max_depth.
Value parse_json_value(std::string_view json, int max_depth);

}  // namespace qkv::text::jinja
