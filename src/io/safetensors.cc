// safetensors: a reader that validates everything (the writer is in safetensors_write.cc).
#include "qkv/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_document.h"
#include "io/stored_values.h"

namespace qkv::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; qkv reads it with memcpy");

namespace {

using nlohmann::json;

struct DTypeInfo {
  const char* name;
  int bits;
};

// Every dtype of the reference implementation (safetensors 0.6).
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

// Index of the first byte that is not part of valid UTF-8 (no overlong forms,
// no surrogates, nothing above U+10FFFF), or npos.
size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len;
    uint32_t min;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string json_quoted(const std::string& s) {
  // dump() escapes control characters; replace keeps bad UTF-8 printable.
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

template <class... Parts>
[[noreturn]] void invalid(const std::string& source, const Parts&... parts) {
  throw Error(ErrorKind::kValue,
              detail::concat("invalid safetensors file '", source, "': ", parts...));
}

// A JSON value for an error message, cut short if long.
std::string brief(const json& value) { return json_excerpt(value, 80); }

std::vector<std::byte> read_whole_file(const std::filesystem::path& path) {
  auto fail = [&](const char* what) {
    const int error = errno;
    throw Error(ErrorKind::kIO,
                detail::concat("cannot read safetensors file '", path.string(), "': ", what, ": ",
                               std::strerror(error)),
                error);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open failed");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("stat failed");
  }
  std::vector<std::byte> bytes;
  bytes.reserve(S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) : 0);
  std::byte buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      errno = err;
      fail("read failed");
    }
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  ::close(fd);
  return bytes;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

// float8 e4m3fn (torch.float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN.
float e4m3_to_float(uint8_t b) {
  const uint32_t exponent = (b >> 3) & 0xF;
  const uint32_t mantissa = b & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(1.0f + mantissa / 8.0f, static_cast<int>(exponent) - 7);
  }
  return (b & 0x80) ? -magnitude : magnitude;
}

}  // namespace

int safetensors_dtype_bits(const std::string& dtype) {
  for (const DTypeInfo& info : kDTypes)
    if (dtype == info.name) return info.bits;
  return 0;
}

// --- Reading -------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : source_(path.string()), bytes_(read_whole_file(path)) {
  parse();
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::byte> bytes,
                                            const std::string& source) {
  SafetensorsFile file;
  file.source_ = source;
  file.bytes_ = std::move(bytes);
  file.parse();
  return file;
}

namespace {

// One tensor's entry of the header, checked against itself and the data size.
SafetensorsEntry parse_entry(const std::string& source, const std::string& key, const json& value,
                             uint64_t data_size) {
  const std::string where = "tensor " + json_quoted(key);
  if (!value.is_object()) invalid(source, where, " must be an object, got ", brief(value));
  for (const auto& [field, unused] : value.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      invalid(source, where, " has an unknown field ", json_quoted(field),
              " (expected \"dtype\", \"shape\" and \"data_offsets\")");
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) invalid(source, where, " has no field \"", field, "\"");
  }
  SafetensorsEntry entry;
  entry.name = key;

  const json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    invalid(source, where, ": \"dtype\" must be a string, got ", brief(dtype));
  }
  entry.dtype = dtype.get<std::string>();
  const int bits = safetensors_dtype_bits(entry.dtype);
  if (bits == 0) invalid(source, where, " has unknown dtype ", json_quoted(entry.dtype));

  const json& shape = value["shape"];
  if (!shape.is_array()) invalid(source, where, ": \"shape\" must be an array, got ", brief(shape));
  uint64_t total_bits = static_cast<uint64_t>(bits);
  bool overflow = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const json& size = shape[d];
    if (!size.is_number_unsigned() ||
        size.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      invalid(source, where, ": shape ", brief(shape), " has ", brief(size), " at dimension ", d,
              " (expected a non-negative integer)");
    }
    entry.shape.push_back(size.get<int64_t>());
    overflow = overflow || !checked_mul(total_bits, size.get<uint64_t>(), total_bits);
  }
  if (overflow) {
    invalid(source, where, ": shape ", brief(shape), " x ", entry.dtype, " overflows 64 bits");
  }
  if (total_bits % 8 != 0) {
    invalid(source, where, ": shape ", brief(shape), " of ", entry.dtype, " is ", total_bits,
            " bits, not a whole number of bytes");
  }

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    invalid(source, where,
            ": \"data_offsets\" must be [begin, end] with non-negative integers, got ",
            brief(offsets));
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    invalid(source, where, ": data_offsets ", brief(offsets), " end before they begin");
  }
  if (entry.end - entry.begin != total_bits / 8) {
    invalid(source, where, ": data_offsets ", brief(offsets), " span ", entry.end - entry.begin,
            " bytes but shape ", brief(shape), " of ", entry.dtype, " needs ", total_bits / 8);
  }
  if (entry.end > data_size) {
    invalid(source, where, ": data_offsets ", brief(offsets),
            " go past the end of the data section (", data_size, " bytes)");
  }
  return entry;
}

