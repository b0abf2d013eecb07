// Enum <-> name tables: one row per value, so that a name is written once and
// a value without a name is easy to see. Internal (not installed).
//
//   constexpr EnumName<DType> kNames[] = {{DType::kFloat32, "float32"}, ...};
//   name_of(kNames, DType::kFloat32)   // "float32"
#pragma once

#include <cstddef>

namespace qkv::detail {

template <class Enum>
struct EnumName {
  Enum value;
  const char* name;
};

// The name of `value` in `table`, or `missing` when it has none.
template <class Enum, size_t N>
constexpr const char* name_of(const EnumName<Enum> (&table)[N], Enum value,
                              const char* missing = "?") {
  for (const EnumName<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  return missing;
}

}  // namespace qkv::detail
