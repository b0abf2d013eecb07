#include "ops/sdpa_bfloat16.h"

#include "ops/sdpa_prepare.h"
#include "qkv/error.h"

namespace qkv {

namespace {

Tensor widen(const Tensor& t) { return t.defined() ? t.to(DType::kFloat32) : t; }

Tensor narrow(const Tensor& t) { return t.defined() ? t.to(DType::kBFloat16) : t; }

// `wide` rounded to bfloat16 into a tensor laid out like `like` (SdpaLayout):
// the widened inputs are contiguous, so the float32 call's layout is not the
// caller's.
Tensor narrow_laid_out(const Tensor& wide, const Tensor& like, SdpaLayout layout) {
  if (layout == SdpaLayout::kContiguous) return narrow(wide);
  Tensor out = empty_laid_out(wide.shape(), DType::kBFloat16, like, layout);
  out.copy_from(wide);
  return out;
}

// All three bfloat16, and a float mask too (torch's rule: the query's dtype).
void check_bfloat16_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                           const SdpaOptions& options, const char* fn) {
  QKV_CHECK_TYPE(q.dtype() == DType::kBFloat16 && k.dtype() == DType::kBFloat16 &&
                     v.dtype() == DType::kBFloat16,
                 fn, ": query, key and value must have the same dtype, got ", dtype_name(q.dtype()),
                 ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  const Tensor& mask = options.attn_mask;
  QKV_CHECK_TYPE(
      !mask.defined() || mask.dtype() == DType::kBool || mask.dtype() == DType::kBFloat16, fn,
      ": attn_mask must be bool or bfloat16 like the query, got ",
      mask.defined() ? dtype_name(mask.dtype()) : "");
}

SdpaOptions widened_options(const SdpaOptions& options) {
  SdpaOptions wide = options;
  if (wide.attn_mask.defined() && wide.attn_mask.dtype() == DType::kBFloat16)
    wide.attn_mask = widen(wide.attn_mask);
  return wide;
}

}  // namespace

bool is_bfloat16_call(const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.dtype() == DType::kBFloat16 || k.dtype() == DType::kBFloat16 ||
         v.dtype() == DType::kBFloat16;
}

bool bfloat16_runs_fused(const Tensor& q, const Tensor& k, const Tensor& v,
                         const SdpaOptions& options) {
  const Tensor& mask = options.attn_mask;
  return q.dtype() == DType::kBFloat16 && k.dtype() == DType::kBFloat16 &&
         v.dtype() == DType::kBFloat16 && options.backend != SdpaBackend::kReference &&
         (!mask.defined() || mask.dtype() == DType::kBool) && !options.need_weights;
}

SdpaResult scaled_dot_product_attention_bfloat16(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const SdpaOptions& options) {
  check_bfloat16_inputs(q, k, v, options, "scaled_dot_product_attention");
  SdpaOptions wide = widened_options(options);
  wide.layout = SdpaLayout::kContiguous;
  SdpaResult result = scaled_dot_product_attention(widen(q), widen(k), widen(v), wide);
  result.output = narrow_laid_out(result.output, q, options.layout);
  result.weights = narrow(result.weights);
  return result;
}

SdpaGradients scaled_dot_product_attention_backward_bfloat16(const Tensor& grad_output,
                                                             const Tensor& q, const Tensor& k,
                                                             const Tensor& v,
                                                             const SdpaResult& forward,
                                                             const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention_backward";
  check_bfloat16_inputs(q, k, v, options, fn);
  QKV_CHECK_TYPE(grad_output.dtype() == DType::kBFloat16, fn,
                 ": grad_output must be bfloat16 like the query, got ",
                 dtype_name(grad_output.dtype()));
  SdpaResult wide_forward = forward;
  wide_forward.output = widen(forward.output);
  SdpaOptions wide_options = widened_options(options);
  // The fused forward's cases (no float mask) without dropout: the widened
  // values (exact in bfloat16) go to the backward with bfloat16 products,
  // which rounds nothing but P and dS (kernels::runs_bf16_backward).
  const Tensor& mask = options.attn_mask;
  if (options.backend != SdpaBackend::kReference && options.dropout_p == 0.0 &&
      (!mask.defined() || mask.dtype() == DType::kBool))
    wide_options.precision = Precision::kBFloat16;
  wide_options.layout = SdpaLayout::kContiguous;
  SdpaGradients grads = scaled_dot_product_attention_backward(
      widen(grad_output), widen(q), widen(k), widen(v), wide_forward, wide_options);
  grads.query = narrow_laid_out(grads.query, q, options.layout);
  grads.key = narrow_laid_out(grads.key, k, options.layout);
  grads.value = narrow_laid_out(grads.value, v, options.layout);
  grads.attn_mask = narrow(grads.attn_mask);
  return grads;
}

}  // namespace qkv
