// The fused backward pass of one key tile with bfloat16 products, for
// problems with bf16_products (float32 operands; bfloat16 tensors are widened
// by the op first). The steps of flash_backward.h, but each of the five
// products multiplies bfloat16 values with float32 sums:
//   S  = scale · Q̂ K̂ᵀ            dP = dÔ V̂ᵀ
//   dVⱼ += P̂ᵀ dÔ                 dKⱼ += scale · dŜᵀ Q̂      dQᵢ += scale · dŜ K̂
// where x̂ is x rounded to bfloat16 (nearest even): Q, K, V, dO, and P and dS
// where they are multiplied (P, dS themselves are computed in float32 from S,
// dP and the saved log-sum-exp). On AVX512_BF16 the products run on
// vdpbf16ps (pair_gemm_tiles of flash_forward_bf16.h); other ISAs widen the
// bfloat16 values and use FMAs, which gives the same products. No dropout and
// no gradient of a float mask (the op keeps those on the float32 kernel).
//
// Operand layouts (pairs run along each product's reduction dimension):
//   S:   A = Q̂ rows [rows][E pairs];      B = K̂ᵀ panels [E/2][keys]
//   dP:  A = dÔ rows [rows][Ev pairs];    B = V̂ᵀ panels [Ev/2][keys]
//   dV:  A = P̂ᵀ  [rows/2][keys] pairs;    B = dÔ panels [rows/2][Ev]
//   dK:  A = dŜᵀ [rows/2][keys] pairs;    B = Q̂ panels [rows/2][E]
//   dQ:  A = dŜ rows [rows][key pairs];   B = K̂ panels [keys/2][E]
#pragma once

#include "kernels/simd/flash_backward.h"
#include "kernels/simd/flash_forward_bf16.h"

namespace qkv::kernels::simd {
namespace {

// The scratch of one key tile of the bfloat16 backward, carved from one buffer.
template <class Isa>
struct Bf16BackwardScratch {
  static constexpr int kNr = TileShape<Isa>::kNr;
  uint32_t* k_t;       // [keys/kNr][E/2][kNr]    K̂ᵀ panels (S)
  uint32_t* v_t;       // [keys/kNr][Ev/2][kNr]   V̂ᵀ panels (dP)
  uint32_t* k_pairs;   // [E/kNr][keys/2][kNr]    K̂ panels (dQ)
  uint16_t* q_rows;    // [block_q][2·(E/2)]      Q̂ rows (S)
  uint16_t* go_rows;   // [block_q][2·(Ev/2)]     dÔ rows (dP)
  uint32_t* q_pairs;   // [E/kNr][block_q/2][kNr]  Q̂ panels (dK)
  uint32_t* go_pairs;  // [Ev/kNr][block_q/2][kNr] dÔ panels (dV)
  float* scores;       // [block_q, block_k]  S, P
  float* dprob;        // [block_q, block_k]  dP, dS
  float* cap_slope;    // [block_q, block_k]
  uint32_t* p_t;       // [block_q/2][block_k]  P̂ᵀ pairs along queries
  uint32_t* ds_t;      // [block_q/2][block_k]  dŜᵀ pairs along queries
  uint16_t* ds_rows;   // [block_q][2·(block_k/2)]  dŜ rows
  float* grad_k;       // [block_k, E]
  float* grad_v;       // [block_k, Ev]

