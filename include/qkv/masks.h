// Attention masks (tutorial §3.5, §7.4).
//
// Two polarities exist and qkv names them in every function:
//   keep mask   True = the key takes part      (SDPA's attn_mask, qkv::attention)
//   ignore mask True = the key is masked out   (MultiheadAttention's masks)
// Additive masks are floating: 0 where kept, -inf where masked.
#pragma once

#include <vector>

#include "qkv/attention.h"
#include "qkv/tensor.h"

namespace qkv {

// Keep mask of real tokens for sequences of the given lengths, padded to `max_len`.
// -> bool [B, max_len], True where position < lengths[b]
Tensor keep_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t max_len);

// Ignore mask of padding (torch's key_padding_mask polarity).
// -> bool [B, max_len], True where position >= lengths[b]
Tensor padding_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t max_len);

// Causal keep mask, top-left (torch.tril(ones(L, S))) or bottom-right aligned.
// -> bool [L, S]
Tensor causal_mask(int64_t L, int64_t S, CausalMask alignment = CausalMask::kTopLeft);

// The broadcast the tutorial warns about in §5.4 and §7.4: a per-key mask
// [B, S] becomes [B, 1, 1, S] so that it broadcasts over heads and queries.
// mask: [B, S]  ->  [B, 1, 1, S] (a view)
Tensor key_mask_for_heads(const Tensor& mask);

// Keep mask -> ignore mask and back.
Tensor logical_not(const Tensor& mask);

// Bool keep mask -> additive mask of `dtype` (0 kept, -inf masked).
Tensor keep_mask_to_additive(const Tensor& keep_mask, DType dtype = DType::kFloat32);

}  // namespace qkv
