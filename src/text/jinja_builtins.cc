// Attribute access, methods, filters, tests and globals of Jinja templates
// (see jinja_builtins.h).
#include "text/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>
#include <optional>

#include "text/jinja_operators.h"
#include "text/jinja_strings.h"

namespace qkv::text::jinja {

namespace {

// A function's arguments by position or name, each read once; what is left
// over when done() is called is an error naming the function.
class Args {
 public:
  Args(std::string function, CallArgs& args) : function_(std::move(function)), args_(args) {
    used_.assign(args.positional.size(), false);
    used_keywords_.assign(args.keyword.size(), false);
  }
  std::optional<Value> get(size_t position, std::string_view name) {
    for (size_t k = 0; k < args_.keyword.size(); ++k) {
      if (args_.keyword[k].first != name) continue;
      QKV_CHECK(position >= args_.positional.size(), function_, "() got multiple values for '",
                name, "'");
      used_keywords_[k] = true;
      return args_.keyword[k].second;
    }
    if (position < args_.positional.size()) {
      used_[position] = true;
      return args_.positional[position];
    }
    return std::nullopt;
  }
  Value get_or(size_t position, std::string_view name, Value fallback) {
    std::optional<Value> v = get(position, name);
    return v ? *v : std::move(fallback);
  }
  Value required(size_t position, std::string_view name) {
    std::optional<Value> v = get(position, name);
    QKV_CHECK(v.has_value(), function_, "() is missing its argument '", name, "'");
    return *v;
  }
  void done() const {
    for (size_t k = 0; k < used_.size(); ++k)
      QKV_CHECK(used_[k], function_, "() takes ", k, " positional arguments but got ",
                used_.size());
    for (size_t k = 0; k < used_keywords_.size(); ++k)
      QKV_CHECK(used_keywords_[k], function_, "() got an unexpected argument '",
                args_.keyword[k].first, "'");
  }

 private:
  std::string function_;
  CallArgs& args_;
  std::vector<bool> used_, used_keywords_;
};

const std::string& need_string(const Value& v, std::string_view what) {
  QKV_CHECK_TYPE(v.is_string(), what, " must be a string, got ", type_name(v));
  return v.string();
}

int64_t need_int(const Value& v, std::string_view what) {
  if (v.kind() == Kind::kBool) return v.boolean();
  QKV_CHECK_TYPE(v.kind() == Kind::kInt, what, " must be an integer, got ", type_name(v));
  return v.integer();
}

std::optional<std::string> optional_string(const Value& v, std::string_view what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  return need_string(v, what);
}

// The str() of a value the way jinja2's string filters see it.
std::string soft_str(const Value& v) { return to_output(v); }

Value string_value(std::string s, Budget& budget) {
  budget.check_string(s.size());
  budget.charge(s.size());
  return Value(std::move(s));
}

// The items of `items`, each as text_of(item), with `separator` between them
// (str.join and the join filter).
template <class TextOf>
Value join_values(const Value& items, const std::string& separator, Budget& budget,
                  TextOf&& text_of) {
  std::string out;
  bool first = true;
  for (const Value& item : iterate(items)) {
    if (!first) out += separator;
    first = false;
    out += text_of(item);
    budget.check_string(out.size());
  }
  return string_value(std::move(out), budget);
}

Value list_value(Array items, Budget& budget) {
  budget.check_list(items.size());
  budget.charge(items.size());
  Value v(std::move(items));
  QKV_CHECK(v.depth() <= budget.limits().max_value_depth, "lists and dicts nest deeper than ",
            budget.limits().max_value_depth, " levels");
  return v;
}

Value bound(std::string name, std::function<Value(CallArgs&)> f) {
  return Value(Callable{std::move(name), std::move(f)});
}

// Python's index normalisation for slices (PySlice_AdjustIndices).
std::vector<size_t> slice_indices(int64_t length, const Value& start_v, const Value& stop_v,
                                  const Value& step_v) {
  const auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  const int64_t step = given(step_v) ? need_int(step_v, "a slice step") : 1;
  QKV_CHECK(step != 0, "slice step cannot be zero");
  int64_t start, stop;
  const auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) i += length;
    if (step > 0) return std::clamp<int64_t>(i, 0, length);
    return std::clamp<int64_t>(i, -1, length - 1);
    (void)is_start;
  };
  start = given(start_v) ? clamp(need_int(start_v, "a slice start"), true)
                         : (step > 0 ? 0 : length - 1);
  stop = given(stop_v) ? clamp(need_int(stop_v, "a slice stop"), false) : (step > 0 ? length : -1);
  std::vector<size_t> out;
  if (step > 0)
    for (int64_t i = start; i < stop; i += step) out.push_back(static_cast<size_t>(i));
  else
    for (int64_t i = start; i > stop; i += step) out.push_back(static_cast<size_t>(i));
  return out;
}

