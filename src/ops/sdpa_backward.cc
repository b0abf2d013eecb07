// scaled_dot_product_attention_backward: the same checks as the forward, then
// one backward kernel call; broadcast and GQA operands sum their gradients.
#include <optional>

#include "kernels/fused_attention.h"
#include "ops/checks.h"
#include "ops/sdpa_bfloat16.h"
#include "ops/sdpa_prepare.h"

namespace qkv {

namespace {

kernels::GradOperand grad_operand(Tensor& grad, const Shape& out_lead, int64_t head_group) {
  kernels::GradOperand g;
  g.base = grad.raw_data();
  g.offsets = matrix_offsets(grad, out_lead, head_group);
  g.row_stride = grad.stride(-2);
  return g;
}

// Sums `full` over the dims that `shape` broadcasts: the gradient of a
// tensor of `shape` that was broadcast to full.shape().
Tensor sum_to_shape(const Tensor& full, const Shape& shape) {
  Tensor out = Tensor::zeros(shape, full.dtype());
  // A stride-0 view of `out` walks it in step with `full`.
  const Tensor target = out.expand(full.shape());
  std::vector<int64_t> target_offsets(static_cast<size_t>(full.numel()));
  for_each_offset(target.shape(), target.strides(),
                  [&](int64_t i, int64_t off) { target_offsets[i] = off; });
  auto accumulate = [&](auto* dst, const auto* src) {
    for_each_offset(full.shape(), full.strides(),
                    [&](int64_t i, int64_t off) { dst[target_offsets[i]] += src[off]; });
  };
  if (full.dtype() == DType::kFloat64) {
    accumulate(out.data<double>(), full.data<double>());
  } else {
    accumulate(out.data<float>(), full.data<float>());
  }
  return out;
}

// The kernel call of a prepared backward: gradients of `grad_dtype`, summed
// by the kernel from zero.
SdpaGradients run_backward(const PreparedSdpa& prepared, bool fused, const Tensor& grad_output,
                           const Tensor& q, const Tensor& k, const Tensor& v,
                           const SdpaResult& forward, const SdpaOptions& options,
                           DType grad_dtype) {
  kernels::SdpaBackwardProblem bp;
  bp.forward = prepared.problem;
  kernels::SdpaProblem& p = bp.forward;
  p.dropout_seed = forward.dropout_seed;
  // The fused backward's D = rowsum(dO ∘ O) reads O's rows where they lie (an
  // output laid out like the query, SdpaLayout::kLikeInputs, is not copied);
  // only rows that are not contiguous in memory are.
  const Tensor output =
      forward.output.stride(-1) == 1 ? forward.output : forward.output.contiguous();
  const Tensor lse = forward.logsumexp.contiguous();
  p.output = const_cast<void*>(output.raw_data());
  if (!output.is_contiguous()) {  // e.g. the heads of a [B, L, H, Ev] buffer
    fill_offsets(p.output_offsets, output, prepared.out_lead, 1);
    p.output_row_stride = output.stride(-2);
  }
  p.lse = const_cast<double*>(lse.data<double>());
  bp.grad_output = matrix_operand(grad_output, prepared.out_lead);

  SdpaGradients grads;
  if (options.layout == SdpaLayout::kContiguous) {
    grads.query = Tensor::zeros(q.shape(), grad_dtype);
    grads.key = Tensor::zeros(k.shape(), grad_dtype);
    grads.value = Tensor::zeros(v.shape(), grad_dtype);
  } else {
    grads.query = zeros_laid_out(q.shape(), grad_dtype, q, options.layout);
    grads.key = zeros_laid_out(k.shape(), grad_dtype, k, options.layout);
    grads.value = zeros_laid_out(v.shape(), grad_dtype, v, options.layout);
  }
  bp.grad_q = grad_operand(grads.query, prepared.out_lead, 1);
  bp.grad_k = grad_operand(grads.key, prepared.out_lead, prepared.head_group);
  bp.grad_v = grad_operand(grads.value, prepared.out_lead, prepared.head_group);
  Tensor grad_scores;
  const bool mask_grad = options.attn_mask.defined() && options.attn_mask.dtype() != DType::kBool &&
                         options.attn_mask_requires_grad;
  if (mask_grad) {
    grad_scores = Tensor::zeros(prepared.weights_shape, grad_dtype);
    bp.grad_scores = grad_scores.raw_data();
  }
  if (fused) {
    kernels::sdpa_backward_fused(bp, kernels::active_kernel_table());
  } else {
    kernels::sdpa_backward_reference(bp);
  }
  if (mask_grad) grads.attn_mask = sum_to_shape(grad_scores, options.attn_mask.shape());
  return grads;
}

void check_grad_output(const Tensor& grad_output, const Tensor& q, const PreparedSdpa& prepared,
                       const SdpaResult& forward, const char* fn) {
  QKV_CHECK(grad_output.defined() && grad_output.shape() == prepared.out_shape, fn,
            ": grad_output must have the output's shape ", shape_str(prepared.out_shape), ", got ",
            grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  QKV_CHECK_TYPE(grad_output.dtype() == q.dtype(), fn, ": grad_output must be ",
                 dtype_name(q.dtype()), " like the query, got ", dtype_name(grad_output.dtype()));
  QKV_CHECK(forward.output.defined() && forward.output.shape() == prepared.out_shape &&
                forward.output.dtype() == q.dtype() && forward.logsumexp.defined(),
            fn, ": `forward` must be the result of scaled_dot_product_attention on the same ",
            "inputs (output ", shape_str(prepared.out_shape), " and its logsumexp)");
}

// bfloat16 q, k, v and dO straight into a kernel table that reads them
// (KernelTable::bf16_backward_reads_bfloat16), without float32 copies; the
// gradients accumulate in float32 and are rounded once. Empty when the
// problem takes the widening path (sdpa_bfloat16.h). Non-finite inputs are
// found through the gradients, as the forward finds them through its output:
// a NaN or infinity that the products meet makes a gradient non-finite.
std::optional<SdpaGradients> backward_reading_bfloat16(const Tensor& grad_output, const Tensor& q,
                                                       const Tensor& k, const Tensor& v,
                                                       const SdpaResult& forward,
                                                       const SdpaOptions& options, const char* fn) {
  const kernels::KernelTable& table = kernels::active_kernel_table();
  if (!table.bf16_backward_reads_bfloat16 || !bfloat16_runs_fused(q, k, v, options) ||
      options.dropout_p != 0.0)
    return std::nullopt;
  PreparedSdpa prepared = prepare_sdpa(q, k, v, options, fn);
  check_grad_output(grad_output, q, prepared, forward, fn);
  kernels::SdpaBackwardProblem probe;
  probe.forward = prepared.problem;
  if (!kernels::runs_bf16_backward(probe, table)) return std::nullopt;
  SdpaGradients grads = run_backward(prepared, /*fused=*/true, grad_output, q, k, v, forward,
                                     options, DType::kFloat32);
  if (!all_finite(grads.query) || !all_finite(grads.key) || !all_finite(grads.value)) {
    // (the error path: bfloat16 inputs widened to be scanned)
    check_finite(grad_output.to(DType::kFloat32), fn, "grad_output");
    check_finite(q.to(DType::kFloat32), fn, "query");
    check_finite(k.to(DType::kFloat32), fn, "key");
    check_finite(v.to(DType::kFloat32), fn, "value");
    QKV_CHECK(false, fn, ": a gradient overflowed to NaN/inf although the inputs are finite; ",
              "scale the inputs down");
  }
  const Tensor* inputs[] = {&q, &k, &v};
  Tensor* outputs[] = {&grads.query, &grads.key, &grads.value};
  for (int i = 0; i < 3; ++i) {
    Tensor& g = *outputs[i];
    if (options.layout == SdpaLayout::kContiguous) {
      g = g.to(DType::kBFloat16);
    } else {  // rounded into its input's layout
      Tensor rounded = empty_laid_out(g.shape(), DType::kBFloat16, *inputs[i], options.layout);
      rounded.copy_from(g);
      g = rounded;
    }
  }
  return grads;
}

}  // namespace

SdpaGradients scaled_dot_product_attention_backward(const Tensor& grad_output, const Tensor& q,
                                                    const Tensor& k, const Tensor& v,
                                                    const SdpaResult& forward,
                                                    const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention_backward";
  if (is_bfloat16_call(q, k, v)) {
    if (std::optional<SdpaGradients> grads =
            backward_reading_bfloat16(grad_output, q, k, v, forward, options, fn))
      return *std::move(grads);
    return scaled_dot_product_attention_backward_bfloat16(grad_output, q, k, v, forward, options);
  }
  PreparedSdpa prepared = prepare_sdpa(q, k, v, options, fn);
  const bool fused = use_fused_kernel(q, options, fn);
  check_floating(grad_output, fn, "grad_output");
  check_grad_output(grad_output, q, prepared, forward, fn);
  check_finite(grad_output, fn, "grad_output");
  check_finite(q, fn, "query");
  check_finite(k, fn, "key");
  check_finite(v, fn, "value");
  return run_backward(prepared, fused, grad_output, q, k, v, forward, options, q.dtype());
}

}  // namespace qkv
