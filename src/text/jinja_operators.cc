// Jinja operators with Python's semantics (see jinja_operators.h).
#include "text/jinja_operators.h"

#include <cmath>
#include <string>

#include "qkv/error.h"
#include "text/jinja_builtins.h"

namespace qkv::text::jinja {

namespace {

bool is_integral(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind() == Kind::kBool ? v.boolean() : v.integer(); }

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  QKV_CHECK_TYPE(false, "unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
                 type_name(b), "'");
}

void check_overflow(bool overflow, std::string_view op) {
  QKV_CHECK(!overflow, "integer overflow in ", op,
            " (Python's integers have no bound; qkv's chat templates use 64 bits)");
}

// x op y for op in + - *, overflow an error.
int64_t exact(std::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                        : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
  check_overflow(overflow, op);
  return r;
}

// Python's floor division and modulo of integers.
int64_t floor_div(int64_t a, int64_t b) {
  QKV_CHECK(b != 0, "integer division or modulo by zero");
  QKV_CHECK(!(a == INT64_MIN && b == -1), "integer overflow in //");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  QKV_CHECK(b != 0, "integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& sequence, int64_t times, Budget& budget) {
  if (times < 0) times = 0;
  if (sequence.is_string()) {
    const std::string& s = sequence.string();
    QKV_CHECK(
        s.empty() || static_cast<uint64_t>(times) <= budget.limits().max_output_bytes / s.size(),
        "the template builds a string of more than ", budget.limits().max_output_bytes, " bytes");
    std::string out;
    out.reserve(s.size() * times);
    for (int64_t k = 0; k < times; ++k) out += s;
    budget.charge(out.size());
    return Value(std::move(out));
  }
  const Array& a = sequence.array();
  QKV_CHECK(a.empty() || static_cast<uint64_t>(times) <=
                             static_cast<uint64_t>(budget.limits().max_list_items) / a.size(),
            "the template builds a list of more than ", budget.limits().max_list_items, " items");
  budget.charge(a.size() * times);
  Array out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), a.begin(), a.end());
  return sequence.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
}

int three_way(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.string().compare(b.string());
    return c < 0 ? -1 : c > 0;
  }
  if (a.kind() == Kind::kArray && b.kind() == Kind::kArray && a.is_tuple() == b.is_tuple()) {
    const Array &x = a.array(), &y = b.array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return three_way(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  QKV_CHECK_TYPE(false, "'", op, "' not supported between instances of '", type_name(a), "' and '",
                 type_name(b), "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      QKV_CHECK_TYPE(item.is_string(), "'in <string>' requires string as left operand, not ",
                     type_name(item));
      return container.string().find(item.string()) != std::string::npos;
    case Kind::kArray:
      for (const Value& x : container.array())
        if (equal(x, item)) return true;
      return false;
    case Kind::kObject:
      QKV_CHECK_TYPE(item.kind() != Kind::kArray && item.kind() != Kind::kObject,
                     "unhashable type: '", type_name(item), "'");
      return item.is_string() && container.find(item.string()) != nullptr;
    case Kind::kUndefined:
      return false;  // jinja2's Undefined iterates as empty
    default:
      QKV_CHECK_TYPE(false, "argument of type '", type_name(container), "' is not iterable");
  }
}

}  // namespace

Value binary_operator(std::string_view op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    std::string out = to_output(a);
    const std::string right = to_output(b);
    budget.check_string(out.size() + right.size());
    out += right;
    budget.charge(out.size());
    return Value(std::move(out));
  }
  if (a.is_number() && b.is_number()) {
    const bool integers = is_integral(a) && is_integral(b);
    const int64_t x = integers ? as_int(a) : 0, y = integers ? as_int(b) : 0;
    const double p = a.as_double(), q = b.as_double();
    if (op == "+") return integers ? Value(exact(op, x, y)) : Value(p + q);
    if (op == "-") return integers ? Value(exact(op, x, y)) : Value(p - q);
    if (op == "*") return integers ? Value(exact(op, x, y)) : Value(p * q);
    if (op == "/") {
      QKV_CHECK(q != 0.0, "division by zero");
      return Value(p / q);
    }
    if (op == "//") {
      if (integers) return Value(floor_div(x, y));
      QKV_CHECK(q != 0.0, "float floor division by zero");
      return Value(std::floor(p / q));
    }
    if (op == "%") {
      if (integers) return Value(floor_mod(x, y));
      QKV_CHECK(q != 0.0, "float modulo by zero");
      double m = std::fmod(p, q);
      if (m != 0.0 && ((m < 0) != (q < 0))) m += q;
      return Value(m);
    }
    if (op == "**") {
      if (integers && y >= 0) {
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if (e & 1) result = exact("*", result, base);
          if (e > 1) base = exact("*", base, base);
        }
        return Value(result);
      }
      QKV_CHECK(!(p == 0.0 && q < 0), "0.0 cannot be raised to a negative power");
      return Value(std::pow(p, q));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    budget.check_string(a.string().size() + b.string().size());
    budget.charge(a.string().size() + b.string().size());
    return Value(a.string() + b.string());
  }
  if (op == "+" && a.kind() == Kind::kArray && b.kind() == Kind::kArray &&
      a.is_tuple() == b.is_tuple()) {
    budget.check_list(a.array().size() + b.array().size());
    Array out = a.array();
    out.insert(out.end(), b.array().begin(), b.array().end());
    budget.charge(out.size());
    return a.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
  }
  if (op == "*") {
    if ((a.is_string() || a.kind() == Kind::kArray) && is_integral(b))
      return repeat(a, as_int(b), budget);
    if ((b.is_string() || b.kind() == Kind::kArray) && is_integral(a))
      return repeat(b, as_int(a), budget);
  }
  if (op == "%" && a.is_string())
    QKV_CHECK(false, "string formatting with % is not supported in chat templates");
  unsupported(op, a, b);
}

bool compare_operator(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = three_way(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value unary_operator(std::string_view op, const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  QKV_CHECK_TYPE(a.is_number(), "bad operand type for unary ", op, ": '", type_name(a), "'");
  if (op == "+") return a.kind() == Kind::kBool ? Value(int64_t{a.boolean()}) : a;
  if (a.kind() == Kind::kFloat) return Value(-a.floating());
  const int64_t x = as_int(a);
  QKV_CHECK(x != INT64_MIN, "integer overflow in unary -");
  return Value(-x);
}

}  // namespace qkv::text::jinja