Value string_method(const std::string& s, const std::string& name, Budget& budget) {
  Budget* b = &budget;
  const auto strip = [s, b, name](bool left, bool right) {
    return bound("str." + name, [=](CallArgs& call) {
      Args args("str." + name, call);
      const std::optional<std::string> chars =
          optional_string(args.get_or(0, "chars", None{}), "chars");
      args.done();
      return string_value(py_strip(s, chars, left, right), *b);
    });
  };
  if (name == "strip") return strip(true, true);
  if (name == "lstrip") return strip(true, false);
  if (name == "rstrip") return strip(false, true);
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bound("str." + name, [s, start, name](CallArgs& call) {
      Args args("str." + name, call);
      const Value prefix = args.required(0, "prefix");
      args.done();
      std::vector<std::string> options;
      if (prefix.kind() == Kind::kArray) {
        for (const Value& p : prefix.array())
          options.push_back(need_string(p, "str." + name + "() argument"));
      } else {
        options.push_back(need_string(prefix, "str." + name + "() argument"));
      }
      for (const std::string& p : options) {
        if (p.size() > s.size()) continue;
        if (start ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0)
          return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound("str." + name, [s, b, name](CallArgs& call) {
      Args args("str." + name, call);
      const std::optional<std::string> sep = optional_string(args.get_or(0, "sep", None{}), "sep");
      const int64_t maxsplit = need_int(args.get_or(1, "maxsplit", Value(int64_t{-1})), "maxsplit");
      args.done();
      QKV_CHECK(name == "split" || maxsplit < 0, "str.rsplit() with maxsplit is not supported");
      // Split no further than a list may hold: one more part is refused below.
      const int64_t bound = b->limits().max_list_items;
      const int64_t limit = maxsplit < 0 || maxsplit > bound ? bound : maxsplit;
      std::vector<std::string> pieces = py_split(s, sep, limit);
      b->check_list(pieces.size());
      Array parts;
      for (std::string& p : pieces) parts.emplace_back(std::move(p));
      return list_value(std::move(parts), *b);
    });
  }
  const auto simple = [s, b, name](std::string (*f)(std::string_view)) {
    return bound("str." + name, [=](CallArgs& call) {
      Args("str." + name, call).done();
      return string_value(f(s), *b);
    });
  };
  if (name == "upper") return simple(py_upper);
  if (name == "lower") return simple(py_lower);
  if (name == "title") return simple(py_title);
  if (name == "capitalize") return simple(py_capitalize);
  if (name == "replace") {
    return bound("str.replace", [s, b](CallArgs& call) {
      Args args("str.replace", call);
      const std::string old = need_string(args.required(0, "old"), "str.replace() old");
      const std::string with = need_string(args.required(1, "new"), "str.replace() new");
      const int64_t count = need_int(args.get_or(2, "count", Value(int64_t{-1})), "count");
      args.done();
      return string_value(py_replace(s, old, with, count), *b);
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return bound("str." + name, [s, find, name](CallArgs& call) {
      Args args("str." + name, call);
      const std::string sub = need_string(args.required(0, "sub"), "str." + name + "() argument");
      args.done();
      if (find) {
        const size_t at = s.find(sub);
        return Value(at == std::string::npos ? int64_t{-1}
                                             : static_cast<int64_t>(char_count(s.substr(0, at))));
      }
      if (sub.empty()) return Value(static_cast<int64_t>(char_count(s) + 1));
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return bound("str.join", [s, b](CallArgs& call) {
      Args args("str.join", call);
      const Value items = args.required(0, "iterable");
      args.done();
      return join_values(items, s, *b,
                         [](const Value& item) { return need_string(item, "str.join() item"); });
    });
  }
  const auto predicate = [s, name](bool (*f)(unsigned char)) {
    return bound("str." + name, [=](CallArgs& call) {
      Args("str." + name, call).done();
      if (s.empty()) return Value(false);
      for (const char c : s)
        if (!f(static_cast<unsigned char>(c))) return Value(false);
      return Value(true);
    });
  };
  if (name == "isdigit") return predicate([](unsigned char c) { return c >= '0' && c <= '9'; });
  if (name == "isspace")
    return predicate([](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); });
  return Value(Undefined{"'str object' has no attribute '" + name + "'"});
}

Value dict_method(const Value& d, const std::string& name, Budget& budget) {
  Budget* b = &budget;
  if (name == "items" || name == "keys" || name == "values") {
    return bound("dict." + name, [d, b, name](CallArgs& call) {
      Args("dict." + name, call).done();
      Array out;
      for (const auto& [k, v] : d.object()) {
        if (name == "items")
          out.push_back(Value::tuple({Value(k), v}));
        else
          out.push_back(name == "keys" ? Value(k) : v);
      }
      return list_value(std::move(out), *b);
    });
  }
  if (name == "get") {
    return bound("dict.get", [d](CallArgs& call) {
      Args args("dict.get", call);
      const Value key = args.required(0, "key");
      const Value fallback = args.get_or(1, "default", None{});
      args.done();
      if (!key.is_string()) return fallback;
      const Value* v = d.find(key.string());
      return v ? *v : fallback;
    });
  }
  return Value();  // not a method
}

bool is_mutating_method(Kind kind, const std::string& name) {
  static const char* const kList[] = {"append", "extend",  "insert", "pop",
                                      "remove", "reverse", "sort",   "clear"};
  static const char* const kDict[] = {"pop", "popitem", "setdefault", "update", "clear"};
  if (kind == Kind::kArray)
    return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
  if (kind == Kind::kObject)
    return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

}  // namespace

void fail_undefined(const Value& undefined) {
  const std::string& what = undefined.undefined().what;
  QKV_CHECK(false, what.empty() ? "an undefined value is used" : what);
}

Value get_attribute(const Value& object, const std::string& name, Budget& budget) {
  if ((!name.empty() && name[0] == '_') || is_mutating_method(object.kind(), name))
    return Value(Undefined{"access to attribute '" + name + "' of '" + type_name(object) +
                           "' object is unsafe in a chat template"});
  switch (object.kind()) {
    case Kind::kUndefined:
      fail_undefined(object);
    case Kind::kObject: {
      Value method = dict_method(object, name, budget);
      if (!method.is_undefined()) return method;
      if (const Value* v = object.find(name)) return *v;
      return Value(Undefined{"'dict object' has no attribute '" + name + "'"});
    }
    case Kind::kNamespace:
      for (const auto& [k, v] : object.ns().attributes)
        if (k == name) return v;
      return Value(Undefined{"'Namespace object' has no attribute '" + name + "'"});
    case Kind::kString:
      return string_method(object.string(), name, budget);
    default:
      return Value(
          Undefined{detail::concat("'", to_output(object), "' has no attribute '", name, "'")});
  }
}

Value get_item(const Value& object, const Value& key, Budget& budget) {
  switch (object.kind()) {
    case Kind::kUndefined:
      fail_undefined(object);
    case Kind::kArray:
    case Kind::kString:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
        int64_t i = need_int(key, "an index");
        if (object.kind() == Kind::kArray) {
          const int64_t n = static_cast<int64_t>(object.array().size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value(Undefined{"list index out of range"});
          return object.array()[static_cast<size_t>(i)];
        }
        const std::vector<size_t> at = char_offsets(object.string());
        const int64_t n = static_cast<int64_t>(at.size()) - 1;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value(Undefined{"string index out of range"});
        return Value(object.string().substr(at[i], at[i + 1] - at[i]));
      }
      break;
    case Kind::kObject:
      if (key.is_string())
        if (const Value* v = object.find(key.string())) return *v;
      break;
    default:
      break;
  }
  if (key.is_string()) {
    Value v = get_attribute(object, key.string(), budget);
    if (!v.is_undefined() || object.kind() != Kind::kObject) return v;
  }
  return Value(
      Undefined{detail::concat("'", type_name(object), " object' has no element ", repr(key))});
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.kind() == Kind::kArray) {
    const Array& a = object.array();
    Array out;
    for (size_t i : slice_indices(static_cast<int64_t>(a.size()), start, stop, step))
      out.push_back(a[i]);
    return list_value(std::move(out), budget);
  }
  QKV_CHECK_TYPE(object.is_string(), "'", type_name(object), "' object cannot be sliced");
  const std::string& s = object.string();
  const std::vector<size_t> at = char_offsets(s);
  std::string out;
  for (size_t i : slice_indices(static_cast<int64_t>(at.size()) - 1, start, stop, step))
    out.append(s, at[i], at[i + 1] - at[i]);
  return string_value(std::move(out), budget);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kArray:
      return v.array();
    case Kind::kObject: {
      std::vector<Value> keys;
      for (const auto& entry : v.object()) keys.emplace_back(entry.first);
      return keys;
    }
    case Kind::kString: {
      const int64_t limit = Limits{}.max_list_items;
      QKV_CHECK(static_cast<int64_t>(char_count(v.string())) <= limit,
                "the template iterates over a string of more than ", limit, " characters");
      std::vector<Value> chars;
      const std::vector<size_t> at = char_offsets(v.string());
      for (size_t i = 0; i + 1 < at.size(); ++i)
        chars.emplace_back(v.string().substr(at[i], at[i + 1] - at[i]));
      return chars;
    }
    default:
      QKV_CHECK_TYPE(false, "'", type_name(v), "' object is not iterable");
  }
}

namespace {

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(char_count(v.string()));
    case Kind::kArray:
      return static_cast<int64_t>(v.array().size());
    case Kind::kObject:
      return static_cast<int64_t>(v.object().size());
    default:
      QKV_CHECK_TYPE(false, "object of type '", type_name(v), "' has no len()");
  }
}

// Python's < for sort keys: numbers, then strings, then lists.
bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.string() < b.string();
  QKV_CHECK_TYPE(false, "'<' not supported between instances of '", type_name(a), "' and '",
                 type_name(b), "'");
}

// The attribute named by a dotted path ("function.name") of a value.
Value attribute_path(const Value& v, const std::string& path, Budget& budget) {
  Value out = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      out = get_item(out, Value(static_cast<int64_t>(std::stoll(part))), budget);
    else
      out = get_item(out, Value(part), budget);
    if (dot == std::string::npos) return out;
    if (out.is_undefined()) return out;
    start = dot + 1;
  }
}

