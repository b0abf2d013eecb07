// Pretrained language models from GGUF files (llama.cpp's format) on qkv's
// decoder blocks: the model, its byte-level BPE tokenizer and its chat format.
//
//   models::GgufModel m = models::load_gguf_model("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   std::vector<int32_t> ids = m.tokenizer.encode("The capital of France is");
//   std::vector<int64_t> prompt(ids.begin(), ids.end());
//   std::vector<int64_t> out = nn::generate(m.model, prompt, {.max_new_tokens = 20});
//   // load_gguf_model(path, {.kv_cache = nn::KVCacheStorage::kQ8_0}): a q8_0 KV cache
//   std::cout << m.tokenizer.decode(std::vector<int32_t>(out.begin(), out.end()));
//
// Architectures, each a configuration of nn::DecoderModel's one block (the
// keys below are read under the architecture's prefix, "llama.", "qwen2.", ...):
//   "llama"   LLaMA 1-3, SmolLM, TinyLlama, ...: RMSNorm, RoPE, GQA, SwiGLU,
//             tied or untied output; Llama 3's rope_freqs.weight; q/k/v biases
//             when the file has them
//   "qwen2"   Qwen 2 / 2.5: llama with q/k/v biases (attn_q/k/v.bias)
//   "qwen3"   Qwen 3: llama with per-head q/k RMSNorm (attn_q_norm, attn_k_norm)
//             and a head dim of its own (attention.key_length)
//   "gemma3"  Gemma 3: q/k norms, norms after attention and after the FFN too
//             (post_attention_norm, post_ffw_norm), GELU-tanh gated FFN,
//             embeddings × √width, head dim attention.key_length, queries
//             scaled by 1/√head_dim (27B, 62 blocks: 1/√(width / heads), as
//             llama.cpp), five local layers of attention.sliding_window
//             positions (RoPE base rope.freq_base_swa, default 10000) before each
//             global one (rope.freq_base), final_logit_softcapping when present.
//             The converter stores Gemma's norm weights with the 1 of its
//             x · (1 + w) folded in: they are used as plain RMSNorm weights.
// Any other general.architecture is an error naming it. llama's q/k rows are
// stored permuted for adjacent-pair RoPE (see below); the others' are not and
// rotate half-split, as llama.cpp's NEOX mode and transformers do.
//
// A sliding-window layer's KV cache keeps only its window (nn::KVCache's ring).
//
// Nothing in the file is ignored that could change the outputs:
//   - every other <architecture>.* key is refused by name unless it holds a
//     value that changes nothing (src/models/gguf_llama_keys.h lists them):
//     RoPE scaling types other than none, partial rotary dims, attention logit
//     softcapping, sliding windows (outside gemma3), experts, a head dim of its
//     own (outside gemma3 and qwen3), ...;
//   - every tensor of the file must be one the model uses: a tensor it would
//     not read (a bias, a q/k norm the family has not, a block past
//     block_count) is an error naming it.
//
// RoPE: GGUF files store the rows of attn_q and attn_k permuted for llama.cpp's
// rotation of adjacent pairs (convert_hf_to_gguf.py's `permute`). The rows are
// kept as stored and the model rotates adjacent pairs (RopeStyle::kInterleaved):
// each head's q and k are permuted alike, so every q·k, and so the output, is
// that of the original model with half-split RoPE (transformers' LLaMA).
//
// Two modes:
//   fast (default)  linear weights, the token embedding and the output head stay
//                   in their quantized blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//                   Q4_K, Q5_K, Q6_K, IQ4_NL),
//                   read in place from the file's mapping, which they keep
//                   alive; no float32 copy is made (the model is built under
//                   nn::SkipWeightInit), so memory stays near the file's size.
//                   F32/F16/BF16 weights are converted to float32.
//   exact           every weight dequantized to float32 once (GgufFile::load):
//                   plain nn modules, the reference the fast mode is checked on.
// Both are inference-only in practice (fast mode's quantized modules refuse
// records); the model is float32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "qkv/io/gguf.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/text/bpe_tokenizer.h"
#include "qkv/text/chat_template.h"

namespace qkv::models {

struct GgufModelOptions {
  bool exact = false;          // dequantize every weight to float32 (see above)
  int64_t max_seq_len = 8192;  // cap on the file's context_length (KV cache size), > 0
  // How the model's KV caches keep keys and values: float32, or Q8_0 blocks
  // (about 3.6x less memory; nn::KVCache says how close they stay).
  nn::KVCacheStorage kv_cache = nn::KVCacheStorage::kFloat;
};

struct GgufModel {
  std::string architecture;  // general.architecture ("llama")
  std::string name;          // general.name, or ""
  bool exact = false;        // the mode it was loaded in
  nn::DecoderModel model;
  text::BpeTokenizer tokenizer;
  // tokenizer.chat_template (jinja source), when the file has one.
  std::optional<std::string> chat_template_source;

  // The file's chat template (text::ChatTemplate::from_jinja, with the
  // vocabulary's bos and eos tokens): an error when the file has none or its
  // Jinja does not parse.
  text::ChatTemplate chat_template() const;
  // The token that ends an assistant turn: the first of "<|im_end|>"
  // (ChatML), "<end_of_turn>" (Gemma) and "<|eot_id|>" (Llama 3) that the
  // vocabulary has, else eos (nullopt when none).
  std::optional<int32_t> end_of_turn() const;
};

// The model config from a llama GGUF file's metadata and its rope_freqs.weight
// (see above); max_seq_len caps context_length. Checks the keys, not the other
// tensors.
nn::DecoderModelConfig gguf_decoder_config(const io::GgufFile& file, int64_t max_seq_len = 8192);

// The BPE tokenizer of tokenizer.ggml.* (model "gpt2": tokens, merges,
// token_type, pre; model "llama": tokens, scores, token_type, add_space_prefix;
// both: bos/eos/unknown/padding_token_id, add_bos_token, add_eos_token), as
// transformers builds it from the file (include/qkv/text/bpe_tokenizer.h).
// Another tokenizer.ggml.model, or a key it does not follow, is an error naming it.
text::BpeTokenizer gguf_bpe_tokenizer(const io::GgufFile& file);

// Model, tokenizer and chat template of a GGUF file.
GgufModel load_gguf_model(const io::GgufFile& file, const GgufModelOptions& options = {});
GgufModel load_gguf_model(const std::filesystem::path& path, const GgufModelOptions& options = {});

}  // namespace qkv::models