// The tensors must cover the data section exactly once, in any order.
void check_tiling(const std::string& source, std::vector<const SafetensorsEntry*> by_offset,
                  uint64_t data_size) {
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin > covered) {
      invalid(source, "bytes [", covered, ", ", e->begin,
              ") of the data section belong to no tensor (a gap before tensor ",
              json_quoted(e->name), ")");
    }
    if (e->begin < covered) {
      invalid(source, "tensor ", json_quoted(e->name), " at bytes [", e->begin, ", ", e->end,
              ") overlaps tensor ", json_quoted(previous->name), " at bytes [", previous->begin,
              ", ", previous->end, ")");
    }
    covered = e->end;
    previous = e;
  }
  if (covered != data_size) {
    invalid(source, "the data section has ", data_size, " bytes but the tensors cover only ",
            covered, " (", data_size - covered, " trailing bytes)");
  }
}

}  // namespace

void SafetensorsFile::parse() {
  auto bad = [&](const auto&... parts) { invalid(source_, parts...); };
  const uint64_t file_size = bytes_.size();
  if (file_size < 8) bad("it has ", file_size, " bytes, fewer than the 8 of the header length");
  const uint64_t header_size = read_le<uint64_t>(bytes_.data());
  if (header_size > kSafetensorsMaxHeaderBytes) {
    bad("the header length is ", header_size, " bytes, more than the limit of ",
        kSafetensorsMaxHeaderBytes);
  }
  if (header_size > file_size - 8) {
    bad("the header length is ", header_size, " bytes but only ", file_size - 8,
        " bytes follow the length field");
  }
  data_start_ = 8 + header_size;
  const uint64_t data_size = file_size - data_start_;
  const std::string_view header(reinterpret_cast<const char*>(bytes_.data()) + 8, header_size);

  if (size_t at = invalid_utf8_at(header); at != std::string_view::npos) {
    bad("the header is not valid UTF-8 (byte ", at, " of the header)");
  }
  if (header.empty() || header[0] != '{') bad("the header does not start with '{'");
  // nlohmann's lexer takes a NUL byte for the end of the input and would
  // ignore whatever follows; JSON allows no raw NUL anywhere.
  if (size_t at = header.find('\0'); at != std::string_view::npos) {
    bad("the header is not valid JSON: NUL byte at byte ", at, " of the header");
  }
  // A plain parse would silently keep the last value of a repeated key.
  JsonDuplicateKey duplicate;
  const json root =
      parse_json(header, "invalid safetensors file '" + source_ + "': the header", &duplicate);
  if (duplicate.found) {
    const size_t depth = duplicate.enclosing.size();
    bad("the header repeats ", depth == 0   ? "tensor name " + json_quoted(duplicate.key)
                               : depth == 1 ? "key " + json_quoted(duplicate.key) + " inside " +
                                                  json_quoted(duplicate.enclosing[0])
                                            : "key " + json_quoted(duplicate.key));
  }
  if (!root.is_object()) bad("the header is not a JSON object");

  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) bad("\"__metadata__\" must be an object, got ", brief(value));
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          bad("\"__metadata__\" must map strings to strings, but ", json_quoted(meta_key),
              " maps to ", brief(meta_value));
        }
        metadata_[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    const auto [it, inserted] = entries_.emplace(key, parse_entry(source_, key, value, data_size));
    by_offset.push_back(&it->second);
  }
  check_tiling(source_, std::move(by_offset), data_size);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  QKV_CHECK(it != entries_.end(), "safetensors file '", source_, "' has no tensor ",
            json_quoted(name));
  return it->second;
}

