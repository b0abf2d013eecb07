// jinja2's rule for names a scope assigns before it reads them. jinja2
// compiles each scope (the template's top level, a for loop's body, a
// macro's body) with a variable per name it assigns; when the first mention
// of a name in the scope, in document order and outside any if branch and
// nested loop, is an unconditional assignment, and no enclosing scope
// mentions the name, that variable starts undefined instead of reading the
// template's variables. So `{% for m in messages %}{{ x }}{% endfor %}
// {% set x = 1 %}` prints nothing for x in the loop even when the caller
// passed x. This pass finds those names so that the evaluator can do the same.
#pragma once

#include "text/jinja_parser.h"

namespace qkv::text::jinja {

// Fills program.starts_undefined and each for and macro statement's.
void find_names_that_start_undefined(Program& program);

}  // namespace qkv::text::jinja
