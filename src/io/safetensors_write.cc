// safetensors: the writer, byte for byte as the reference implementation.
#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "qkv/io/atomic_file.h"
#include "qkv/io/safetensors.h"
#include "tensor/enum_names.h"

namespace qkv::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; qkv writes it with memcpy");

constexpr ::qkv::detail::EnumName<DType> kSafetensorsDtypes[] = {{DType::kFloat32, "F32"},
                                                                 {DType::kFloat64, "F64"},
                                                                 {DType::kBool, "BOOL"},
                                                                 {DType::kBFloat16, "BF16"}};

const char* safetensors_dtype_name(DType dtype) {
  return ::qkv::detail::name_of(kSafetensorsDtypes, dtype);
}

namespace {

using nlohmann::json;

// `s` as a JSON string literal, escaped as the reference (serde_json) does:
// quote, backslash and control characters only. Rejects invalid UTF-8.
std::string json_string(const std::string& s, const char* what) {
  try {
    return json(s).dump();
  } catch (const json::type_error&) {
    throw Error(ErrorKind::kValue,
                detail::concat("save_safetensors: ", what, " ",
                               json(s).dump(-1, ' ', false, json::error_handler_t::replace),
                               " is not valid UTF-8"));
  }
}

struct Planned {
  const std::string* name;
  Tensor tensor;  // contiguous
};

// Checks the inputs, orders the tensors as the reference writer does and
// builds the padded header. `emit` receives the file's bytes in order.
void write_safetensors(const std::map<std::string, Tensor>& tensors,
                       const SafetensorsMetadata& metadata,
                       const std::function<void(std::span<const std::byte>)>& emit) {
  std::vector<Planned> plan;
  for (const auto& [name, tensor] : tensors) {
    QKV_CHECK(name != "__metadata__",
              "save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    QKV_CHECK(tensor.defined(), "save_safetensors: tensor ", json_string(name, "tensor name"),
              " is undefined");
    plan.push_back({&name, tensor.contiguous()});
  }
  // Widest dtype first (F64, F32, BOOL), then by name: each tensor then starts
  // at a multiple of its element size.
  std::stable_sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    return dtype_size(a.tensor.dtype()) > dtype_size(b.tensor.dtype());
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      header += json_string(key, "metadata key");
      header += ':';
      header += json_string(value, "metadata value");
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const Planned& p : plan) {
    const uint64_t nbytes = static_cast<uint64_t>(p.tensor.numel()) * dtype_size(p.tensor.dtype());
    if (header.size() > 1) header += ",";
    header += json_string(*p.name, "tensor name") + ":{\"dtype\":\"" +
              safetensors_dtype_name(p.tensor.dtype()) + "\",\"shape\":[";
    for (size_t d = 0; d < p.tensor.shape().size(); ++d) {
      if (d) header += ',';
      header += std::to_string(p.tensor.shape()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  QKV_CHECK(header.size() <= kSafetensorsMaxHeaderBytes, "save_safetensors: the header would be ",
            header.size(), " bytes, more than readers accept (", kSafetensorsMaxHeaderBytes, ")");

  std::byte length[8];
  const uint64_t n = header.size();
  std::memcpy(length, &n, 8);
  emit(length);
  emit(std::as_bytes(std::span<const char>(header.data(), header.size())));
  for (const Planned& p : plan) {
    const size_t nbytes = static_cast<size_t>(p.tensor.numel()) * dtype_size(p.tensor.dtype());
    if (nbytes > 0) emit({static_cast<const std::byte*>(p.tensor.raw_data()), nbytes});
  }
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                             const SafetensorsMetadata& metadata) {
  std::vector<std::byte> bytes;
  write_safetensors(tensors, metadata, [&](std::span<const std::byte> part) {
    bytes.insert(bytes.end(), part.begin(), part.end());
  });
  return bytes;
}

void save_safetensors(const std::filesystem::path& path,
                      const std::map<std::string, Tensor>& tensors,
                      const SafetensorsMetadata& metadata) {
  // The temporary file is created at the first byte, after every check passed.
  std::unique_ptr<AtomicFileWriter> out;
  write_safetensors(tensors, metadata, [&](std::span<const std::byte> part) {
    if (!out) out = std::make_unique<AtomicFileWriter>(path);
    out->write(part);
  });
  out->commit();
}

}  // namespace qkv::io
