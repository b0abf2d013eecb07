// Positional encodings (tutorial §3.4): self-attention cannot tell positions
// apart, so position information is injected in one of three places.
//
//   added to the input      SinusoidalPositionalEncoding (§3.4's formula),
//                           LearnedPositionalEncoding
//   rotating q and k        RotaryEmbedding (RoPE), two conventions
//   added to the scores     Alibi (linear distance penalty),
//                           RelativePositionBias (T5's learned bucketed bias)
//
// The score biases are [H, L, S] float tensors: pass them as a floating
// attn_mask to scaled_dot_product_attention (it broadcasts over the batch),
// or add them to another additive mask.
//
// Positions: row l of a length-L input is at position offset + l. The
// score biases align queries bottom-right, as in decoding with a cache: query i
// of L is at position i + S - L among the S keys (key j is at position j).
#pragma once

#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/module.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// --- Sinusoidal (§3.4) -----------------------------------------------------------

// PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
// pos = offset + row; computed in float64, rounded once to `dtype`.
// -> [length, d_model]
Tensor sinusoidal_encoding(int64_t length, int64_t d_model, int64_t offset = 0,
                           DType dtype = DType::kFloat32);

struct SinusoidalPositionalEncodingOptions {
  int64_t d_model = 0;
  int64_t max_len = 5000;  // positions offset + L must stay below this
  double dropout = 0.0;    // on the sum, in training mode only
  bool batch_first = false;
  DType dtype = DType::kFloat32;
};

// dropout(x + PE[offset : offset + L]); the table is fixed, not a parameter.
class SinusoidalPositionalEncoding
    : public ModuleBase<SinusoidalPositionalEncoding, SinusoidalPositionalEncodingOptions> {
 public:
  explicit SinusoidalPositionalEncoding(const SinusoidalPositionalEncodingOptions& options);

  // x: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like x
  Tensor forward(const Tensor& x, int64_t offset = 0) const;

  // [max_len, d_model]
  const Tensor& table() const { return table_; }

 private:
  // No parameters (the table is recomputed, not stored).
  void list_members(MemberList& m) override;

  Tensor table_;
};

// --- Learned absolute positions (BERT, GPT-2) ------------------------------------

struct LearnedPositionalEncodingOptions {
  int64_t max_len = 512;
  int64_t d_model = 0;
  double dropout = 0.0;
  bool batch_first = false;
  DType dtype = DType::kFloat32;
};

// dropout(x + weight[offset : offset + L]), weight ~ N(0, 1) as nn.Embedding.
class LearnedPositionalEncoding
    : public ModuleBase<LearnedPositionalEncoding, LearnedPositionalEncodingOptions> {
 public:
  explicit LearnedPositionalEncoding(const LearnedPositionalEncodingOptions& options,
                                     Generator* gen = nullptr);

  // x: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like x
  Tensor forward(const Tensor& x, int64_t offset = 0) const;

 private:
  // "weight" [max_len, d_model].
  void list_members(MemberList& m) override;

  Tensor weight_;
};

// --- Rotary position embedding (RoPE) --------------------------------------------

// Which coordinates RoPE rotates together. The two are not interchangeable:
// weights trained with one give wrong results with the other.
//   kInterleaved  pairs (2i, 2i+1)      — the RoFormer paper, GPT-J, Meta's LLaMA code
//   kHalfSplit    pairs (i, i + E/2)    — GPT-NeoX, Hugging Face LLaMA ("rotate_half")
// With P the permutation that lists the even coordinates first, then the odd
// ones, half_split(P x) = P interleaved(x).
enum class RopeStyle { kInterleaved, kHalfSplit };

struct RotaryEmbeddingOptions {
  int64_t head_dim = 0;  // E, even
  double base = 10000.0;
  RopeStyle style = RopeStyle::kHalfSplit;
  // Empty, or E/2 finite values > 0 that divide the frequencies: θ_i = base^(-2i/E) / f_i.
  // Llama 3's long-context RoPE (GGUF rope_freqs.weight; transformers'
  // rope_type "llama3") slows the low frequencies this way.
  std::vector<double> freq_factors;
};

// Rotates each pair (a, b) of coordinates by the angle pos · θ_i with
// θ_i = base^(-2i/E) (/ freq_factors[i]), i in [0, E/2):
// a' = a cos − b sin,  b' = b cos + a sin.
// Then q'·k' depends on the positions only through their difference.
// Angles, cos and sin are computed in float64.
class RotaryEmbedding : public ModuleBase<RotaryEmbedding, RotaryEmbeddingOptions> {
 public:
  explicit RotaryEmbedding(const RotaryEmbeddingOptions& options);

