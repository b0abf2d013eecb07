// Internal: the "<architecture>." metadata keys of a GGUF file (llama, qwen2,
// qwen3, gemma3) that qkv's decoder does not read but that change the math of
// the model the file holds (in llama.cpp or in the model it was converted
// from). Each is checked to hold a value that changes nothing, or the file is
// refused naming it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "qkv/io/gguf.h"

namespace qkv::models::detail {

// Checks every key of `file` that starts with `prefix` ("llama.", "gemma3.", ...):
//   read by gguf_decoder_config   context_length, embedding_length, block_count,
//                                 feed_forward_length, attention.head_count(_kv),
//                                 attention.layer_norm_rms_epsilon, rope.freq_base,
//                                 vocab_size, and the keys in `also_read` (the
//                                 architecture's own: gemma3's sliding window, ...)
//   checked here                  rope.dimension_count, attention.key_length and
//                                 value_length (= head_dim); rope.scaling.type ("none",
//                                 or "linear" with factor 1); rope.scaling.factor and
//                                 rope.scale_linear (0 or 1); rope.scaling.attn_factor
//                                 (1); attention.scale (0 or 1/√head_dim);
//                                 expert_count, expert_used_count (0);
//                                 attention.sliding_window (0, or ≥ max_seq_len)
//   informational, accepted       rope.scaling.original_context_length and
//                                 rope.scaling.finetuned (YaRN's, which is refused),
//                                 tensor_data_layout
// Any other key with the prefix (attn_logit_softcapping, final_logit_softcapping,
// rope.freq_base_swa, expert_*, embedding_scale, ...) is an error naming it.
// head_dim: attention.key_length, or embedding_length / head_count; max_seq_len:
// the model's context.
void check_llama_keys(const io::GgufFile& file, const std::string& prefix, int64_t head_dim,
                      int64_t max_seq_len, const std::set<std::string_view>& also_read = {});

}  // namespace qkv::models::detail
