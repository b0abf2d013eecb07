// Pieces shared by the encoder and decoder files. Internal (not installed).
#pragma once

#include <optional>

#include "qkv/nn/transformer.h"

namespace qkv::nn::detail {

// Checks the layer options (naming `module`) and returns them.
const TransformerLayerOptions& checked_layer_options(const char* module,
                                                     const TransformerLayerOptions& o);

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o);
FeedForwardOptions feed_forward_options(const TransformerLayerOptions& o);
LayerNormOptions layer_norm_options(const TransformerLayerOptions& o);

// Checks a sequence input: defined, the module's dtype, 2-D [L, D] or 3-D
// [L, B, D] / [B, L, D] with D = d_model.
void check_sequence(const char* module, const char* name, const Tensor& x,
                    const TransformerLayerOptions& o);

// Batch size of a 3-D sequence input (1 for unbatched), sequence length.
int64_t batch_size(const Tensor& x, bool batch_first);
int64_t sequence_length(const Tensor& x, bool batch_first);

// torch's _detect_is_causal_mask: an explicit hint wins; with none, true
// exactly when `mask` is [size, size] and masks out precisely the positions
// above the diagonal (bool True, or float -inf; 0 / False elsewhere).
bool detect_is_causal_mask(const Tensor& mask, std::optional<bool> is_causal, int64_t size);

}  // namespace qkv::nn::detail
