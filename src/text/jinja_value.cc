// Jinja values with Python's semantics (see jinja_value.h).
#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "qkv/error.h"
#include "text/jinja_strings.h"

namespace qkv::text::jinja {

Value::Value(Array a) {
  for (const Value& x : a) depth_ = std::max(depth_, x.depth_ + 1);
  depth_ = std::max(depth_, 1);
  data_ = std::make_shared<const Array>(std::move(a));
}

Value::Value(Object o) {
  for (const auto& entry : o) depth_ = std::max(depth_, entry.second.depth_ + 1);
  depth_ = std::max(depth_, 1);
  data_ = std::make_shared<const Object>(std::move(o));
}

double Value::as_double() const {
  switch (kind()) {
    case Kind::kBool:
      return boolean() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(integer());
    default:
      return floating();
  }
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : object())
    if (k == key) return &v;
  return nullptr;
}

bool holds_namespace(const Value& v) {
  if (v.kind() == Kind::kNamespace) return true;
  if (v.kind() == Kind::kArray)
    return std::any_of(v.array().begin(), v.array().end(), holds_namespace);
  if (v.kind() == Kind::kObject)
    return std::any_of(v.object().begin(), v.object().end(),
                       [](const auto& entry) { return holds_namespace(entry.second); });
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kObject:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.boolean();
    case Kind::kInt:
      return v.integer() != 0;
    case Kind::kFloat:
      return v.floating() != 0.0;
    case Kind::kString:
      return !v.string().empty();
    case Kind::kArray:
      return !v.array().empty();
    case Kind::kObject:
      return !v.object().empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) {
      const auto as_int = [](const Value& v) {
        return v.kind() == Kind::kBool ? int64_t{v.boolean()} : v.integer();
      };
      return as_int(a) == as_int(b);
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.string() == b.string();
    case Kind::kArray: {
      const Array &x = a.array(), &y = b.array();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::kObject: {
      if (a.object().size() != b.object().size()) return false;
      for (const auto& [k, v] : a.object()) {
        const Value* other = b.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest digits that read back as d, as d.ddde±x.
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::scientific);
  const std::string text(buffer, result.ptr);
  const size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  const int exponent = std::stoi(text.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  const int point = exponent + 1;  // digits[0 .. point) are the integer part
  std::string out = negative ? "-" : "";
  if (point > 16 || point < -3) {
    // Python's repr: exponent form outside 1e-4 <= |d| < 1e16.
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (point <= 0) return out + "0." + std::string(-point, '0') + digits;
  if (static_cast<size_t>(point) >= digits.size())
    return out + digits + std::string(point - digits.size(), '0') + ".0";
  return out + digits.substr(0, point) + "." + digits.substr(point);
}

namespace {

void append_repr(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::kString:
      out += py_repr(v.string());
      return;
    case Kind::kArray: {
      out += v.is_tuple() ? "(" : "[";
      bool first = true;
      for (const Value& x : v.array()) {
        if (!first) out += ", ";
        first = false;
        append_repr(x, out);
      }
      if (v.is_tuple() && v.array().size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Kind::kObject: {
      out += "{";
      bool first = true;
      for (const auto& [k, x] : v.object()) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": ";
        append_repr(x, out);
      }
      out += "}";
      return;
    }
    case Kind::kNamespace:
      out += "<Namespace ";
      append_repr(Value(v.ns().attributes), out);
      out += ">";
      return;
    default:
      out += to_output(v);
  }
}

void append_json_string(std::string_view s, std::string& out) {
  out.push_back('"');
  for (const char ch : s) {
    if (const char* escape = backslash_escape(ch, '"')) {
      out += escape;
      continue;
    }
    switch (ch) {
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(ch));
          out += escaped;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

void append_json(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  const auto newline = [&](int level) {
    if (indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(indent) * level, ' ');
  };
  const std::string_view item_separator = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.boolean() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.integer());
      return;
    case Kind::kFloat: {
      const double d = v.floating();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                             : float_repr(d);
      return;
    }
    case Kind::kString:
      append_json_string(v.string(), out);
      return;
    case Kind::kArray: {
      if (v.array().empty()) {
        out += "[]";
        return;
      }
      out += "[";
      bool first = true;
      for (const Value& x : v.array()) {
        if (!first) out += item_separator;
        first = false;
        newline(depth + 1);
        append_json(x, indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += "]";
      return;
    }
    case Kind::kObject:
    case Kind::kNamespace: {
      const Object& o = v.kind() == Kind::kObject ? v.object() : v.ns().attributes;
      QKV_CHECK(v.kind() == Kind::kObject, "tojson: a namespace is not JSON serializable");
      if (o.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : o) entries.push_back(&entry);
      if (sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += "{";
      bool first = true;
      for (const auto* entry : entries) {
        if (!first) out += item_separator;
        first = false;
        newline(depth + 1);
        append_json_string(entry->first, out);
        out += ": ";
        append_json(entry->second, indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += "}";
      return;
    }
    default:
      QKV_CHECK(false, "tojson: an object of type ", type_name(v), " is not JSON serializable");
  }
}

}  // namespace

std::string to_output(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.boolean() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.integer());
    case Kind::kFloat:
      return float_repr(v.floating());
    case Kind::kString:
      return v.string();
    case Kind::kCallable:
      return "<function " + v.callable().name + ">";
    default: {
      std::string out;
      append_repr(v, out);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(v, out);
  return out;
}

std::string to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  append_json(v, indent, sort_keys, 0, out);
  return out;
}

}  // namespace qkv::text::jinja
