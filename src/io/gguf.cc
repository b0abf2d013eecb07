// GGUF: mapping the file and validating everything in it (the getters are in gguf_metadata.cc,
// load() in gguf_load.cc).
#include "qkv/io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
#include <variant>

#include "io/gguf_util.h"

namespace qkv::io {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; qkv reads it with memcpy");

using gguf_detail::invalid;
using gguf_detail::quoted;

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr std::string_view kAlignmentKey = "general.alignment";

// The fewest bytes a metadata entry (key length, type, a 1-byte value) and a tensor info
// (name length, n_dims, type, offset) can take: counts above remaining / these cannot be true.
constexpr uint64_t kMinEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

// A read-only mapping of a whole file.
class Mapping {
 public:
  Mapping(void* address, size_t size) : address_(address), size_(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (address_ != nullptr) ::munmap(address_, size_);
  }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(address_), size_};
  }

 private:
  void* address_;
  size_t size_;
};

std::shared_ptr<const Mapping> map_file(const std::filesystem::path& path) {
  auto fail = [&](const char* what, int error) {
    throw Error(ErrorKind::kIO,
                detail::concat("cannot read GGUF file '", path.string(), "': ", what,
                               error != 0 ? ": " : "", error != 0 ? std::strerror(error) : ""),
                error);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open failed", errno);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail("stat failed", error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file (a GGUF file is memory-mapped)", 0);
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* address = nullptr;
  if (size > 0) {  // mmap rejects a length of 0; an empty file is reported by the parser
    address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      fail("mmap failed", error);
    }
  }
  ::close(fd);  // the mapping stays valid
  return std::make_shared<const Mapping>(address, size);
}

template <class T>
T read_le(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Reads the fields of a file in order. `where` (set by the caller) names the entry being read
// in error messages.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  uint64_t position() const { return position_; }
  uint64_t remaining() const { return bytes_.size() - position_; }
  void set_where(std::string where) { where_ = std::move(where); }

  template <class... Parts>
  [[noreturn]] void bad(const Parts&... parts) const {
    invalid(source_, where_, where_.empty() ? "" : ": ", parts...);
  }

  // Throws unless `n` more bytes are there for `what`.
  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      bad(what, " needs ", n, " bytes at byte ", position_, " but the file ends ", remaining(),
          " bytes later (truncated?)");
    }
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    const T value = read_le<T>(bytes_.data() + position_);
    position_ += sizeof(T);
    return value;
  }

  // A GGUF string: u64 length, then the bytes.
  std::string_view string(std::string_view what) {
    const auto length = read<uint64_t>(what);
    if (length > remaining()) {
      bad(what, " is ", length, " bytes long but only ", remaining(), " bytes follow at byte ",
          position_);
    }
    return take(length);
  }

  std::string_view take(uint64_t n) {
    const std::string_view view(reinterpret_cast<const char*>(bytes_.data()) + position_, n);
    position_ += n;
    return view;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  uint64_t position_ = 0;
  std::string where_;
};

// The key of a metadata entry or the name of a tensor: not empty, UTF-8, no NUL (ggml keeps
// them as C strings: "a\0b" would be "a").
void check_name(const Cursor& cursor, std::string_view name, std::string_view what) {
  if (name.empty()) cursor.bad("the ", what, " is empty");
  size_t bad_at = 0;
  if (!gguf_detail::valid_utf8(name, &bad_at)) {
    cursor.bad("the ", what, " ", quoted(name), " is not valid UTF-8 (byte ", bad_at, ")");
  }
  if (const size_t nul = name.find('\0'); nul != std::string_view::npos) {
    cursor.bad("the ", what, " ", quoted(name), " contains a NUL byte (byte ", nul, ")");
  }
}

constexpr uint32_t kValueTypeCount = std::variant_size_v<GgufValue>;  // 13

// f(std::integral_constant<size_t, type>{}) for a value type number below kValueTypeCount:
// alternative `type` of GgufValue (and of GgufArray) is that type's C++ type, so one
// template over the index reads every type.
template <class F>
auto with_value_type(uint32_t type, F&& f) {
  using Result = decltype(f(std::integral_constant<size_t, 0>{}));
  return [&]<size_t... I>(std::index_sequence<I...>) {
    Result result{};
    ((type == I ? (result = f(std::integral_constant<size_t, I>{}), true) : false) || ...);
    return result;
  }(std::make_index_sequence<kValueTypeCount>{});
}

