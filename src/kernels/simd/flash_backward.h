// The fused backward pass of one key tile (FlashAttention-2), written once for
// every ISA. For keys [j0, j0 + cols) and every query tile i of every problem
// that reads them, with P recomputed from the saved log-sum-exp:
//   S  = (scale·Qᵢ) Kⱼᵀ + mask;    P = exp(S − lse)      (the forward's softmax)
//   P̃  = P ∘ keep/(1 − p)                                 (the forward's dropout)
//   dVⱼ += P̃ᵀ dOᵢ                 from  O = P̃ V
//   dP  = (dOᵢ Vⱼᵀ) ∘ keep/(1 − p)
//   dS  = P ∘ (dP − D),  D = rowsum(dO ∘ O)               from  P = softmax(S)
//   dS ∘= 1 − tanh²(x/cap)                                 from soft-capping (if on)
//   dKⱼ += scale·dSᵀ Qᵢ;  dQᵢ += scale·dS Kⱼ             from  S = scale·Q Kᵀ
#pragma once

#include "kernels/simd/flash_forward.h"

namespace qkv::kernels::simd {
namespace {

// The queries [first, last) that see at least one key of [j0, j0 + cols):
// visible ranges only move right as the query index grows.
inline void queries_seeing(const SdpaProblem& p, int64_t j0, int64_t cols, int64_t* first,
                           int64_t* last) {
  auto end_of = [&](int64_t i) {
    int64_t begin, end;
    visible_keys(p, i, &begin, &end);
    return end;
  };
  auto begin_of = [&](int64_t i) {
    int64_t begin, end;
    visible_keys(p, i, &begin, &end);
    return begin;
  };
  int64_t lo = 0, hi = p.L;  // first query whose range ends after j0
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (end_of(mid) > j0)
      hi = mid;
    else
      lo = mid + 1;
  }
  *first = lo;
  hi = p.L;  // first query whose range begins at or after j0 + cols
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (begin_of(mid) >= j0 + cols)
      hi = mid;
    else
      lo = mid + 1;
  }
  *last = lo;
}

