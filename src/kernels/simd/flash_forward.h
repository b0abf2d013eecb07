// The fused forward pass of one query tile, written once for every ISA.
//
// For queries i in [q_begin, q_begin + rows) of problem b, walking key tiles j:
//   S   = (scale · Q) Kⱼᵀ  (+ mask, −inf where masked or above the causal diagonal)
//   m'  = max(m, rowmax S);  P = exp(S − m');  α = exp(m − m')
//   l   = α·l + rowsum P;    O = α·O + dropout(P) Vⱼ
// and finally O /= l, lse = m + log l. Rows with every key masked end with
// l = 0 and give output 0.
#pragma once

#include <cmath>
#include <limits>

#include "kernels/dropout.h"
#include "kernels/fused_attention.h"
#include "kernels/simd/tile_gemm.h"

namespace qkv::kernels::simd {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// The keys [begin, end) that query i may see under causal alignment
// (everything when there is no causal mask).
inline void causal_key_range(const SdpaProblem& p, int64_t i, int64_t* begin, int64_t* end) {
  *begin = 0;
  *end = p.S;
  if (p.causal == CausalMask::kTopLeft) *end = std::min<int64_t>(p.S, i + 1);
  if (p.causal == CausalMask::kBottomRight) *end = std::min<int64_t>(p.S, i + p.S - p.L + 1);
  if (*end < 0) *end = 0;
}

// Adds the mask and the causal limit to a tile of scores in place:
// row r of `s` holds keys [j0, j0 + cols) of query q_begin + r.
inline void mask_scores_tile(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                             int64_t j0, int64_t cols, float* s, int64_t lds) {
  const bool has_mask = p.mask.base != nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * lds;
    const int64_t i = q_begin + r;
    if (has_mask) {
      const int64_t base = p.mask.offsets[b] + i * p.mask.row_stride;
      if (p.mask.dtype == DType::kBool) {
        const bool* m = static_cast<const bool*>(p.mask.base) + base;
        for (int64_t c = 0; c < cols; ++c)
          if (!m[(j0 + c) * p.mask.col_stride]) row[c] = kNegInfF;
      } else {
        const float* m = static_cast<const float*>(p.mask.base) + base;
        for (int64_t c = 0; c < cols; ++c) row[c] += m[(j0 + c) * p.mask.col_stride];
      }
    }
    if (p.causal != CausalMask::kNone) {
      int64_t begin, end;
      causal_key_range(p, i, &begin, &end);
      for (int64_t c = std::max<int64_t>(0, end - j0); c < cols; ++c) row[c] = kNegInfF;
    }
  }
}