std::span<const std::byte> SafetensorsFile::raw(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return {bytes_.data() + data_start_ + e.begin, static_cast<size_t>(e.nbytes())};
}

Tensor SafetensorsFile::load(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const std::byte* src = raw(name).data();
  const int64_t n = e.numel();
  const std::string& dt = e.dtype;
  auto as_f32 = [&](auto stored_tag, auto convert) {
    Tensor t = Tensor::empty(e.shape, DType::kFloat32);
    convert_all<decltype(stored_tag)>(src, n, t.data<float>(), convert);
    return t;
  };
  auto as_f64 = [&](auto stored_tag) {
    Tensor t = Tensor::empty(e.shape, DType::kFloat64);
    using Stored = decltype(stored_tag);
    convert_all<Stored>(src, n, t.data<double>(), [](Stored v) { return static_cast<double>(v); });
    return t;
  };
  if (dt == "F32" || dt == "F64") {
    Tensor t = Tensor::empty(e.shape, dt == "F32" ? DType::kFloat32 : DType::kFloat64);
    if (n > 0) std::memcpy(t.raw_data(), src, e.nbytes());
    return t;
  }
  if (dt == "BOOL") {  // any non-zero byte is true: a bool must hold exactly 0 or 1
    Tensor t = Tensor::empty(e.shape, DType::kBool);
    bool* out = t.data<bool>();
    for (int64_t i = 0; i < n; ++i) out[i] = src[i] != std::byte{0};
    return t;
  }
  if (dt == "F16") return as_f32(uint16_t{}, half_to_float);
  if (dt == "BF16") {
    return as_f32(uint16_t{}, [](uint16_t v) { return std::bit_cast<float>(uint32_t{v} << 16); });
  }
  // e5m2 is the top byte of an IEEE half.
  if (dt == "F8_E5M2") return as_f32(uint8_t{}, [](uint8_t v) { return half_to_float(v << 8); });
  if (dt == "F8_E4M3") return as_f32(uint8_t{}, e4m3_to_float);
  if (dt == "U8") return as_f64(uint8_t{});
  if (dt == "I8") return as_f64(int8_t{});
  if (dt == "U16") return as_f64(uint16_t{});
  if (dt == "I16") return as_f64(int16_t{});
  if (dt == "U32") return as_f64(uint32_t{});
  if (dt == "I32") return as_f64(int32_t{});
  if (dt == "I64" || dt == "U64") {
    Tensor t = Tensor::empty(e.shape, DType::kFloat64);
    double* out = t.data<double>();
    for (int64_t i = 0; i < n; ++i) {
      const std::byte* p = src + i * 8;
      bool exact;
      std::string text;
      if (dt == "I64") {
        const int64_t v = read_le<int64_t>(p);
        out[i] = static_cast<double>(v);
        // 2^63 itself is out of range of int64: compare before converting back.
        exact = out[i] < 0x1p63 && static_cast<int64_t>(out[i]) == v;
        text = std::to_string(v);
      } else {
        const uint64_t v = read_le<uint64_t>(p);
        out[i] = static_cast<double>(v);
        exact = out[i] < 0x1p64 && static_cast<uint64_t>(out[i]) == v;
        text = std::to_string(v);
      }
      QKV_CHECK(exact, "safetensors file '", source_, "': tensor ", json_quoted(name), " (", dt,
                ") holds ", text, " at element ", i, ", which float64 cannot represent exactly");
    }
    return t;
  }
  throw Error(
      ErrorKind::kType,
      detail::concat("safetensors file '", source_, "': tensor ", json_quoted(name), " has dtype ",
                     dt, ", which cannot be loaded as a qkv Tensor (float32, float64 or ",
                     "bool); raw() gives its bytes"));
}

std::map<std::string, Tensor> SafetensorsFile::load_all() const {
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, entry] : entries_) tensors.emplace(name, load(name));
  return tensors;
}

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path) {
  return SafetensorsFile(path).load_all();
}

}  // namespace qkv::io