  // x: [..., L, E]  ->  like x; row l is at position offset + l
  Tensor forward(const Tensor& x, int64_t offset = 0) const;

  // Both q and k at the same positions (self-attention; or the new queries
  // and keys when decoding with a cache, offset = number of cached positions).
  // q: [..., L, E]  k: [..., L, E]  ->  (q', k')
  std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, int64_t offset) const;

  // Training: the backward of forward(x, offset). A rotation's transpose is
  // its inverse, so ∂loss/∂x is grad_output rotated back by the same angles.
  // RoPE has no parameters and needs no record: the angles depend only on the
  // positions.
  // grad_output: [..., L, E]  ->  like grad_output
  Tensor backward(const Tensor& grad_output, int64_t offset = 0) const;

  // θ_i = base^(-2i/E) / freq_factors[i] (no division without factors).
  // -> E/2 values
  std::vector<double> inverse_frequencies() const;

  // forward() of rows that all sit at one position, in place, allocating
  // nothing (a decoding step's q and k).
  // rows: [..., E] contiguous, at position `position`
  void rotate_in_place(Tensor& rows, int64_t position) const;
  // The same for the queries and keys of B sequences of T tokens, each
  // token's angles computed once for both: token (b, t) at positions[b] + t
  // (positions[0] + t for every b when one position is given).
  // q: [B, T, ..., E]  k: [B, T, ..., E], contiguous
  void rotate_in_place(Tensor& q, Tensor& k, std::span<const int64_t> positions) const;

 private:
  // No parameters.
  void list_members(MemberList& m) override;

  // x rotated by direction · pos · θ_i (+1: forward, −1: backward); `fn` names
  // the call in errors.
  Tensor rotated(const Tensor& x, int64_t offset, double direction, const char* fn) const;

  std::vector<double> theta_;  // inverse_frequencies()
};

// --- ALiBi (Press et al., "Train Short, Test Long") -------------------------------

// The per-head slopes m_h: for H a power of two, the geometric sequence
// 2^(-8/H), 2^(-16/H), …, 2^(-8); otherwise the slopes of the nearest smaller
// power of two n, followed by every other slope of 2n (the reference code).
// -> H values
std::vector<double> alibi_slopes(int64_t num_heads);

struct AlibiOptions {
  int64_t num_heads = 0;
  // true: m_h (j − pos_i) for keys j ≤ pos_i, −inf after (causal, decoder-only).
  // false: −m_h |j − pos_i| for every key (bidirectional).
  bool causal = true;
  DType dtype = DType::kFloat32;
};

class Alibi : public ModuleBase<Alibi, AlibiOptions> {
 public:
  explicit Alibi(const AlibiOptions& options);

  // Score bias for L queries at positions S − L … S − 1 against S keys.
  // -> [H, L, S]
  Tensor forward(int64_t L, int64_t S) const;

  const std::vector<double>& slopes() const { return slopes_; }

 private:
  // No parameters.
  void list_members(MemberList& m) override;

  std::vector<double> slopes_;
};

// --- T5 relative position bias ---------------------------------------------------

// T5's bucket of a relative position (key position − query position), as
// Hugging Face transformers computes it (the log in float32):
//   bidirectional: half the buckets for keys after the query, half for before;
//   causal: only keys at or before the query get distinct buckets; later keys
//           share bucket 0 with the query's own position.
// Within each half, distances below num_buckets/4 (/2 causal) get a bucket
// each; larger ones share log-spaced buckets up to max_distance, beyond which
// all fall into the last.
int64_t relative_position_bucket(int64_t relative_position, bool bidirectional = true,
                                 int64_t num_buckets = 32, int64_t max_distance = 128);

struct RelativePositionBiasOptions {
  int64_t num_heads = 0;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  bool bidirectional = true;  // encoder: true; decoder self-attention: false
  DType dtype = DType::kFloat32;
};

// A learned table [num_buckets, H]; the bias of query i and key j for head h
// is table[bucket(j − pos_i), h].
class RelativePositionBias : public ModuleBase<RelativePositionBias, RelativePositionBiasOptions> {
 public:
  // The table ~ N(0, 1), as nn.Embedding.
  explicit RelativePositionBias(const RelativePositionBiasOptions& options,
                                Generator* gen = nullptr);

  // L queries at positions S − L … S − 1 against S keys.
  // -> [H, L, S]
  Tensor forward(int64_t L, int64_t S) const;

 private:
  // "relative_attention_bias.weight" [num_buckets, H] (the name in T5 checkpoints).
  void list_members(MemberList& m) override;

  Tensor weight_;  // [num_buckets, H]
};

}  // namespace qkv::nn
