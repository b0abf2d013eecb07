#include "qkv/precision.h"

#include <string>

#include "qkv/error.h"
#include "tensor/enum_names.h"

namespace qkv {
namespace {

// The first name of each precision is its canonical one.
constexpr detail::EnumName<Precision> kPrecisionNames[] = {
    {Precision::kFloat32, "float32"}, {Precision::kBFloat16, "bfloat16"},
    {Precision::kInt8, "int8"},       {Precision::kFloat32, "fp32"},
    {Precision::kBFloat16, "bf16"},
};

}  // namespace

const char* precision_name(Precision precision) {
  return detail::name_of(kPrecisionNames, precision);
}

Precision parse_precision(std::string_view name) {
  for (const auto& entry : kPrecisionNames)
    if (name == entry.name) return entry.value;
  throw Error(
      ErrorKind::kValue,
      "precision must be float32 (fp32), bfloat16 (bf16) or int8, got '" + std::string(name) + "'");
}

}  // namespace qkv