// selectattr, rejectattr, select, reject.
Value select(const Value& input, CallArgs& call, bool by_attribute, bool keep, Budget& budget) {
  std::string attribute;
  size_t first = 0;
  if (by_attribute) {
    QKV_CHECK(!call.positional.empty(), "selectattr/rejectattr need an attribute name");
    attribute = need_string(call.positional[0], "the attribute");
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (call.positional.size() > first) {
    test = need_string(call.positional[first], "the test name");
    test_args.positional.assign(call.positional.begin() + first + 1, call.positional.end());
  }
  QKV_CHECK(call.keyword.empty(), "select filters take no keyword arguments");
  Array out;
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? attribute_path(item, attribute, budget) : item;
    CallArgs args = test_args;
    const bool passed = test.empty() ? truthy(subject) : apply_test(test, subject, args);
    if (passed == keep) out.push_back(item);
  }
  return list_value(std::move(out), budget);
}

std::string indent_text(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (true) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? nl : nl - start);
    const bool indent = (is_first ? first : true) && (blank || !line.empty());
    if (!is_first) out += '\n';
    if (indent) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    start = nl + 1;
    is_first = false;
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, CallArgs& call, Budget& budget) {
  Args args(name, call);
  const auto finish = [&](Value v) {
    args.done();
    return v;
  };
  if (name == "default" || name == "d") {
    const Value fallback = args.get_or(0, "default_value", Value(""));
    const bool boolean = truthy(args.get_or(1, "boolean", Value(false)));
    args.done();
    return input.is_undefined() || (boolean && !truthy(input)) ? fallback : input;
  }
  if (name == "safe") return finish(input);
  // Undefined reads as "" and as an empty sequence, as jinja2's Undefined does.
  if (input.is_undefined() && (name == "tojson" || name == "abs")) fail_undefined(input);
  if (name == "trim") {
    const std::optional<std::string> chars =
        optional_string(args.get_or(0, "chars", None{}), "chars");
    return finish(string_value(py_strip(soft_str(input), chars, true, true), budget));
  }
  if (name == "length" || name == "count") return finish(Value(length_of(input)));
  if (name == "string") return finish(string_value(soft_str(input), budget));
  if (name == "upper") return finish(string_value(py_upper(soft_str(input)), budget));
  if (name == "lower") return finish(string_value(py_lower(soft_str(input)), budget));
  if (name == "capitalize") return finish(string_value(py_capitalize(soft_str(input)), budget));
  if (name == "title") return finish(string_value(py_title(soft_str(input)), budget));
  if (name == "tojson") {
    const Value indent = args.get_or(0, "indent", None{});
    const bool ensure_ascii = truthy(args.get_or(1, "ensure_ascii", Value(false)));
    const Value separators = args.get_or(2, "separators", None{});
    const bool sort_keys = truthy(args.get_or(3, "sort_keys", Value(false)));
    args.done();
    QKV_CHECK(!ensure_ascii, "tojson(ensure_ascii=true) is not supported");
    QKV_CHECK(separators.is_none(), "tojson(separators=...) is not supported");
    const int width = indent.is_none() ? -1 : static_cast<int>(need_int(indent, "tojson indent"));
    QKV_CHECK(indent.is_none() || (width >= 0 && width <= 64), "tojson indent must be 0..64");
    return string_value(to_json(input, width, sort_keys), budget);
  }
  if (name == "join") {
    const std::string separator = soft_str(args.get_or(0, "d", Value("")));
    const Value attribute = args.get_or(1, "attribute", None{});
    args.done();
    return join_values(input, separator, budget, [&](const Value& item) {
      return soft_str(attribute.is_none() ? item
                                          : attribute_path(item, soft_str(attribute), budget));
    });
  }
  if (name == "first" || name == "last") {
    args.done();
    const std::vector<Value> items = iterate(input);
    if (items.empty()) return Value(Undefined{"No " + name + " item, sequence was empty."});
    return name == "first" ? items.front() : items.back();
  }
  if (name == "replace") {
    const std::string old = soft_str(args.required(0, "old"));
    const std::string with = soft_str(args.required(1, "new"));
    const Value count = args.get_or(2, "count", None{});
    args.done();
    return string_value(py_replace(soft_str(input), old, with,
                                   count.is_none() ? -1 : need_int(count, "replace count")),
                        budget);
  }
  if (name == "items") {
    args.done();
    QKV_CHECK_TYPE(input.kind() == Kind::kObject, "items: expected a dict, got ", type_name(input));
    Array out;
    for (const auto& [k, v] : input.object()) out.push_back(Value::tuple({Value(k), v}));
    return list_value(std::move(out), budget);
  }
  if (name == "list") return finish(list_value(iterate(input), budget));
  if (name == "reverse") {
    args.done();
    if (input.is_string()) {
      std::vector<Value> chars = iterate(input);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->string();
      return string_value(std::move(out), budget);
    }
    std::vector<Value> items = iterate(input);
    std::reverse(items.begin(), items.end());
    return list_value(std::move(items), budget);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attribute = name.size() > 6 && name.substr(name.size() - 4) == "attr";
    return select(input, call, by_attribute, name.rfind("select", 0) == 0, budget);
  }
  if (name == "map") {
    const std::optional<Value> attribute = args.get(99, "attribute");
    if (attribute) {
      const Value fallback = args.get_or(99, "default", Value());
      args.done();
      Array out;
      for (const Value& item : iterate(input)) {
        Value v = attribute_path(item, soft_str(*attribute), budget);
        out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
      }
      return list_value(std::move(out), budget);
    }
    QKV_CHECK(!call.positional.empty(), "map needs a filter name or attribute=");
    const std::string filter = need_string(call.positional[0], "the filter name");
    CallArgs rest;
    rest.positional.assign(call.positional.begin() + 1, call.positional.end());
    rest.keyword = call.keyword;
    Array out;
    for (const Value& item : iterate(input)) {
      CallArgs each = rest;
      out.push_back(apply_filter(filter, item, each, budget));
    }
    return list_value(std::move(out), budget);
  }
  if (name == "indent") {
    const Value width = args.get_or(0, "width", Value(int64_t{4}));
    const bool first = truthy(args.get_or(1, "first", Value(false)));
    const bool blank = truthy(args.get_or(2, "blank", Value(false)));
    args.done();
    std::string pad;
    if (width.is_string()) {
      pad = width.string();
    } else {
      const int64_t n = need_int(width, "indent width");
      QKV_CHECK(n >= 0 && n <= 1024, "indent width must be 0..1024, got ", n);
      pad.assign(static_cast<size_t>(n), ' ');
    }
    const std::string text = soft_str(input);
    size_t lines = 1 + std::count(text.begin(), text.end(), '\n');
    budget.check_string(text.size() + lines * pad.size());
    return string_value(indent_text(text, pad, first, blank), budget);
  }
  if (name == "int") {
    const Value fallback = args.get_or(0, "default", Value(int64_t{0}));
    args.done();
    if (input.kind() == Kind::kInt || input.kind() == Kind::kBool)
      return Value(need_int(input, "int"));
    if (input.kind() == Kind::kFloat) {
      const double d = std::trunc(input.floating());
      if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
      return fallback;
    }
    if (input.is_string()) {
      const std::string t = py_strip(input.string(), std::nullopt, true, true);
      try {
        size_t used = 0;
        const long long v = std::stoll(t, &used, 10);
        if (used == t.size()) return Value(static_cast<int64_t>(v));
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value fallback = args.get_or(0, "default", Value(0.0));
    args.done();
    if (input.is_number()) return Value(input.as_double());
    if (input.is_string()) {
      const std::string t = py_strip(input.string(), std::nullopt, true, true);
      try {
        size_t used = 0;
        const double v = std::stod(t, &used);
        if (used == t.size()) return Value(v);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "abs") {
    args.done();
    if (input.kind() == Kind::kFloat) return Value(std::fabs(input.floating()));
    const int64_t i = need_int(input, "abs");
    QKV_CHECK(i != INT64_MIN, "integer overflow in abs");
    return Value(i < 0 ? -i : i);
  }
  if (name == "unique") {
    args.done();
    Array out;
    for (const Value& item : iterate(input))
      if (std::none_of(out.begin(), out.end(), [&](const Value& x) { return equal(x, item); }))
        out.push_back(item);
    return list_value(std::move(out), budget);
  }
  if (name == "sort") {
    const bool reverse = truthy(args.get_or(0, "reverse", Value(false)));
    args.get_or(1, "case_sensitive", Value(false));
    const Value attribute = args.get_or(2, "attribute", None{});
    args.done();
    std::vector<Value> items = iterate(input);
    const auto key = [&](const Value& v) {
      return attribute.is_none() ? v : attribute_path(v, soft_str(attribute), budget);
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? less_than(key(b), key(a)) : less_than(key(a), key(b));
    });
    return list_value(std::move(items), budget);
  }
  if (name == "sum") {
    const Value attribute = args.get_or(0, "attribute", None{});
    Value total = args.get_or(1, "start", Value(int64_t{0}));
    args.done();
    for (const Value& item : iterate(input))
      total = binary_operator(
          "+", total,
          attribute.is_none() ? item : attribute_path(item, soft_str(attribute), budget), budget);
    return total;
  }
  if (name == "min" || name == "max") {
    args.done();
    const std::vector<Value> items = iterate(input);
    if (items.empty()) return Value(Undefined{"No " + name + " item, sequence was empty."});
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? less_than(item, best) : less_than(best, item)) best = item;
    return best;
  }
  if (name == "wordcount") {
    args.done();
    return Value(static_cast<int64_t>(py_split(soft_str(input), std::nullopt, -1).size()));
  }
  QKV_CHECK(false, "no filter named '", name, "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& call) {
  Args args(name, call);
  const auto finish = [&](bool b) {
    args.done();
    return b;
  };
  if (name == "defined") return finish(!v.is_undefined());
  if (name == "undefined") return finish(v.is_undefined());
  if (name == "none") return finish(v.is_none());
  if (name == "string") return finish(v.is_string());
  if (name == "mapping") return finish(v.kind() == Kind::kObject);
  if (name == "number") return finish(v.is_number());
  if (name == "integer") return finish(v.kind() == Kind::kInt);
  if (name == "float") return finish(v.kind() == Kind::kFloat);
  if (name == "boolean") return finish(v.kind() == Kind::kBool);
  if (name == "true") return finish(v.kind() == Kind::kBool && v.boolean());
  if (name == "false") return finish(v.kind() == Kind::kBool && !v.boolean());
  if (name == "callable") return finish(v.kind() == Kind::kCallable);
  if (name == "iterable")
    return finish(v.is_undefined() || v.is_string() || v.kind() == Kind::kArray ||
                  v.kind() == Kind::kObject);
  if (name == "sequence")
    return finish(v.is_undefined() || v.is_string() || v.kind() == Kind::kArray ||
                  v.kind() == Kind::kObject);
  if (name == "lower" || name == "upper") {
    args.done();
    if (!v.is_string()) return false;
    return name == "lower" ? py_lower(v.string()) == v.string()
                           : py_upper(v.string()) == v.string();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // Python's value % n, on integers or floats.
    QKV_CHECK_TYPE(v.is_number(), "the value tested must be a number, got ", type_name(v));
    const Value n = name == "divisibleby" ? args.required(0, "num") : Value(int64_t{2});
    args.done();
    QKV_CHECK_TYPE(n.is_number(), "divisibleby needs a number, got ", type_name(n));
    QKV_CHECK(n.as_double() != 0.0, "divisibleby 0");
    Budget numbers{Limits{}};  // % on numbers builds nothing to bound
    const Value rest = binary_operator("%", v, n, numbers);
    return equal(rest, Value(int64_t{name == "odd" ? 1 : 0}));
  }
  if (name == "sameas") {
    const Value other = args.required(0, "other");
    args.done();
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind() == Kind::kBool) return v.boolean() == other.boolean();
    return v.kind() == Kind::kNamespace && &v.ns() == &other.ns();
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "ne" || name == "!=") {
    const Value other = args.required(0, "other");
    args.done();
    return equal(v, other) == (name != "ne" && name != "!=");
  }
  if (name == "in") {
    const Value container = args.required(0, "seq");
    args.done();
    for (const Value& item : iterate(container))
      if (equal(item, v)) return true;
    if (container.is_string() && v.is_string())
      return container.string().find(v.string()) != std::string::npos;
    return false;
  }
  if (name == "gt" || name == ">" || name == "ge" || name == ">=" || name == "lt" || name == "<" ||
      name == "le" || name == "<=") {
    const Value other = args.required(0, "other");
    args.done();
    if (name == "gt" || name == ">") return less_than(other, v);
    if (name == "lt" || name == "<") return less_than(v, other);
    if (name == "ge" || name == ">=") return !less_than(v, other);
    return !less_than(other, v);
  }
  QKV_CHECK(false, "no test named '", name, "'");
}

Object global_functions(Budget& budget) {
  Budget* b = &budget;
  Object globals;
  globals.emplace_back("raise_exception", bound("raise_exception", [](CallArgs& call) -> Value {
                         Args args("raise_exception", call);
                         const Value message = args.get_or(0, "message", Value(""));
                         args.done();
                         throw RaisedException(to_output(message));
                       }));
  globals.emplace_back(
      "strftime_now", bound("strftime_now", [b](CallArgs& call) {
        Args args("strftime_now", call);
        const std::string format = need_string(args.required(0, "format"), "strftime_now format");
        args.done();
        QKV_CHECK(format.size() <= 256, "strftime_now format longer than 256");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        std::string out(format.size() * 16 + 64, '\0');
        const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
        out.resize(n);
        return string_value(std::move(out), *b);
      }));
  globals.emplace_back("namespace", bound("namespace", [b](CallArgs& call) {
                         auto ns = std::make_shared<Namespace>();
                         const auto assign = [&](const std::string& k, const Value& v) {
                           QKV_CHECK(k.empty() || k[0] != '_',
                                     "chat templates cannot store underscore-prefixed "
                                     "attributes on a namespace, got '",
                                     k, "'");
                           QKV_CHECK(!holds_namespace(v), "a namespace cannot hold a namespace");
                           for (auto& entry : ns->attributes)
                             if (entry.first == k) {
                               entry.second = v;
                               return;
                             }
                           ns->attributes.emplace_back(k, v);
                         };
                         QKV_CHECK(call.positional.size() <= 1,
                                   "namespace() takes at most one positional argument");
                         if (!call.positional.empty()) {
                           QKV_CHECK_TYPE(call.positional[0].kind() == Kind::kObject,
                                          "namespace() argument must be a dict");
                           for (const auto& [k, v] : call.positional[0].object()) assign(k, v);
                         }
                         for (const auto& [k, v] : call.keyword) assign(k, v);
                         b->charge(ns->attributes.size());
                         return Value(std::move(ns));
                       }));
  globals.emplace_back(
      "range", bound("range", [b](CallArgs& call) {
        QKV_CHECK(call.keyword.empty(), "range() takes no keyword arguments");
        std::vector<int64_t> n;
        for (const Value& v : call.positional) n.push_back(need_int(v, "range()"));
        QKV_CHECK(n.size() >= 1 && n.size() <= 3, "range() takes 1 to 3 arguments");
        const int64_t start = n.size() == 1 ? 0 : n[0];
        const int64_t stop = n.size() == 1 ? n[0] : n[1];
        const int64_t step = n.size() == 3 ? n[2] : 1;
        QKV_CHECK(step != 0, "range() step must not be zero");
        const long double count_ld =
            step > 0 ? std::ceil((static_cast<long double>(stop) - start) / step)
                     : std::ceil((static_cast<long double>(start) - stop) / -step);
        const int64_t count =
            count_ld > 0 ? static_cast<int64_t>(std::min<long double>(count_ld, 1e18)) : 0;
        QKV_CHECK(count <= b->limits().max_range, "range() of ", count,
                  " items is more than the limit of ", b->limits().max_range);
        Array out;
        for (int64_t k = 0; k < count; ++k) out.emplace_back(start + k * step);
        return list_value(std::move(out), *b);
      }));
  globals.emplace_back(
      "dict", bound("dict", [b](CallArgs& call) {
        Object out;
        QKV_CHECK(call.positional.size() <= 1, "dict() takes at most one positional argument");
        if (!call.positional.empty()) {
          QKV_CHECK_TYPE(call.positional[0].kind() == Kind::kObject,
                         "dict() argument must be a dict");
          out = call.positional[0].object();
        }
        for (const auto& keyword : call.keyword) {
          const std::string& key = keyword.first;
          auto it =
              std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == key; });
          if (it != out.end())
            it->second = keyword.second;
          else
            out.push_back(keyword);
        }
        b->charge(out.size());
        return Value(std::move(out));
      }));
  return globals;
}

}  // namespace qkv::text::jinja
