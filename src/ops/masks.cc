#include "qkv/masks.h"

#include <limits>

#include "kernels/reference/sdpa_reference.h"
#include "ops/checks.h"

namespace qkv {

namespace {
Tensor mask_from_lengths(const std::vector<int64_t>& lengths, int64_t max_len, bool keep_value,
                         const char* fn) {
  QKV_CHECK(max_len >= 0, fn, ": max_len must be non-negative, got ", max_len);
  const int64_t B = static_cast<int64_t>(lengths.size());
  Tensor mask = Tensor::empty({B, max_len}, DType::kBool);
  bool* m = mask.data<bool>();
  for (int64_t b = 0; b < B; ++b) {
    QKV_CHECK(lengths[b] >= 0 && lengths[b] <= max_len, fn, ": lengths[", b, "] = ", lengths[b],
              " is outside [0, max_len = ", max_len, "]");
    for (int64_t s = 0; s < max_len; ++s) m[b * max_len + s] = (s < lengths[b]) == keep_value;
  }
  return mask;
}
}  // namespace

Tensor keep_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t max_len) {
  return mask_from_lengths(lengths, max_len, true, "keep_mask_from_lengths");
}

Tensor padding_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t max_len) {
  return mask_from_lengths(lengths, max_len, false, "padding_mask_from_lengths");
}

Tensor causal_mask(int64_t L, int64_t S, CausalMask alignment) {
  QKV_CHECK(L >= 0 && S >= 0, "causal_mask: L and S must be non-negative, got L = ", L,
            ", S = ", S);
  QKV_CHECK(alignment != CausalMask::kNone,
            "causal_mask: alignment must be kTopLeft or kBottomRight, got kNone");
  Tensor mask = Tensor::empty({L, S}, DType::kBool);
  bool* m = mask.data<bool>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) m[i * S + j] = kernels::causal_allows(alignment, i, j, L, S);
  return mask;
}

Tensor key_mask_for_heads(const Tensor& mask) {
  check_dim(mask, 2, "key_mask_for_heads", "mask", "[B, S]");
  return mask.unsqueeze(1).unsqueeze(1);
}

Tensor logical_not(const Tensor& mask) {
  check_defined(mask, "logical_not", "mask");
  QKV_CHECK_TYPE(mask.dtype() == DType::kBool, "logical_not: mask must be bool, got ",
                 dtype_name(mask.dtype()));
  Tensor out = Tensor::empty(mask.shape(), DType::kBool);
  const bool* in = mask.data<bool>();
  bool* o = out.data<bool>();
  for_each_offset(mask.shape(), mask.strides(), [&](int64_t i, int64_t off) { o[i] = !in[off]; });
  return out;
}

Tensor keep_mask_to_additive(const Tensor& keep_mask, DType dtype) {
  check_defined(keep_mask, "keep_mask_to_additive", "keep_mask");
  QKV_CHECK_TYPE(keep_mask.dtype() == DType::kBool,
                 "keep_mask_to_additive: keep_mask must be bool, got ",
                 dtype_name(keep_mask.dtype()));
  QKV_CHECK_TYPE(is_floating(dtype), "keep_mask_to_additive: dtype must be floating, got ",
                 dtype_name(dtype));
  Tensor out = Tensor::empty(keep_mask.shape(), dtype);
  const bool* in = keep_mask.data<bool>();
  const double neg_inf = -std::numeric_limits<double>::infinity();
  Tensor flat = out.view({-1});
  for_each_offset(keep_mask.shape(), keep_mask.strides(),
                  [&](int64_t i, int64_t off) { flat.set({i}, in[off] ? 0.0 : neg_inf); });
  return out;
}

}  // namespace qkv
