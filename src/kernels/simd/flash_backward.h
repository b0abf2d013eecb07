// The fused backward pass of one key tile (FlashAttention-2), written once for
// every ISA, reading Q, dO and (when whole panels allow) K in place. For
// keys [j0, j0 + cols) and every query tile i of every problem
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

// The scratch of one key tile, carved from one buffer.
template <class Isa>
struct BackwardScratch {
  float* k_t;        // [E, round_up(block_k, panel)]   scale·Kᵀ as B
  float* v_t;        // [Ev, round_up(block_k, panel)]  Vᵀ as B
  float* k_rows;     // [block_k, round_up(E, nr)]      K as B, when not readable in place
  float* b_rows;     // [block_q, round_up(max(E, Ev), nr)]  dO or Q as B, likewise
  float* scores;     // [block_q, block_k]  S, P, P̃
  float* dprob;      // [block_q, block_k]  dP, dS
  float* cap_slope;  // [block_q, block_k]  d softcap / dx
  float* grad_k;     // [block_k, E]
  float* grad_v;     // [block_k, Ev]

  static int64_t sizes(const SdpaProblem& p, const FlashTiling& t, int64_t out[9]) {
    constexpr int kPanel = ForwardShape<Isa>::kQueryPanel, kNr = TileShape<Isa>::kNr;
    const int64_t kp = round_up(t.block_k, kPanel);
    const int64_t n[9] = {p.E * kp,
                          p.Ev * kp,
                          t.block_k * round_up(p.E, kNr),
                          t.block_q * round_up(std::max(p.E, p.Ev), kNr),
                          t.block_q * t.block_k,
                          t.block_q * t.block_k,
                          t.block_q * t.block_k,
                          t.block_k * p.E,
                          t.block_k * p.Ev};
    int64_t total = 0;
    for (int i = 0; i < 9; ++i) total += (out[i] = round_up(n[i], 16));
    return total;
  }
  BackwardScratch(const SdpaProblem& p, const FlashTiling& t, float* base) {
    int64_t n[9];
    sizes(p, t, n);
    float** parts[9] = {&k_t,   &v_t,       &k_rows, &b_rows, &scores,
                        &dprob, &cap_slope, &grad_k, &grad_v};
    for (int i = 0; i < 9; ++i) {
      *parts[i] = base;
      base += n[i];
    }
  }
};

template <class Isa>
int64_t backward_scratch_floats(const SdpaProblem& p, const FlashTiling& t) {
  int64_t n[9];
  return BackwardScratch<Isa>::sizes(p, t, n);
}

// A row-major matrix as the B operand of a product with kNr-wide panels: read
// in place when its rows hold whole panels, else packed into `buffer`.
template <class Isa>
BView rows_as_b(const float* m, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t cols,
                float* buffer, int64_t* panel_stride) {
  constexpr int kNr = TileShape<Isa>::kNr;
  if (rows_hold_panels<kNr>(col_stride, cols)) {
    *panel_stride = kNr;
    return BView{m, row_stride};
  }
  pack_b<Isa, kNr>(m, row_stride, col_stride, rows, cols, 1.0f, buffer);
  *panel_stride = rows * kNr;
  return BView{buffer, kNr};
}

// y[e] += x[e] for e < n.
template <class Isa>
void add_into(float* y, const float* x, int64_t n) {
  constexpr int kL = Isa::kLanes;
  int64_t e = 0;
  for (; e + kL <= n; e += kL) Isa::store(y + e, Isa::add(Isa::load(y + e), Isa::load(x + e)));
  for (; e < n; ++e) y[e] += x[e];
}

