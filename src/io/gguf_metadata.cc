// GGUF: the typed getters of metadata values.
#include <limits>
#include <type_traits>

#include "io/gguf_util.h"
#include "qkv/io/gguf.h"

namespace qkv::io {

using gguf_detail::quoted;

namespace {

// "u32", "string", "array of string (3 elements)".
std::string describe(const GgufValue& value) {
  const auto type = static_cast<GgufValueType>(value.index());
  if (const auto* array = std::get_if<GgufArray>(&value)) {
    const size_t size = std::visit(
        [](const auto& elements) -> size_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(elements)>, std::monostate>) {
            return 0;
          } else {
            return elements.size();
          }
        },
        *array);
    return detail::concat("array of ",
                          gguf_value_type_name(static_cast<GgufValueType>(array->index())), " (",
                          size, " elements)");
  }
  return std::string(gguf_value_type_name(type));
}

template <class T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// An integer of any GGUF type: its sign and magnitude.
struct Integer {
  bool negative;
  uint64_t magnitude_or_value;  // the value if !negative, else -(value) as uint64
};

template <class T>
Integer to_integer(T v) {
  if constexpr (std::is_signed_v<T>) {
    if (v < 0) return {true, uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(v))};
  }
  return {false, static_cast<uint64_t>(v)};
}

// The integer `value` holds, or nullopt if it holds something else.
std::optional<Integer> integer_of(const GgufValue& value) {
  return std::visit(
      [](const auto& v) -> std::optional<Integer> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (kIsInteger<T>) {
          return to_integer(v);
        } else {
          return std::nullopt;
        }
      },
      value);
}

}  // namespace

const GgufValue& GgufFile::value(std::string_view key) const {
  const auto it = metadata_.find(key);
  QKV_CHECK(it != metadata_.end(), "GGUF file '", source_, "' has no metadata key ", quoted(key));
  return it->second;
}

GgufValueType GgufFile::type(std::string_view key) const {
  return static_cast<GgufValueType>(value(key).index());
}

namespace {

[[noreturn]] void wrong_type(const std::string& source, std::string_view key,
                             const GgufValue& value, std::string_view wanted) {
  throw Error(ErrorKind::kType,
              detail::concat("GGUF file '", source, "': metadata key ", quoted(key), " is ",
                             describe(value), ", expected ", wanted));
}

}  // namespace

const std::string& GgufFile::string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  wrong_type(source_, key, v, "a string");
}

uint64_t GgufFile::uint(std::string_view key) const {
  const GgufValue& v = value(key);
  const std::optional<Integer> i = integer_of(v);
  if (!i) wrong_type(source_, key, v, "an integer (u8 .. i64)");
  QKV_CHECK(!i->negative, "GGUF file '", source_, "': metadata key ", quoted(key), " is -",
            i->magnitude_or_value, ", expected a non-negative integer");
  return i->magnitude_or_value;
}

int64_t GgufFile::integer(std::string_view key) const {
  const GgufValue& v = value(key);
  const std::optional<Integer> i = integer_of(v);
  if (!i) wrong_type(source_, key, v, "an integer (u8 .. i64)");
  if (i->negative) return static_cast<int64_t>(uint64_t{0} - i->magnitude_or_value);
  QKV_CHECK(i->magnitude_or_value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
            "GGUF file '", source_, "': metadata key ", quoted(key), " is ", i->magnitude_or_value,
            ", more than an int64 holds");
  return static_cast<int64_t>(i->magnitude_or_value);
}

double GgufFile::number(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  wrong_type(source_, key, v, "a number (f32 or f64)");
}

bool GgufFile::boolean(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  wrong_type(source_, key, v, "a bool");
}

const std::vector<std::string>& GgufFile::strings(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const auto* array = std::get_if<GgufArray>(&v)) {
    if (const auto* s = std::get_if<std::vector<std::string>>(array)) return *s;
  }
  wrong_type(source_, key, v, "an array of strings");
}

std::vector<int64_t> GgufFile::integers(std::string_view key) const {
  const GgufValue& v = value(key);
  const auto* array = std::get_if<GgufArray>(&v);
  if (array == nullptr) wrong_type(source_, key, v, "an array of integers");
  return std::visit(
      [&](const auto& elements) -> std::vector<int64_t> {
        using Vector = std::decay_t<decltype(elements)>;
        if constexpr (std::is_same_v<Vector, std::monostate>) {
          wrong_type(source_, key, v, "an array of integers");
        } else if constexpr (!kIsInteger<typename Vector::value_type>) {
          wrong_type(source_, key, v, "an array of integers");
        } else {
          std::vector<int64_t> out;
          out.reserve(elements.size());
          for (size_t i = 0; i < elements.size(); ++i) {
            if constexpr (std::is_same_v<typename Vector::value_type, uint64_t>) {
              QKV_CHECK(elements[i] <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                        "GGUF file '", source_, "': metadata key ", quoted(key), " holds ",
                        elements[i], " at element ", i, ", more than an int64 holds");
            }
            out.push_back(static_cast<int64_t>(elements[i]));
          }
          return out;
        }
      },
      *array);
}

std::vector<double> GgufFile::numbers(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const auto* array = std::get_if<GgufArray>(&v)) {
    if (const auto* f = std::get_if<std::vector<float>>(array)) return {f->begin(), f->end()};
    if (const auto* d = std::get_if<std::vector<double>>(array)) return *d;
  }
  wrong_type(source_, key, v, "an array of numbers (f32 or f64)");
}

namespace {

// A find_*: nullopt when the key is absent, else what the getter `get` reads.
template <class Getter>
auto find_with(const GgufFile& file, std::string_view key, Getter get)
    -> std::optional<std::decay_t<decltype((file.*get)(key))>> {
  if (!file.has(key)) return std::nullopt;
  return (file.*get)(key);
}

}  // namespace

std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  return find_with(*this, key, &GgufFile::string);
}
std::optional<uint64_t> GgufFile::find_uint(std::string_view key) const {
  return find_with(*this, key, &GgufFile::uint);
}
std::optional<int64_t> GgufFile::find_integer(std::string_view key) const {
  return find_with(*this, key, &GgufFile::integer);
}
std::optional<double> GgufFile::find_number(std::string_view key) const {
  return find_with(*this, key, &GgufFile::number);
}
std::optional<bool> GgufFile::find_boolean(std::string_view key) const {
  return find_with(*this, key, &GgufFile::boolean);
}

}  // namespace qkv::io
