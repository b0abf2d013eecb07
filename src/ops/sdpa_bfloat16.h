// bfloat16 attention. The forward of the common case (no float mask, no
// weights asked for) runs in the fused kernel with bfloat16 products
// (kernels/simd/flash_forward_bf16.h: vdpbf16ps on AVX512_BF16, float32
// softmax and sums) and rounds the output as it writes it: see
// bfloat16_runs_fused. Everything else widens the inputs to float32 tensors
// first, computes in float32 and rounds the results back to bfloat16. The
// backward widens too; without dropout or a float mask it then runs with
// bfloat16 products (kernels/simd/flash_backward_bf16.h), the gradients
// accumulated in float32 and rounded to bfloat16 at the end.
#pragma once

#include "qkv/attention.h"

namespace qkv {

// Whether any of query, key, value is bfloat16 (then all three must be).
bool is_bfloat16_call(const Tensor& q, const Tensor& k, const Tensor& v);

// Whether a bfloat16 forward call runs in the fused kernel directly: all three
// bfloat16, the fused backend allowed, no float mask and no weights.
bool bfloat16_runs_fused(const Tensor& q, const Tensor& k, const Tensor& v,
                         const SdpaOptions& options);

// scaled_dot_product_attention on bfloat16 inputs: output and weights in
// bfloat16, logsumexp in float64 as always. A float attn_mask must be bfloat16.
SdpaResult scaled_dot_product_attention_bfloat16(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const SdpaOptions& options);

// The backward of the above: gradients in bfloat16 (a float mask's too).
SdpaGradients scaled_dot_product_attention_backward_bfloat16(const Tensor& grad_output,
                                                             const Tensor& q, const Tensor& k,
                                                             const Tensor& v,
                                                             const SdpaResult& forward,
                                                             const SdpaOptions& options);

}  // namespace qkv
