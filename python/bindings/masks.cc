// The mask helpers of qkv/masks.h (module qkv.masks).
#include "qkv/masks.h"

#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"

namespace qkv::python {

namespace {

CausalMask parse_alignment(const std::string& alignment) {
  if (alignment == "top_left") return CausalMask::kTopLeft;
  if (alignment == "bottom_right") return CausalMask::kBottomRight;
  throw py::value_error(
      "causal_mask(): argument 'alignment' must be 'top_left' or 'bottom_right', got '" +
      alignment + "'");
}

// Mask helpers may return views of their input; the caller gets its own array.
py::array fresh(const Tensor& result, const Tensor& input) {
  return to_numpy(result.shares_storage_with(input) ? result.clone() : result);
}

// name(lengths, max_len): a mask made from sequence lengths.
template <class MakeMask>
void def_from_lengths(py::module_& m, const char* name, MakeMask make_mask) {
  m.def(
      name,
      [make_mask](const std::vector<int64_t>& lengths, int64_t max_len) {
        return to_numpy(make_mask(lengths, max_len));
      },
      py::arg("lengths"), py::arg("max_len"));
}

// name(mask): a mask made from another, `accept`ed as input.
template <class Transform>
void def_from_mask(py::module_& m, const char* name, Accept accept, Transform transform) {
  m.def(
      name,
      [name, accept, transform](py::handle mask) {
        const Tensor t = to_tensor(mask, name, "mask", accept);
        return fresh(transform(t), t);
      },
      py::arg("mask"));
}

}  // namespace

void bind_masks(py::module_& m) {
  def_from_lengths(m, "keep_mask_from_lengths", &keep_mask_from_lengths);
  def_from_lengths(m, "padding_mask_from_lengths", &padding_mask_from_lengths);
  m.def(
      "causal_mask",
      [](int64_t L, int64_t S, const std::string& alignment) {
        return to_numpy(causal_mask(L, S, parse_alignment(alignment)));
      },
      py::arg("L"), py::arg("S"), py::arg("alignment"));
  def_from_mask(m, "key_mask_for_heads", Accept::kFloatOrBool, &key_mask_for_heads);
  def_from_mask(m, "logical_not", Accept::kBool, &logical_not);
  m.def(
      "keep_mask_to_additive",
      [](py::handle keep_mask, py::handle dtype) {
        const char* fn = "keep_mask_to_additive";
        const Tensor t = to_tensor(keep_mask, fn, "keep_mask", Accept::kBool);
        return fresh(keep_mask_to_additive(t, parse_float_dtype(dtype, fn, "dtype")), t);
      },
      py::arg("keep_mask"), py::arg("dtype"));
}

}  // namespace qkv::python