// The dK and dV of keys [j0, j0 + cols) of batch-head b0 ([cols, E] and
// [cols, Ev], contiguous) added into the gradients: a key tile belongs to
// one call alone.
template <class Isa>
void add_tile_grads(const SdpaBackwardProblem& bp, int64_t b0, int64_t j0, int64_t cols,
                    const float* tile_grad_k, const float* tile_grad_v) {
  const int64_t E = bp.forward.E, Ev = bp.forward.Ev;
  float* grad_k =
      static_cast<float*>(bp.grad_k.base) + bp.grad_k.offsets[b0] + j0 * bp.grad_k.row_stride;
  float* grad_v =
      static_cast<float*>(bp.grad_v.base) + bp.grad_v.offsets[b0] + j0 * bp.grad_v.row_stride;
  for (int64_t c = 0; c < cols; ++c) {
    add_into<Isa>(grad_k + c * bp.grad_k.row_stride, tile_grad_k + c * E, E);
    add_into<Isa>(grad_v + c * bp.grad_v.row_stride, tile_grad_v + c * Ev, Ev);
  }
}

// Row i of batch-head b in a key tile [j0, j0 + cols): its scores s become
// the probabilities P = exp(S − lse) over the keys it sees, and s and its dP
// (dp) are zeroed from there up to `width`. Returns how many keys it sees, or
// −1 for a fully masked row (lse = −∞: s and dp all zero, no gradient).
template <class Isa>
int64_t row_probabilities(const SdpaProblem& p, int64_t b, int64_t i, int64_t j0, int64_t cols,
                          bool diagonal, float* s, float* dp, int64_t width) {
  const double lse = p.lse[b * p.L + i];
  const int64_t seen = diagonal ? keys_seen_by(p, i, j0, cols) : cols;
  std::fill(s + seen, s + width, 0.0f);
  std::fill(dp + seen, dp + width, 0.0f);
  if (lse == -std::numeric_limits<double>::infinity()) {
    std::fill(s, s + seen, 0.0f);
    std::fill(dp, dp + seen, 0.0f);
    return -1;
  }
  exp_shift_sum<Isa>(s, seen, static_cast<float>(lse));
  return seen;
}

// dp[c] = s[c]·(dp[c] − d) for c < n.
template <class Isa>
void probability_times_shifted(const float* s, float* dp, int64_t n, float d) {
  constexpr int kL = Isa::kLanes;
  const typename Isa::V vd = Isa::set1(d);
  int64_t c = 0;
  for (; c + kL <= n; c += kL)
    Isa::store(dp + c, Isa::mul(Isa::load(s + c), Isa::sub(Isa::load(dp + c), vd)));
  for (; c < n; ++c) dp[c] = s[c] * (dp[c] - d);
}

// out[c, :] += Σᵣ A[r, c]·B[r, :] for the tile's keys c < cols (A element
// (c, r) at a[r·lds + c], B rows of `width` floats), in panels of kRows keys,
// each from the first query that sees one of them (A is 0 above it).
template <class Isa, int kRows, int kVecs>
void keys_times_rows(const SdpaProblem& p, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                     bool diagonal, const float* a, int64_t lds, BView b, int64_t panel_stride,
                     int64_t width, float* out) {
  int64_t first = 0;
  for (int64_t c0 = 0; c0 < cols; c0 += kRows) {
    while (diagonal && first < rows && keys_seen_by(p, i0 + first, j0, cols) <= c0) ++first;
    gemm_tiles<Isa, kRows, kVecs>(std::min<int64_t>(kRows, cols - c0), width, rows - first,
                                  AView{a + first * lds + c0, 1, lds}, kRows,
                                  BView{b.b + first * b.step, b.step}, panel_stride,
                                  out + c0 * width, width, true);
  }
}

