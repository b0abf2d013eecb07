// Jinja tokens -> syntax tree (jinja_ast.h), with jinja2's grammar and
// operator precedence: filters bind tighter than arithmetic
// ('a' + x | trim is 'a' + (x | trim)), `~` between + and *, tests after
// filters, `x if c else y` loosest.
#pragma once

#include <string_view>

#include "text/jinja_ast.h"

namespace qkv::text::jinja {

struct Program {
  Body body;
  std::vector<std::string> starts_undefined;  // of the top-level scope (jinja_scopes.h)
};

// Throws qkv::Error naming the line for a syntax error, an unknown or
// unclosed statement, or nesting deeper than `max_depth`.
Program parse(std::string_view source, int max_depth = 256);

}  // namespace qkv::text::jinja