template <class Isa>
void flash_backward_tile(const SdpaBackwardProblem& bp, const FlashTiling& t,
                         const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                         const double* row_dot, float* grad_q_base, const FlashBackwardScratch& w) {
  constexpr int kMr = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  const SdpaProblem& p = bp.forward;
  const int64_t lds = t.block_k;
  const float keep_scale = p.dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 1.0f;
  const float scale = static_cast<float>(p.scale);
  // Keys and values of this tile, packed once for all query tiles.
  const int64_t b0 = problems[0];
  const float* k = static_cast<const float*>(p.k.base) + p.k.offsets[b0];
  const float* v = static_cast<const float*>(p.v.base) + p.v.offsets[b0];
  const float* k_tile = k + j0 * p.k.row_stride;
  const float* v_tile = v + j0 * p.v.row_stride;
  // B element (e, j) = K[j, e] for S; (j, e) = K[j, e] for dQ; (e, j) = V[j, e] for dP
  pack_b<kNr>(k_tile, p.k.col_stride, p.k.row_stride, p.E, cols, 1.0f, w.k_packed);
  pack_b<kNr>(k_tile, p.k.row_stride, p.k.col_stride, cols, p.E, 1.0f, w.k_rows_packed);
  pack_b<kNr>(v_tile, p.v.col_stride, p.v.row_stride, p.Ev, cols, 1.0f, w.vt_packed);
  std::fill(w.grad_k, w.grad_k + cols * p.E, 0.0f);
  std::fill(w.grad_v, w.grad_v + cols * p.Ev, 0.0f);

  for (int64_t n = 0; n < count; ++n) {
    const int64_t b = problems[n];
    const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
    const float* go = static_cast<const float*>(bp.grad_output.base) + bp.grad_output.offsets[b];
    float* grad_q = grad_q_base + bp.grad_q.offsets[b];
    int64_t q_first, q_last;
    queries_seeing(p, j0, cols, &q_first, &q_last);
    for (int64_t i0 = q_first; i0 < q_last; i0 += t.block_q) {
      const int64_t rows = std::min<int64_t>(t.block_q, q_last - i0);
      const float* q_tile = q + i0 * p.q.row_stride;
      const float* go_tile = go + i0 * bp.grad_output.row_stride;
      // S, then P = exp(S − lse) in w.scores
      pack_a<kMr>(q_tile, p.q.row_stride, p.q.col_stride, rows, p.E, scale, w.q_packed);
      gemm_packed<Isa>(rows, cols, p.E, w.q_packed, w.k_packed, w.scores, lds, false);
      adjust_scores(p, b, i0, rows, j0, cols, w.scores, lds, 1, w.cap_slope);
      // dP̃ = dOᵢ Vⱼᵀ in w.dprob
      pack_a<kMr>(go_tile, bp.grad_output.row_stride, bp.grad_output.col_stride, rows, p.Ev, 1.0f,
                  w.go_packed);
      gemm_packed<Isa>(rows, cols, p.Ev, w.go_packed, w.vt_packed, w.dprob, lds, false);
      for (int64_t r = 0; r < rows; ++r) {
        float* s = w.scores + r * lds;
        float* dp = w.dprob + r * lds;
        const double lse = p.lse[b * p.L + i0 + r];
        if (lse == -std::numeric_limits<double>::infinity()) {  // fully masked row
          std::fill(s, s + cols, 0.0f);
          std::fill(dp, dp + cols, 0.0f);
          continue;
        }
        exp_shift_sum<Isa>(s, cols, static_cast<float>(lse));
        const float d = static_cast<float>(row_dot[b * p.L + i0 + r]);
        for (int64_t c = 0; c < cols; ++c) {
          const float kept = dropout_kept(p, b, i0 + r, j0 + c) ? keep_scale : 0.0f;
          const float prob = s[c];
          const float ds = prob * (dp[c] * kept - d);
          s[c] = prob * kept;  // P̃, for dV
          dp[c] = ds;          // dS, for dK and dQ
        }
        if (bp.grad_scores) {
          float* gs = static_cast<float*>(bp.grad_scores) + (b * p.L + i0 + r) * p.S + j0;
          std::copy(dp, dp + cols, gs);
        }
        // s = cap·tanh(x/cap)   ⇒   ∂x = ∂s·(1 − tanh²)
        if (p.softcap > 0.0)
          for (int64_t c = 0; c < cols; ++c) dp[c] *= w.cap_slope[r * lds + c];
      }
      // dVⱼ += P̃ᵀ dOᵢ: A element (c, r) = P̃[r, c]; B element (r, e) = dO[r, e]
      pack_a<kMr>(w.scores, 1, lds, cols, rows, 1.0f, w.t_packed);
      pack_b<kNr>(go_tile, bp.grad_output.row_stride, bp.grad_output.col_stride, rows, p.Ev, 1.0f,
                  w.rows_packed);
      gemm_packed<Isa>(cols, p.Ev, rows, w.t_packed, w.rows_packed, w.grad_v, p.Ev, true);
      // dKⱼ += scale·dSᵀ Qᵢ
      pack_a<kMr>(w.dprob, 1, lds, cols, rows, scale, w.t_packed);
      pack_b<kNr>(q_tile, p.q.row_stride, p.q.col_stride, rows, p.E, 1.0f, w.rows_packed);
      gemm_packed<Isa>(cols, p.E, rows, w.t_packed, w.rows_packed, w.grad_k, p.E, true);
      // dQᵢ += scale·dS Kⱼ
      pack_a<kMr>(w.dprob, lds, 1, rows, cols, scale, w.t_packed);
      gemm_packed<Isa>(rows, p.E, cols, w.t_packed, w.k_rows_packed,
                       grad_q + i0 * bp.grad_q.row_stride, bp.grad_q.row_stride, true);
    }
  }
  // This tile of dK and dV belongs to this call alone: add it in.
  float* grad_k =
      static_cast<float*>(bp.grad_k.base) + bp.grad_k.offsets[b0] + j0 * bp.grad_k.row_stride;
  float* grad_v =
      static_cast<float*>(bp.grad_v.base) + bp.grad_v.offsets[b0] + j0 * bp.grad_v.row_stride;
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t e = 0; e < p.E; ++e) grad_k[c * bp.grad_k.row_stride + e] += w.grad_k[c * p.E + e];
    for (int64_t e = 0; e < p.Ev; ++e)
      grad_v[c * bp.grad_v.row_stride + e] += w.grad_v[c * p.Ev + e];
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