template <class Isa>
void flash_backward_tile(const SdpaBackwardProblem& bp, const FlashTiling& t,
                         const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                         const double* row_dot, float* grad_q_base, float* scratch) {
  using Scores = ForwardShape<Isa>;  // S-shaped products: 8 rows × 48 columns (AVX-512)
  constexpr int kMr = TileShape<Isa>::kMr;
  const BackwardScratch<Isa> w(bp.forward, t, scratch);
  const SdpaProblem& p = bp.forward;
  const int64_t lds = t.block_k;
  const float keep_scale = p.dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 1.0f;
  const float scale = static_cast<float>(p.scale);
  // Keys and values of this tile, packed once for all query tiles.
  const int64_t b0 = problems[0];
  const float* k_tile = static_cast<const float*>(p.k.base) + p.k.offsets[b0] + j0 * p.k.row_stride;
  const float* v_tile = static_cast<const float*>(p.v.base) + p.v.offsets[b0] + j0 * p.v.row_stride;
  // B element (e, j) = scale·K[j, e] for S; (e, j) = V[j, e] for dP
  pack_b<Isa, Scores::kQueryPanel>(k_tile, p.k.col_stride, p.k.row_stride, p.E, cols, scale, w.k_t);
  pack_b<Isa, Scores::kQueryPanel>(v_tile, p.v.col_stride, p.v.row_stride, p.Ev, cols, 1.0f, w.v_t);
  int64_t k_panel_stride;
  const BView k_rows =
      rows_as_b<Isa>(k_tile, p.k.row_stride, p.k.col_stride, cols, p.E, w.k_rows, &k_panel_stride);
  std::fill(w.grad_k, w.grad_k + cols * p.E, 0.0f);
  std::fill(w.grad_v, w.grad_v + cols * p.Ev, 0.0f);
  const int64_t score_panel = Scores::kQueryPanel;

  for (int64_t n = 0; n < count; ++n) {
    const int64_t b = problems[n];
    const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
    const float* go = static_cast<const float*>(bp.grad_output.base) + bp.grad_output.offsets[b];
    const int64_t ldq = p.q.row_stride, ldo = bp.grad_output.row_stride;
    float* grad_q = grad_q_base + bp.grad_q.offsets[b];
    int64_t kept_begin = 0, kept_end = p.S;
    trim_to_kept_keys(p, b, &kept_begin, &kept_end);
    if (kept_end <= j0 || kept_begin >= j0 + cols) continue;  // all padding for problem b
    // Keys past the last one problem b keeps (right padding) are skipped: P is
    // 0 there, so they add nothing to dQ, dK or dV.
    const int64_t kept_cols = std::min(cols, kept_end - j0);
    int64_t q_first, q_last;
    queries_seeing(p, j0, kept_cols, &q_first, &q_last);
    for (int64_t i0 = q_first; i0 < q_last; i0 += t.block_q) {
      const int64_t rows = std::min<int64_t>(t.block_q, q_last - i0);
      const float* q_tile = q + i0 * ldq;
      const float* go_tile = go + i0 * ldo;
      // On the diagonal a query sees none of the keys past its own range, so
      // each panel of queries computes S and dP only up to the last key its
      // last query sees (the rest of a row is 0 in P and dS).
      const bool diagonal = !tile_fully_visible(p, i0, rows, j0, kept_cols);
      for (int64_t r0 = 0; r0 < rows; r0 += Scores::kKeyRows) {
        const int64_t n = std::min<int64_t>(Scores::kKeyRows, rows - r0);
        const int64_t extent =
            diagonal ? keys_seen_by(p, i0 + r0 + n - 1, j0, kept_cols) : kept_cols;
        // S = Qᵢ (scale·Kⱼ)ᵀ, Q rows read in place
        gemm_tiles<Isa, Scores::kKeyRows, Scores::kKeyVecs>(
            n, extent, p.E, AView{q_tile + r0 * ldq, ldq, p.q.col_stride}, Scores::kKeyRows * ldq,
            BView{w.k_t, score_panel}, p.E * score_panel, w.scores + r0 * lds, lds, false);
        // dP̃ = dOᵢ Vⱼᵀ
        gemm_tiles<Isa, Scores::kKeyRows, Scores::kKeyVecs>(
            n, extent, p.Ev, AView{go_tile + r0 * ldo, ldo, bp.grad_output.col_stride},
            Scores::kKeyRows * ldo, BView{w.v_t, score_panel}, p.Ev * score_panel,
            w.dprob + r0 * lds, lds, false);
      }
      adjust_scores(p, b, i0, rows, j0, kept_cols, w.scores, lds, 1, w.cap_slope);
      for (int64_t r = 0; r < rows; ++r) {
        float* s = w.scores + r * lds;
        float* dp = w.dprob + r * lds;
        const int64_t seen =
            row_probabilities<Isa>(p, b, i0 + r, j0, kept_cols, diagonal, s, dp, cols);
        if (seen < 0) continue;
        const float d = static_cast<float>(row_dot[b * p.L + i0 + r]);
        if (p.dropout_p > 0.0) {
          for (int64_t c = 0; c < seen; ++c) {
            const float kept = dropout_kept(p, b, i0 + r, j0 + c) ? keep_scale : 0.0f;
            const float prob = s[c];
            s[c] = prob * kept;                 // P̃, for dV
            dp[c] = prob * (dp[c] * kept - d);  // dS
          }
        } else {
          probability_times_shifted<Isa>(s, dp, seen, d);  // dS = P ∘ (dP − D); P̃ = P
        }
        if (bp.grad_scores) {
          float* gs = static_cast<float*>(bp.grad_scores) + (b * p.L + i0 + r) * p.S + j0;
          std::copy(dp, dp + cols, gs);
        }
        // s = cap·tanh(x/cap)   ⇒   ∂x = ∂s·(1 − tanh²); and x = scale·q·k
        if (p.softcap > 0.0) {
          for (int64_t c = 0; c < seen; ++c) dp[c] *= w.cap_slope[r * lds + c] * scale;
        } else {
          scale_row<Isa>(dp, seen, scale);
        }
      }
      // dVⱼ += P̃ᵀ dOᵢ and dKⱼ += (scale·dS)ᵀ Qᵢ: A element (c, r) = P̃[r, c]
      // (or dS[r, c]), a ready panel with step lds; B the rows of dO (or Q),
      // read in place in the wide shape when they hold whole panels of it.
      auto add_keys_times_rows = [&](const float* a, const float* m, int64_t ld, int64_t cs,
                                     int64_t width, float* out) {
        using Wide = WideShape<Isa>;
        if (Wide::kUsable && rows_hold_panels<Wide::kNr>(cs, width)) {
          keys_times_rows<Isa, Wide::kRows, Wide::kVecs>(p, i0, rows, j0, kept_cols, diagonal, a,
                                                         lds, BView{m, ld}, Wide::kNr, width, out);
        } else {
          int64_t panel_stride;
          const BView b = rows_as_b<Isa>(m, ld, cs, rows, width, w.b_rows, &panel_stride);
          keys_times_rows<Isa, kMr, 2>(p, i0, rows, j0, kept_cols, diagonal, a, lds, b,
                                       panel_stride, width, out);
        }
      };
      add_keys_times_rows(w.scores, go_tile, ldo, bp.grad_output.col_stride, p.Ev, w.grad_v);
      add_keys_times_rows(w.dprob, q_tile, ldq, p.q.col_stride, p.E, w.grad_k);
      // dQᵢ += (scale·dS) Kⱼ, dS rows read in place, each panel of queries
      // up to the last key its last query sees
      const int64_t ldgq = bp.grad_q.row_stride;
      for (int64_t r0 = 0; r0 < rows; r0 += Scores::kKeyRows) {
        const int64_t n = std::min<int64_t>(Scores::kKeyRows, rows - r0);
        const int64_t depth =
            diagonal ? keys_seen_by(p, i0 + r0 + n - 1, j0, kept_cols) : kept_cols;
        gemm_tiles<Isa, Scores::kKeyRows, 2>(n, p.E, depth, AView{w.dprob + r0 * lds, lds, 1},
                                             Scores::kKeyRows * lds, k_rows, k_panel_stride,
                                             grad_q + (i0 + r0) * ldgq, ldgq, true);
      }
    }
  }
  add_tile_grads<Isa>(bp, b0, j0, cols, w.grad_k, w.grad_v);
}

}  // namespace
}  // namespace qkv::kernels::simd
