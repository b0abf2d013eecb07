// Renders a parsed Jinja template (jinja_parser.h) with a set of variables,
// as jinja2 would: for loops have a scope per iteration (a `set` inside does
// not outlive it, hence namespace()), if blocks share their enclosing scope,
// macros see their parameters and the template's top-level names. Undefined
// names and keys are undefined values (empty when printed, false when
// tested); using one in arithmetic or as a container is an error.
#pragma once

#include <string>

#include "text/jinja_limits.h"
#include "text/jinja_parser.h"
#include "text/jinja_value.h"

namespace qkv::text::jinja {

// Throws qkv::Error naming the template line for any error of the template,
// raise_exception's message included, and when a Limit is passed.
std::string render(const Program& program, const Object& variables, const Limits& limits = {});

}  // namespace qkv::text::jinja