// Row maximum of n floats.
template <class Isa>
float row_max(const float* x, int64_t n) {
  constexpr int kL = Isa::kLanes;
  float m = kNegInfF;
  int64_t j = 0;
  if (n >= kL) {
    typename Isa::V acc = Isa::load(x);
    for (j = kL; j + kL <= n; j += kL) acc = Isa::max(acc, Isa::load(x + j));
    m = Isa::reduce_max(acc);
  }
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// x <- exp(x − shift) in place; returns Σ of the new values.
template <class Isa>
float exp_shift_sum(float* x, int64_t n, float shift) {
  constexpr int kL = Isa::kLanes;
  const typename Isa::V vs = Isa::set1(shift);
  typename Isa::V acc = Isa::zero();
  int64_t j = 0;
  for (; j + kL <= n; j += kL) {
    const typename Isa::V e = exp<Isa>(Isa::sub(Isa::load(x + j), vs));
    Isa::store(x + j, e);
    acc = Isa::add(acc, e);
  }
  float sum = Isa::reduce_add(acc);
  for (; j < n; ++j) {
    x[j] = x[j] == kNegInfF ? 0.0f : std::exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

template <class Isa>
void scale_row(float* x, int64_t n, float factor) {
  constexpr int kL = Isa::kLanes;
  const typename Isa::V f = Isa::set1(factor);
  int64_t j = 0;
  for (; j + kL <= n; j += kL) Isa::store(x + j, Isa::mul(Isa::load(x + j), f));
  for (; j < n; ++j) x[j] *= factor;
}

// Keys this query tile may see at all (causal tiles skip whole key tiles).
inline int64_t tile_key_end(const SdpaProblem& p, int64_t q_begin, int64_t rows) {
  int64_t begin, end;
  causal_key_range(p, q_begin + rows - 1, &begin, &end);
  return end;
}

// scores[r, c] = (scale·Q) Kᵀ + mask for queries q_begin + r and keys j0 + c,
// from the packed Q in w.q_packed.
template <class Isa>
void score_tile(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows, int64_t j0,
                int64_t cols, const float* k, const FlashScratch& w, int64_t lds) {
  constexpr int kNr = TileShape<Isa>::kNr;
  // B element (e, j) is K[j, e]
  pack_b<kNr>(k + j0 * p.k.row_stride, p.k.col_stride, p.k.row_stride, p.E, cols, w.k_packed);
  gemm_packed<Isa>(rows, cols, p.E, w.q_packed, w.k_packed, w.scores, lds, false);
  const bool tile_on_diagonal =
      p.causal != CausalMask::kNone && j0 + cols > tile_key_end(p, q_begin, 1);
  if (p.mask.base != nullptr || tile_on_diagonal)
    mask_scores_tile(p, b, q_begin, rows, j0, cols, w.scores, lds);
}

template <class Isa>
void flash_forward_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                        int64_t rows, const FlashScratch& w) {
  constexpr int kMr = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
  const float* k = static_cast<const float*>(p.k.base) + p.k.offsets[b];
  const float* v = static_cast<const float*>(p.v.base) + p.v.offsets[b];
  const int64_t lds = t.block_k;
  const double keep_scale = p.dropout_p > 0.0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;

  pack_a<kMr>(q + q_begin * p.q.row_stride, p.q.row_stride, p.q.col_stride, rows, p.E,
              static_cast<float>(p.scale), w.q_packed);
  for (int64_t r = 0; r < rows; ++r) {
    w.row_max[r] = kNegInfF;
    w.row_sum[r] = 0.0f;
  }
  std::fill(w.out_acc, w.out_acc + rows * p.Ev, 0.0f);

  const int64_t key_end = tile_key_end(p, q_begin, rows);
  for (int64_t j0 = 0; j0 < key_end; j0 += t.block_k) {
    const int64_t cols = std::min<int64_t>(t.block_k, key_end - j0);
    score_tile<Isa>(p, b, q_begin, rows, j0, cols, k, w, lds);

    // Online softmax, row by row.
    for (int64_t r = 0; r < rows; ++r) {
      float* s = w.scores + r * lds;
      const float m_old = w.row_max[r];
      const float m_new = std::max(m_old, row_max<Isa>(s, cols));
      if (m_new == kNegInfF) {  // nothing visible yet in this row
        std::fill(s, s + cols, 0.0f);
        continue;
      }
      const float alpha = std::exp(m_old - m_new);  // 0 when m_old = −inf
      w.row_sum[r] = w.row_sum[r] * alpha + exp_shift_sum<Isa>(s, cols, m_new);
      w.row_max[r] = m_new;
      if (alpha != 1.0f) scale_row<Isa>(w.out_acc + r * p.Ev, p.Ev, alpha);
      if (p.dropout_p > 0.0) {
        for (int64_t c = 0; c < cols; ++c)
          s[c] = dropout_kept(p, b, q_begin + r, j0 + c) ? static_cast<float>(s[c] * keep_scale)
                                                         : 0.0f;
      }
    }
    // O += P Vⱼ
    pack_a<kMr>(w.scores, lds, 1, rows, cols, 1.0f, w.p_packed);
    pack_b<kNr>(v + j0 * p.v.row_stride, p.v.row_stride, p.v.col_stride, cols, p.Ev, w.v_packed);
    gemm_packed<Isa>(rows, p.Ev, cols, w.p_packed, w.v_packed, w.out_acc, p.Ev, true);
  }

  float* out = static_cast<float*>(p.output) + (b * p.L + q_begin) * p.Ev;
  for (int64_t r = 0; r < rows; ++r) {
    const float l = w.row_sum[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t e = 0; e < p.Ev; ++e) out[r * p.Ev + e] = w.out_acc[r * p.Ev + e] * inv;
    if (p.lse)
      p.lse[b * p.L + q_begin + r] =
          l > 0.0f ? static_cast<double>(w.row_max[r]) + std::log(static_cast<double>(l))
                   : -std::numeric_limits<double>::infinity();
  }
}

// The attention weights of a query tile, rebuilt from the log-sum-exp the
// forward pass saved: w = dropout(exp(S − lse)), written to p.weights.
template <class Isa>
void flash_weights_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                        int64_t rows, const FlashScratch& w) {
  constexpr int kMr = TileShape<Isa>::kMr;
  const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
  const float* k = static_cast<const float*>(p.k.base) + p.k.offsets[b];
  const int64_t lds = t.block_k;
  const double keep_scale = p.dropout_p > 0.0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  float* weights = static_cast<float*>(p.weights) + (b * p.L + q_begin) * p.S;
  std::fill(weights, weights + rows * p.S, 0.0f);
  pack_a<kMr>(q + q_begin * p.q.row_stride, p.q.row_stride, p.q.col_stride, rows, p.E,
              static_cast<float>(p.scale), w.q_packed);
  const int64_t key_end = tile_key_end(p, q_begin, rows);
  for (int64_t j0 = 0; j0 < key_end; j0 += t.block_k) {
    const int64_t cols = std::min<int64_t>(t.block_k, key_end - j0);
    score_tile<Isa>(p, b, q_begin, rows, j0, cols, k, w, lds);
    for (int64_t r = 0; r < rows; ++r) {
      const double lse = p.lse[b * p.L + q_begin + r];
      if (lse == -std::numeric_limits<double>::infinity()) continue;  // fully masked row
      float* s = w.scores + r * lds;
      exp_shift_sum<Isa>(s, cols, static_cast<float>(lse));
      float* out = weights + r * p.S + j0;
      for (int64_t c = 0; c < cols; ++c)
        out[c] =
            dropout_kept(p, b, q_begin + r, j0 + c) ? static_cast<float>(s[c] * keep_scale) : 0.0f;
    }
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
