// What Jinja templates call on values, as jinja2 in transformers' sandbox
// provides it: attribute and item access (with the methods of str, dict and
// list that do not modify anything), slices, the filters, the tests, and the
// global functions raise_exception, strftime_now, namespace, range and dict.
#pragma once

#include <string>
#include <vector>

#include "qkv/error.h"
#include "text/jinja_limits.h"
#include "text/jinja_value.h"

namespace qkv::text::jinja {

// raise_exception(message) from a template: the template's own error.
class RaisedException : public Error {
 public:
  explicit RaisedException(const std::string& message) : Error(ErrorKind::kValue, message) {}
};

// Throws the error of using an undefined value (its `what`).
[[noreturn]] void fail_undefined(const Value& undefined);

// object.name (dict keys, namespace attributes, methods); undefined when absent.
Value get_attribute(const Value& object, const std::string& name, Budget& budget);
// object[key] (list and str indices, negative from the end; dict keys, then
// attributes); undefined when absent.
Value get_item(const Value& object, const Value& key, Budget& budget);
// object[start:stop:step] of a list or str (undefined or none: absent).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget);
// The items a for loop visits: list items, dict keys, str characters, nothing
// for undefined.
std::vector<Value> iterate(const Value& v);

Value apply_filter(const std::string& name, const Value& input, CallArgs& args, Budget& budget);
bool apply_test(const std::string& name, const Value& input, CallArgs& args);

// raise_exception, strftime_now, namespace, range and dict.
Object global_functions(Budget& budget);

}  // namespace qkv::text::jinja
