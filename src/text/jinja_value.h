// The values a Jinja template computes with, as Python's jinja2 sees them:
// undefined, none, booleans, integers, floats, strings, lists, dicts (in
// insertion order), namespaces (the one mutable kind: `set ns.x = ...` writes
// through every copy) and callables (globals, macros, bound methods).
// Lists and dicts are shared, immutable once built, so copies are cheap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace qkv::text::jinja {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

// The arguments of a call: f(positional..., name=value...).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;  // for error messages
  std::function<Value(CallArgs&)> call;
};

// A name with no value; `what` says which, for error messages.
struct Undefined {
  std::string what;
};
struct None {};

// jinja2's namespace(): attributes assigned from anywhere in the template.
struct Namespace {
  Object attributes;
};

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kArray,
  kObject,
  kNamespace,
  kCallable
};

class Value {
 public:
  Value() : data_(Undefined{}) {}
  Value(Undefined u) : data_(std::move(u)) {}
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(Array a);
  Value(Object o);
  Value(std::shared_ptr<Namespace> ns) : data_(std::move(ns)) {}
  Value(Callable c) : data_(std::make_shared<const Callable>(std::move(c))) {}

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const {
    return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool;
  }

  bool boolean() const { return std::get<bool>(data_); }
  int64_t integer() const { return std::get<int64_t>(data_); }
  double floating() const { return std::get<double>(data_); }
  const std::string& string() const { return std::get<std::string>(data_); }
  const Array& array() const { return *std::get<std::shared_ptr<const Array>>(data_); }
  const Object& object() const { return *std::get<std::shared_ptr<const Object>>(data_); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const Undefined& undefined() const { return std::get<Undefined>(data_); }

  // How deeply lists and dicts nest in it: 0 for a scalar, 1 for [1], ...
  // (bounded by the evaluator, so that no walk over a value overflows the stack).
  int depth() const { return depth_; }
  // A list made as a Python tuple ((a, b), dict.items()): printed (a, b), unequal to [a, b].
  static Value tuple(Array items) {
    Value v(std::move(items));
    v.tuple_ = true;
    return v;
  }
  bool is_tuple() const { return tuple_; }

  // A number as double (bool: 0 or 1).
  double as_double() const;
  // The value of a dict's key, or nullptr.
  const Value* find(std::string_view key) const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const Array>,
               std::shared_ptr<const Object>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Callable>>
      data_;
  int depth_ = 0;
  bool tuple_ = false;
};

// Whether a namespace is in v, or in a list or dict in it.
bool holds_namespace(const Value& v);
// Python's name of the value's type ("str", "list", "dict", ...).
std::string type_name(const Value& v);
// Python's truth: empty strings, lists and dicts, 0, none and undefined are false.
bool truthy(const Value& v);
// Python's ==: numbers by value (1 == 1.0 == true), containers element-wise,
// undefined equal to undefined only.
bool equal(const Value& a, const Value& b);
// str(v) as jinja2 prints {{ v }}: strings as they are, undefined as "",
// none as "None", lists and dicts as Python's repr.
std::string to_output(const Value& v);
// Python's repr(v).
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "0.1", "1e+20").
std::string float_repr(double d);
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys), as
// transformers' tojson filter; indent < 0 is compact (", " and ": ").
std::string to_json(const Value& v, int indent = -1, bool sort_keys = false);

}  // namespace qkv::text::jinja
