// bfloat16 attention: the inputs are widened to float32 (exact), the float32
// kernels compute with float32 accumulation, and the outputs are rounded back
// to bfloat16. This CPU family has no bf16 arithmetic (no AVX512_BF16, no
// AMX), so widening once per call is what a bf16 kernel would do per tile,
// at the cost of one pass over the inputs.
#pragma once

#include "qkv/attention.h"

namespace qkv {

// Whether any of query, key, value is bfloat16 (then all three must be).
bool is_bfloat16_call(const Tensor& q, const Tensor& k, const Tensor& v);

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