  static constexpr int kParts = 15;
  static int64_t sizes(const SdpaProblem& p, const FlashTiling& t, int64_t out[kParts]) {
    const int64_t e2 = pair_count(p.E), ev2 = pair_count(p.Ev);
    const int64_t q2 = pair_count(t.block_q), k2 = pair_count(t.block_k);
    const int64_t kp = round_up(t.block_k, kNr);
    const int64_t n[kParts] = {e2 * kp,
                               ev2 * kp,
                               k2 * round_up(p.E, kNr),
                               t.block_q * e2,
                               t.block_q * ev2,
                               q2 * round_up(p.E, kNr),
                               q2 * round_up(p.Ev, kNr),
                               t.block_q * t.block_k,
                               t.block_q * t.block_k,
                               t.block_q * t.block_k,
                               q2 * t.block_k,
                               q2 * t.block_k,
                               t.block_q * k2,
                               t.block_k * p.E,
                               t.block_k * p.Ev};
    int64_t total = 0;
    // One vector of slack each: rows are read a whole vector at a time.
    for (int i = 0; i < kParts; ++i) total += (out[i] = round_up(n[i] + Isa::kLanes, 16));
    return total;
  }
  Bf16BackwardScratch(const SdpaProblem& p, const FlashTiling& t, float* base) {
    int64_t n[kParts];
    sizes(p, t, n);
    float* parts[kParts];
    for (int i = 0; i < kParts; ++i) {
      parts[i] = base;
      base += n[i];
    }
    k_t = reinterpret_cast<uint32_t*>(parts[0]);
    v_t = reinterpret_cast<uint32_t*>(parts[1]);
    k_pairs = reinterpret_cast<uint32_t*>(parts[2]);
    q_rows = reinterpret_cast<uint16_t*>(parts[3]);
    go_rows = reinterpret_cast<uint16_t*>(parts[4]);
    q_pairs = reinterpret_cast<uint32_t*>(parts[5]);
    go_pairs = reinterpret_cast<uint32_t*>(parts[6]);
    scores = parts[7];
    dprob = parts[8];
    cap_slope = parts[9];
    p_t = reinterpret_cast<uint32_t*>(parts[10]);
    ds_t = reinterpret_cast<uint32_t*>(parts[11]);
    ds_rows = reinterpret_cast<uint16_t*>(parts[12]);
    grad_k = parts[13];
    grad_v = parts[14];
  }
};

template <class Isa>
int64_t backward_bf16_scratch_floats(const SdpaProblem& p, const FlashTiling& t) {
  int64_t n[Bf16BackwardScratch<Isa>::kParts];
  return Bf16BackwardScratch<Isa>::sizes(p, t, n);
}

// The bfloat16 bits of a float (round to nearest even), as a pair half.
inline uint32_t bf16_bits(float x) { return float_to_bfloat16(x); }

// A float matrix m [rows, cols] (strides rs, cs) with its columns cut into
// panels of kNr and its rows paired: dst[panel][r2][c] = (m̂[2·r2][c],
// m̂[2·r2 + 1][c]), zero past the last row and column.
template <class Isa>
void pack_row_pairs(const float* m, int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                    uint32_t* dst) {
  constexpr int kNr = TileShape<Isa>::kNr, kL = Isa::kLanes;
  const int64_t r2n = pair_count(rows);
  for (int64_t c0 = 0; c0 < cols; c0 += kNr, dst += r2n * kNr) {
    const int64_t width = std::min<int64_t>(kNr, cols - c0);
    for (int64_t r2 = 0; r2 < r2n; ++r2) {
      const float* even = m + 2 * r2 * rs + c0 * cs;
      const bool has_odd = 2 * r2 + 1 < rows;
      const float* odd = even + rs;
      uint32_t* out = dst + r2 * kNr;
      int64_t c = 0;
      if (cs == 1) {
        for (; c < width; c += kL) {
          const int n = static_cast<int>(std::min<int64_t>(kL, width - c));
          const typename Isa::V e = n == kL ? Isa::load(even + c) : Isa::load_first(even + c, n);
          const typename Isa::V o =
              !has_odd ? Isa::zero() : (n == kL ? Isa::load(odd + c) : Isa::load_first(odd + c, n));
          store_pairs<Isa>(out + c, Isa::bf16_pairs(e, o));
        }
      } else {
        for (; c < width; ++c)
          out[c] = bf16_bits(even[c * cs]) | (has_odd ? bf16_bits(odd[c * cs]) << 16 : 0u);
      }
      for (; c < kNr; ++c) out[c] = 0;
    }
  }
}

// A float matrix m [rows, cols] as the transposed B operand with its columns
// paired: dst[row panel][c2][r] = (m̂[r][2·c2], m̂[r][2·c2 + 1]), rows cut
// into panels of kNr, zero past the last row and column.
template <class Isa>
void pack_column_pairs(const float* m, int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                       uint32_t* dst) {
  constexpr int kNr = TileShape<Isa>::kNr;
  const int64_t c2n = pair_count(cols);
  for (int64_t r0 = 0; r0 < rows; r0 += kNr, dst += c2n * kNr) {
    const int64_t height = std::min<int64_t>(kNr, rows - r0);
    for (int64_t r = 0; r < height; ++r) {
      // The row rounded (in vectors on AVX512_BF16) a chunk at a time: its
      // bfloat16 values are already the pairs, to be scattered kNr apart.
      constexpr int64_t kChunk = 256;
      uint16_t rounded[kChunk];
      const float* row = m + (r0 + r) * rs;
      for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
        const int64_t n = std::min<int64_t>(kChunk, cols - c0);
        round_row_bf16<Isa>(row + c0 * cs, cs, n, rounded);
        if (n % 2 != 0) rounded[n] = 0;
        for (int64_t i = 0; i < pair_count(n); ++i)
          dst[(c0 / 2 + i) * kNr + r] = load_pair(rounded + 2 * i);
      }
    }
    for (int64_t r = height; r < kNr; ++r)
      for (int64_t c2 = 0; c2 < c2n; ++c2) dst[c2 * kNr + r] = 0;
  }
}

// Rows [rows, n] (strides rs, cs) rounded to bfloat16 rows of 2·(n/2),
// an odd n padded with 0.
template <class Isa>
void round_rows_bf16(const float* m, int64_t rs, int64_t cs, int64_t rows, int64_t n,
                     uint16_t* dst) {
  const int64_t width = 2 * pair_count(n);
  for (int64_t r = 0; r < rows; ++r) {
    round_row_bf16<Isa>(m + r * rs, cs, n, dst + r * width);
    if (width > n) dst[r * width + n] = 0;
  }
}

// out[c, :] (+)= scale · Σᵣ Â[r, c]·B̂[r, :] over the tile's keys c < cols,
// A as pairs along queries (a[r2·lds + c]), B as row-pair panels of `width`
// columns; per panel of kRows keys from the first query pair that sees one.
template <class Isa>
void keys_times_row_pairs(const SdpaProblem& p, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                          bool diagonal, const uint32_t* a, int64_t lds, const uint32_t* b,
                          int64_t width, float scale, float* out) {
  constexpr int kRows = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  const int64_t r2n = pair_count(rows);
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  int64_t first = 0;
  for (int64_t c0 = 0; c0 < cols; c0 += kRows) {
    while (diagonal && first < rows && keys_seen_by(p, i0 + first, j0, cols) <= c0) ++first;
    const int64_t f2 = first / 2;
    if (f2 >= r2n) break;
    pair_gemm_tiles<Isa, kRows, 2>(std::min<int64_t>(kRows, cols - c0), width, r2n - f2,
                                   PairAView{a16 + 2 * (f2 * lds + c0), 2, 2 * lds}, 2 * kRows,
                                   PairBView{b + f2 * kNr, kNr}, r2n * kNr, out + c0 * width, width,
                                   true, scale);
  }
}

template <class Isa>
void flash_backward_bf16_tile(const SdpaBackwardProblem& bp, const FlashTiling& t,
                              const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                              const double* row_dot, float* grad_q_base, float* scratch) {
  constexpr int kMr = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  const Bf16BackwardScratch<Isa> w(bp.forward, t, scratch);
  const SdpaProblem& p = bp.forward;
  const int64_t lds = t.block_k;
  const float scale = static_cast<float>(p.scale);
  const int64_t e2 = pair_count(p.E), ev2 = pair_count(p.Ev), c2 = pair_count(cols);
  const int64_t b0 = problems[0];
  const float* k_tile = static_cast<const float*>(p.k.base) + p.k.offsets[b0] + j0 * p.k.row_stride;
  const float* v_tile = static_cast<const float*>(p.v.base) + p.v.offsets[b0] + j0 * p.v.row_stride;
  pack_column_pairs<Isa>(k_tile, p.k.row_stride, p.k.col_stride, cols, p.E, w.k_t);
  pack_column_pairs<Isa>(v_tile, p.v.row_stride, p.v.col_stride, cols, p.Ev, w.v_t);
  pack_row_pairs<Isa>(k_tile, p.k.row_stride, p.k.col_stride, cols, p.E, w.k_pairs);
  std::fill(w.grad_k, w.grad_k + cols * p.E, 0.0f);
  std::fill(w.grad_v, w.grad_v + cols * p.Ev, 0.0f);

  for (int64_t n = 0; n < count; ++n) {
    const int64_t b = problems[n];
    const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
    const float* go = static_cast<const float*>(bp.grad_output.base) + bp.grad_output.offsets[b];
    const int64_t ldq = p.q.row_stride, ldo = bp.grad_output.row_stride;
    const int64_t qcs = p.q.col_stride, ocs = bp.grad_output.col_stride;
    float* grad_q = grad_q_base + bp.grad_q.offsets[b];
    int64_t kept_begin = 0, kept_end = p.S;
    trim_to_kept_keys(p, b, &kept_begin, &kept_end);
    if (kept_end <= j0 || kept_begin >= j0 + cols) continue;
    int64_t q_first, q_last;
    queries_seeing(p, j0, cols, &q_first, &q_last);
    for (int64_t i0 = q_first; i0 < q_last; i0 += t.block_q) {
      const int64_t rows = std::min<int64_t>(t.block_q, q_last - i0);
      const float* q_tile = q + i0 * ldq;
      const float* go_tile = go + i0 * ldo;
      round_rows_bf16<Isa>(q_tile, ldq, qcs, rows, p.E, w.q_rows);
      round_rows_bf16<Isa>(go_tile, ldo, ocs, rows, p.Ev, w.go_rows);
      const bool diagonal = !tile_fully_visible(p, i0, rows, j0, cols);
      for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
        const int64_t m = std::min<int64_t>(kMr, rows - r0);
        const int64_t extent = diagonal ? keys_seen_by(p, i0 + r0 + m - 1, j0, cols) : cols;
        if (extent <= 0) continue;
        pair_gemm_tiles<Isa, kMr, 2>(m, extent, e2, PairAView{w.q_rows + r0 * 2 * e2, 2 * e2, 2},
                                     kMr * 2 * e2, PairBView{w.k_t, kNr}, e2 * kNr,
                                     w.scores + r0 * lds, lds, false, scale);
        pair_gemm_tiles<Isa, kMr, 2>(
            m, extent, ev2, PairAView{w.go_rows + r0 * 2 * ev2, 2 * ev2, 2}, kMr * 2 * ev2,
            PairBView{w.v_t, kNr}, ev2 * kNr, w.dprob + r0 * lds, lds, false, 1.0f);
      }
      adjust_scores(p, b, i0, rows, j0, cols, w.scores, lds, 1, w.cap_slope);
      for (int64_t r = 0; r < rows; ++r) {
        float* s = w.scores + r * lds;
        float* dp = w.dprob + r * lds;
        const int64_t seen = row_probabilities<Isa>(p, b, i0 + r, j0, cols, diagonal, s, dp, lds);
        if (seen < 0) continue;
        probability_times_shifted<Isa>(s, dp, seen, static_cast<float>(row_dot[b * p.L + i0 + r]));
        if (p.softcap > 0.0)
          for (int64_t c = 0; c < seen; ++c) dp[c] *= w.cap_slope[r * lds + c];
      }
      // P̂ᵀ and dŜᵀ as pairs along queries; dÔ and Q̂ as row-pair panels.
      pair_tile_rows<Isa>(w.scores, lds, rows, cols, w.p_t);
      pair_tile_rows<Isa>(w.dprob, lds, rows, cols, w.ds_t);
      pack_row_pairs<Isa>(go_tile, ldo, ocs, rows, p.Ev, w.go_pairs);
      pack_row_pairs<Isa>(q_tile, ldq, qcs, rows, p.E, w.q_pairs);
      keys_times_row_pairs<Isa>(p, i0, rows, j0, cols, diagonal, w.p_t, lds, w.go_pairs, p.Ev, 1.0f,
                                w.grad_v);
      keys_times_row_pairs<Isa>(p, i0, rows, j0, cols, diagonal, w.ds_t, lds, w.q_pairs, p.E, scale,
                                w.grad_k);
      // dQᵢ += scale · dŜ K̂ⱼ, each panel of queries up to its last visible key
      round_rows_bf16<Isa>(w.dprob, lds, 1, rows, cols, w.ds_rows);
      const int64_t ldgq = bp.grad_q.row_stride;
      for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
        const int64_t m = std::min<int64_t>(kMr, rows - r0);
        const int64_t depth =
            pair_count(diagonal ? keys_seen_by(p, i0 + r0 + m - 1, j0, cols) : cols);
        if (depth <= 0) continue;
        pair_gemm_tiles<Isa, kMr, 2>(m, p.E, depth, PairAView{w.ds_rows + r0 * 2 * c2, 2 * c2, 2},
                                     kMr * 2 * c2, PairBView{w.k_pairs, kNr}, c2 * kNr,
                                     grad_q + (i0 + r0) * ldgq, ldgq, true, scale);
      }
    }
  }
  add_tile_grads<Isa>(bp, b0, j0, cols, w.grad_k, w.grad_v);
}

}  // namespace
}  // namespace qkv::kernels::simd