template <size_t I>
using ValueOf = std::variant_alternative_t<I, GgufValue>;

// u8 .. f64: the types stored as their little-endian bytes.
template <class T>
constexpr bool kPlainNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// Bytes of one array element (the least for a string: its length field; 0 for an array).
uint64_t element_bytes(uint32_t type) {
  return with_value_type(type, []<size_t I>(std::integral_constant<size_t, I>) -> uint64_t {
    using T = ValueOf<I>;
    if constexpr (std::is_same_v<T, std::string>)
      return sizeof(uint64_t);
    else if constexpr (std::is_same_v<T, GgufArray>)
      return 0;
    else
      return sizeof(T);
  });
}

bool read_bool(Cursor& cursor, std::string_view what) {
  const auto byte = cursor.read<uint8_t>(what);
  if (byte > 1) cursor.bad(what, " is a bool holding ", int{byte}, " (expected 0 or 1)");
  return byte == 1;
}

// A vector of `count` plain numbers, copied (the caller checked that they are there).
template <class T>
std::vector<T> read_numbers(Cursor& cursor, uint64_t count) {
  std::vector<T> values(count);
  const std::string_view raw = cursor.take(count * sizeof(T));
  if (count > 0) std::memcpy(values.data(), raw.data(), raw.size());
  return values;
}

std::vector<bool> read_bools(Cursor& cursor, uint64_t count) {
  std::vector<bool> values(count);
  for (uint64_t i = 0; i < count; ++i) {
    values[i] = read_bool(cursor, detail::concat("element ", i, " of the array"));
  }
  return values;
}

std::vector<std::string> read_strings(Cursor& cursor, uint64_t count) {
  std::vector<std::string> values;
  values.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    // The message is built only when it is needed: arrays hold 10^5 tokens.
    const auto length = cursor.read<uint64_t>("an array element's string length");
    if (length > cursor.remaining()) {
      cursor.bad("element ", i, " of the array is a string of ", length, " bytes but only ",
                 cursor.remaining(), " bytes follow at byte ", cursor.position());
    }
    values.emplace_back(cursor.take(length));
  }
  return values;
}

GgufArray read_array(Cursor& cursor) {
  const auto type = cursor.read<uint32_t>("the array's element type");
  if (type == static_cast<uint32_t>(GgufValueType::kArray)) {
    cursor.bad("an array of arrays (nested arrays are not supported)");
  }
  if (type >= kValueTypeCount) {
    cursor.bad("the array's element type is ", type, ", not a GGUF value type (0 to 12)");
  }
  const auto count = cursor.read<uint64_t>("the array's element count");
  const uint64_t each = element_bytes(type);
  if (count > cursor.remaining() / each) {
    cursor.bad("an array of ", count, " ", gguf_value_type_name(static_cast<GgufValueType>(type)),
               " needs at least ", each, " bytes per element but only ", cursor.remaining(),
               " bytes follow at byte ", cursor.position());
  }
  return with_value_type(type, [&]<size_t I>(std::integral_constant<size_t, I>) -> GgufArray {
    using T = ValueOf<I>;
    if constexpr (std::is_same_v<T, bool>)
      return read_bools(cursor, count);
    else if constexpr (std::is_same_v<T, std::string>)
      return read_strings(cursor, count);
    else if constexpr (kPlainNumber<T>)
      return GgufArray(std::in_place_index<I>, read_numbers<T>(cursor, count));
    else
      cursor.bad("unreachable element type ", type);
  });
}

