// Jinja's operators on values, with Python's semantics: + - * / // % ** on
// numbers (integers stay exact; overflow is an error, not a wrap), + on
// strings and lists, * repeating them, ~ joining str() of both, the
// comparisons and `in`.
#pragma once

#include <string_view>

#include "text/jinja_limits.h"
#include "text/jinja_value.h"

namespace qkv::text::jinja {

// a op b for op in + - * / // % ** ~.
Value binary_operator(std::string_view op, const Value& a, const Value& b, Budget& budget);
// a op b for op in == != < <= > >= in notin.
bool compare_operator(std::string_view op, const Value& a, const Value& b);
// -a or +a.
Value unary_operator(std::string_view op, const Value& a);

}  // namespace qkv::text::jinja