GgufValue read_value(Cursor& cursor, uint32_t type) {
  if (type >= kValueTypeCount) {
    cursor.bad("the value type is ", type, ", not a GGUF value type (0 to 12)");
  }
  return with_value_type(type, [&]<size_t I>(std::integral_constant<size_t, I>) -> GgufValue {
    using T = ValueOf<I>;
    if constexpr (std::is_same_v<T, bool>)
      return read_bool(cursor, "the value");
    else if constexpr (std::is_same_v<T, std::string>)
      return std::string(cursor.string("the string value"));
    else if constexpr (std::is_same_v<T, GgufArray>)
      return read_array(cursor);
    else
      return GgufValue(std::in_place_index<I>,
                       cursor.read<T>(detail::concat(
                           "the ", gguf_value_type_name(static_cast<GgufValueType>(I)), " value")));
  });
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : source_(path.string()) {
  auto mapping = map_file(path);
  bytes_ = mapping->bytes();
  storage_ = std::move(mapping);
  parse();
}

GgufFile GgufFile::from_bytes(std::vector<std::byte> bytes, std::string source) {
  GgufFile file;
  file.source_ = std::move(source);
  auto owned = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  file.bytes_ = {owned->data(), owned->size()};
  file.storage_ = std::move(owned);
  file.parse();
  return file;
}

void GgufFile::parse() {
  Cursor cursor(bytes_, source_);

  // --- Header ---------------------------------------------------------------------------
  cursor.set_where("the header");
  cursor.need(4, "the magic \"GGUF\"");
  const std::string_view magic = cursor.take(4);
  if (magic != "GGUF") {
    cursor.bad("the file starts with ", quoted(magic), ", not the magic \"GGUF\"");
  }
  version_ = cursor.read<uint32_t>("the version");
  if ((version_ & 0xFFFF) == 0 && version_ != 0) {
    cursor.bad("the version reads ", version_, " (", __builtin_bswap32(version_),
               " byte-swapped): a big-endian GGUF file? qkv reads little-endian files only");
  }
  if (version_ == 1) {
    cursor.bad("GGUF version 1 is not supported (its counts are 32-bit; versions 2 and 3 are)");
  }
  if (version_ != 2 && version_ != 3) {
    cursor.bad("GGUF version ", version_, " is not supported (versions 2 and 3 are)");
  }
  const auto tensor_count = cursor.read<uint64_t>("the tensor count");
  const auto entry_count = cursor.read<uint64_t>("the metadata count");
  // Checked before anything is reserved: a count the rest of the file cannot hold is a lie.
  if (entry_count > cursor.remaining() / kMinEntryBytes) {
    cursor.bad(entry_count, " metadata entries need at least ", kMinEntryBytes,
               " bytes each but only ", cursor.remaining(), " bytes follow the header");
  }
  if (tensor_count > (cursor.remaining() - entry_count * kMinEntryBytes) / kMinTensorInfoBytes) {
    cursor.bad(tensor_count, " tensor infos need at least ", kMinTensorInfoBytes,
               " bytes each but only ", cursor.remaining() - entry_count * kMinEntryBytes,
               " bytes follow the header and ", entry_count, " metadata entries");
  }

  // --- Metadata -------------------------------------------------------------------------
  keys_.reserve(entry_count);
  for (uint64_t i = 0; i < entry_count; ++i) {
    cursor.set_where(detail::concat("metadata entry ", i));
    const std::string_view key = cursor.string("the key");
    check_name(cursor, key, "key");
    cursor.set_where(detail::concat("metadata entry ", i, " (key ", quoted(key), ")"));
    if (metadata_.find(key) != metadata_.end()) cursor.bad("the key is repeated");
    const auto type = cursor.read<uint32_t>("the value type");
    GgufValue value = read_value(cursor, type);
    keys_.emplace_back(key);
    metadata_.emplace(std::string(key), std::move(value));
  }

  if (auto it = metadata_.find(kAlignmentKey); it != metadata_.end()) {
    const auto* alignment = std::get_if<uint32_t>(&it->second);
    if (alignment == nullptr) {
      invalid(source_, "metadata key \"", kAlignmentKey, "\" is ",
              gguf_value_type_name(static_cast<GgufValueType>(it->second.index())),
              " (expected u32)");
    }
    if (!std::has_single_bit(*alignment)) {
      invalid(source_, "metadata key \"", kAlignmentKey, "\" is ", *alignment,
              " (expected a power of two)");
    }
    alignment_ = *alignment;
  } else {
    alignment_ = kDefaultAlignment;
  }

  // --- Tensor infos ---------------------------------------------------------------------
  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    cursor.set_where(detail::concat("tensor info ", i));
    GgufTensorInfo info;
    const std::string_view name = cursor.string("the tensor name");
    check_name(cursor, name, "tensor name");
    cursor.set_where(detail::concat("tensor ", quoted(name), " (tensor info ", i, ")"));
    if (tensor_index_.find(name) != tensor_index_.end()) cursor.bad("the name is repeated");
    info.name = name;

    const auto n_dims = cursor.read<uint32_t>("n_dims");
    if (n_dims > kMaxDims) cursor.bad("n_dims is ", n_dims, " (expected at most ", kMaxDims, ")");
    uint64_t numel = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto size = cursor.read<uint64_t>("a dimension");
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        cursor.bad("dimension ", d, " is ", size, " (expected at most 2^63 - 1)");
      }
      info.dims.push_back(static_cast<int64_t>(size));
      overflow = overflow || __builtin_mul_overflow(numel, size, &numel);
    }
    // A tensor with a dimension of 0 is empty, whatever the others are.
    const bool empty = std::find(info.dims.begin(), info.dims.end(), 0) != info.dims.end();
    if (empty) {
      numel = 0;
    } else if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      cursor.bad("dims ", dims_str(info.dims), " hold more than 2^63 - 1 elements");
    }

    const auto type = cursor.read<uint32_t>("the ggml type");
    const GgmlTypeTraits* traits = ggml_type_traits(type);
    if (traits == nullptr) {
      cursor.bad("unknown ggml type ", type, " (not one of ggml's types, or one it removed)");
    }
    info.type = static_cast<GgmlType>(type);
    const uint64_t row = info.dims.empty() ? 1 : static_cast<uint64_t>(info.dims[0]);
    if (row % traits->block_elements != 0) {
      cursor.bad("dims ", dims_str(info.dims), " of ", traits->name, ": dims[0] = ", row,
                 " is not a multiple of the block size ", traits->block_elements);
    }
    if (__builtin_mul_overflow(numel / traits->block_elements, uint64_t{traits->block_bytes},
                               &info.bytes)) {
      cursor.bad("dims ", dims_str(info.dims), " of ", traits->name,
                 " take more than 2^64 - 1 bytes");
    }
    info.offset = cursor.read<uint64_t>("the data offset");
    if (info.offset % alignment_ != 0) {
      cursor.bad("data offset ", info.offset, " is not a multiple of the alignment ", alignment_);
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // --- Data section ---------------------------------------------------------------------
  // Padded to the alignment after the tensor infos (without tensors, nothing need follow).
  const uint64_t end_of_infos = cursor.position();
  const uint64_t padded = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t file_size = bytes_.size();
  if (tensors_.empty()) {
    data_offset_ = std::min(padded, file_size);
    return;
  }
  if (padded > file_size) {
    invalid(source_, "the data section should start at byte ", padded,
            " (the tensor infos end at byte ", end_of_infos, ", padded to the alignment ",
            alignment_, ") but the file has only ", file_size, " bytes");
  }
  data_offset_ = padded;
  const uint64_t data_size = file_size - data_offset_;
  for (GgufTensorInfo& info : tensors_) {
    if (info.offset > data_size || info.bytes > data_size - info.offset) {
      invalid(source_, "tensor ", quoted(info.name), " (", ggml_type_name(info.type), " ",
              dims_str(info.dims), ", ", info.bytes, " bytes at data offset ", info.offset,
              ") goes past the end of the data section (", data_size, " bytes)");
    }
    info.data = bytes_.subspan(data_offset_ + info.offset, info.bytes);
  }
  // No two tensors share a byte (tensors of 0 bytes share none).
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& info : tensors_)
    if (info.bytes > 0) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.bytes > b.offset) {
      invalid(source_, "tensor ", quoted(b.name), " at data bytes [", b.offset, ", ",
              b.offset + b.bytes, ") overlaps tensor ", quoted(a.name), " at [", a.offset, ", ",
              a.offset + a.bytes, ")");
    }
  }
}

}  // namespace qkv::io
