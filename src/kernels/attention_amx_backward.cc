// The bfloat16-product backward of the amx kernel table (kernels_avx512.cc):
// flash_backward_bf16.h's arithmetic (Q, K, V, dO, P and dS rounded to
// bfloat16 where they are multiplied; float32 sums; softmax in float32) with
// the five products on AMX tiles (kernels/simd/amx_tiles.h: A tiles are
// rows of bfloat16 pairs along the reduction, B tiles "panels" of 32
// columns, a step being one pair for each column, 128 bytes).
//
// One call owns the keys [j0, j0 + cols) of a group of problems (one K/V
// matrix; tiles of 256 keys where that leaves work for every thread:
// amx_backward_bf16_key_block). K and V are packed once; the queries that
// see the keys are taken in chunks of up to kChunk rows, in halves of 32
// (one C block tall). The products, A × B:
//
//   S  = scale · Q̂ K̂ᵀ    A: Q̂ rows, pairs along E
//                         B: K̂ᵀ panels (step: a pair of E; column: a key)
//   dP = dÔ V̂ᵀ           A: dÔ rows, pairs along Ev
//                         B: V̂ᵀ panels (step: a pair of Ev; column: a key)
//   dV += P̂ᵀ dÔ          A: P̂ᵀ rows (one per key), pairs along queries
//                         B: dÔ panels (step: a pair of queries; column: e)
//   dK += dŜᵀ Q̂          A: dŜᵀ rows (one per key), pairs along queries
//                         B: Q̂ panels (step: a pair of queries; column: e)
//   dQ += scale · dŜ K̂   A: dŜ rows, pairs along keys
//                         B: K̂ panels (step: a pair of keys; column: e)
//
// The A operands of dV and dK are the chunk's P and dS transposed: rows of
// P are paired (row 2i with 2i + 1) and the 16 × 16 blocks of those 4-byte
// pairs transposed in registers; K̂ᵀ and V̂ᵀ are made the same way from the
// bfloat16 rows of K and V. dK and dV add up over the call's chunks in C
// tiles kept in float32 scratch (scaled and added to the gradients at the
// end); dQ is added, times scale, into its rows after each chunk. E, Ev,
// the keys and each half's queries are padded with zeros to multiples of
// 32; P and dS are zero past each row's visible keys.
//
// Everything that reaches this entry runs here (float32 operands with
// bf16_products, no dropout, no grad_scores: runs_bf16_backward); a problem
// without bf16_products, which the driver never sends, would take the
// avx512_bf16 entry.
#include <omp.h>

#include <cstring>

#include "kernels/simd/amx_operand_rows.h"
#include "kernels/simd/amx_tiles.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/flash_forward_bf16.h"

namespace qkv::kernels {

int64_t avx512_bf16_backward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void avx512_bf16_backward_tile(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                               const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                               const double* row_dot, float* grad_q_base, float* scratch);

namespace {

using amx::bf16x16;
using amx::row_as_bf16;
using amx::transpose_16x16_words;
using amx::transpose_rows_into_panels;
using simd::Avx512Bf16;
using simd::round_up;
using V = __m512;
constexpr int64_t kBlock = amx::kBlock;  // 32
// Queries per chunk: two C blocks tall, so that the dK and dV sums (C tiles
// loaded and stored per chunk) take two steps of the reduction per load.
constexpr int64_t kChunk = 64;

bool runs_on_tiles(const SdpaProblem& p) {
  return p.bf16_products && (p.dtype == DType::kFloat32 || p.dtype == DType::kBFloat16) &&
         p.dropout_p == 0.0;
}

// The work memory of one call, carved from the driver's scratch (64-byte
// aligned pieces, in floats).
struct Scratch {
  int64_t ep, evp, kp;  // E, Ev and the keys of a tile, padded to 32
  uint16_t* k_rows;     // [kp][ep]   K̂ rows
  uint16_t* v_rows;     // [kp][evp]  V̂ rows
  uint32_t* k_t;        // [kp/32][ep/2][32]   K̂ᵀ panels (B of S)
  uint32_t* v_t;        // [kp/32][evp/2][32]  V̂ᵀ panels (B of dP)
  uint32_t* k_pairs;    // [ep/32][kp/2][32]   K̂ panels (B of dQ)
  uint16_t* q;          // [kChunk][ep]   Q̂ rows (A of S)
  uint16_t* go;         // [kChunk][evp]  dÔ rows (A of dP)
  uint32_t* q_pairs;    // [ep/32][kChunk/2][32]   Q̂ panels (B of dK)
  uint32_t* go_pairs;   // [evp/32][kChunk/2][32]  dÔ panels (B of dV)
  float* scores;        // [kChunk][kp]  S, then P
  float* dprob;         // [kChunk][kp]  dP, then dS
  float* cap_slope;     // [kChunk][kp]  d softcap / dx
  uint32_t* p_t;        // [kp][kChunk/2]  P̂ᵀ (A of dV)
  uint32_t* ds_t;       // [kp][kChunk/2]  dŜᵀ (A of dK)
  uint16_t* ds;         // [kChunk][kp]    dŜ rows (A of dQ)
  float* grad_k;        // [kp][ep]   dK sums (unscaled)
  float* grad_v;        // [kp][evp]  dV sums
  int64_t floats;

  // base == nullptr: only counts the floats.
  Scratch(const SdpaProblem& p, const FlashTiling& t, float* base)
      : ep(round_up(p.E, kBlock)), evp(round_up(p.Ev, kBlock)), kp(round_up(t.block_k, kBlock)) {
    int64_t at = 0;
    auto take = [&](int64_t count) {
      float* piece = base != nullptr ? base + at : nullptr;
      at += round_up(count, 16);
      return piece;
    };
    auto words = [&](int64_t count) { return reinterpret_cast<uint32_t*>(take(count)); };
    auto halves = [&](int64_t count) { return reinterpret_cast<uint16_t*>(take(count / 2)); };
    k_rows = halves(kp * ep);
    v_rows = halves(kp * evp);
    k_t = words(kp * ep / 2);
    v_t = words(kp * evp / 2);
    k_pairs = words(kp * ep / 2);
    q = halves(kChunk * ep);
    go = halves(kChunk * evp);
    q_pairs = words(kChunk * ep / 2);
    go_pairs = words(kChunk * evp / 2);
    scores = take(kChunk * kp);
    dprob = take(kChunk * kp);
    cap_slope = p.softcap > 0.0 ? take(kChunk * kp) : nullptr;
    p_t = words(kp * kChunk / 2);
    ds_t = words(kp * kChunk / 2);
    ds = halves(kChunk * kp);
    grad_k = take(kp * ep);
    grad_v = take(kp * evp);
    floats = at;
  }
};

inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 bfloat16 of row a and 16 of row b as the pairs (a_i, b_i).
inline __m512i pair_rows(const uint16_t* a, const uint16_t* b) {
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// `rows` bfloat16 rows of `width` (multiple of 32; rows even, a multiple of
// 2) as panels of 32 columns with the rows paired: word
// ((e / 32) · rows/2 + r2) · 32 + e % 32 = (m[2·r2][e], m[2·r2 + 1][e]).
void pair_rows_into_panels(const uint16_t* m, int64_t rows, int64_t width, uint32_t* dst) {
  for (int64_t r2 = 0; r2 < rows / 2; ++r2) {
    const uint16_t* even = m + 2 * r2 * width;
    for (int64_t e = 0; e < width; e += 16)
      _mm512_storeu_si512(dst + ((e / kBlock) * (rows / 2) + r2) * kBlock + e % kBlock,
                          pair_rows(even + e, even + width + e));
  }
}

// Keys [j0, j0 + cols) of the group's K and V as the three B operands.
void pack_keys_values(const SdpaProblem& p, int64_t b0, int64_t j0, int64_t cols,
                      const Scratch& w) {
  for (int64_t c = 0; c < w.kp; ++c) {
    if (c < cols) {
      row_as_bf16(p.k, p.dtype, b0, j0 + c, p.E, w.ep, w.k_rows + c * w.ep);
      row_as_bf16(p.v, p.dtype, b0, j0 + c, p.Ev, w.evp, w.v_rows + c * w.evp);
    } else {
      std::fill_n(w.k_rows + c * w.ep, w.ep, uint16_t{0});
      std::fill_n(w.v_rows + c * w.evp, w.evp, uint16_t{0});
    }
  }
  transpose_rows_into_panels(w.k_rows, w.kp, w.ep, w.k_t);
  transpose_rows_into_panels(w.v_rows, w.kp, w.evp, w.v_t);
  pair_rows_into_panels(w.k_rows, w.kp, w.ep, w.k_pairs);
}

// C[32][32] (float, rows c_stride bytes apart) += A · B over `blocks` steps
// of 32 along the reduction: A rows a_stride bytes apart, B a panel.
void add_product_block(const char* a, int64_t a_stride, const char* b, int64_t blocks, float* c,
                       int64_t c_stride) {
  char* out = reinterpret_cast<char*>(c);
  _tile_loadd(0, out, c_stride);
  _tile_loadd(1, out + amx::kTileBytes, c_stride);
  _tile_loadd(2, out + 16 * c_stride, c_stride);
  _tile_loadd(3, out + 16 * c_stride + amx::kTileBytes, c_stride);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const char* bk = b + kb * 16 * amx::kPanelRowBytes;
    _tile_loadd(6, bk, amx::kPanelRowBytes);
    _tile_loadd(7, bk + amx::kTileBytes, amx::kPanelRowBytes);
    _tile_loadd(4, a + kb * amx::kTileBytes, a_stride);
    _tile_loadd(5, a + 16 * a_stride + kb * amx::kTileBytes, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, c_stride);
  _tile_stored(1, out + amx::kTileBytes, c_stride);
  _tile_stored(2, out + 16 * c_stride, c_stride);
  _tile_stored(3, out + 16 * c_stride + amx::kTileBytes, c_stride);
}

// One chunk: queries [i0, i0 + rows) of problem b, rows ≤ kChunk.
struct Chunk {
  int64_t b, i0, rows;
  int halves;                   // 32-row halves that hold a query
  int64_t extent[kChunk / 32];  // keys seen by the last query of each half
  bool diagonal;
};

// Q̂ and dÔ rows of the chunk (zero rows past its queries) and their panels.
void pack_queries(const SdpaBackwardProblem& bp, const Chunk& ch, const Scratch& w) {
  const SdpaProblem& p = bp.forward;
  const int64_t rp = ch.halves * kBlock;
  for (int64_t r = 0; r < rp; ++r) {
    if (r < ch.rows) {
      row_as_bf16(p.q, p.dtype, ch.b, ch.i0 + r, p.E, w.ep, w.q + r * w.ep);
      row_as_bf16(bp.grad_output, p.dtype, ch.b, ch.i0 + r, p.Ev, w.evp, w.go + r * w.evp);
    } else {
      std::fill_n(w.q + r * w.ep, w.ep, uint16_t{0});
      std::fill_n(w.go + r * w.evp, w.evp, uint16_t{0});
    }
  }
  // Panels with kChunk/2 steps whatever the chunk's rows: the dK/dV products
  // read a half's 16 steps at a fixed place.
  for (int64_t r2 = 0; r2 < rp / 2; ++r2) {
    const uint16_t* qe = w.q + 2 * r2 * w.ep;
    for (int64_t e = 0; e < w.ep; e += 16)
      _mm512_storeu_si512(w.q_pairs + ((e / kBlock) * (kChunk / 2) + r2) * kBlock + e % kBlock,
                          pair_rows(qe + e, qe + w.ep + e));
    const uint16_t* ge = w.go + 2 * r2 * w.evp;
    for (int64_t e = 0; e < w.evp; e += 16)
      _mm512_storeu_si512(w.go_pairs + ((e / kBlock) * (kChunk / 2) + r2) * kBlock + e % kBlock,
                          pair_rows(ge + e, ge + w.evp + e));
  }
}

// S and dP of the chunk, scaled S; then P = exp(S − lse) and
// dS = P ∘ (dP − D) (∘ the soft-cap slope) in place, zero past each row's
// visible keys (up to kp) and in the padding rows.
void probabilities(const SdpaBackwardProblem& bp, const Chunk& ch, int64_t j0, int64_t cols,
                   const double* row_dot, const Scratch& w) {
  const SdpaProblem& p = bp.forward;
  const int64_t ld = w.kp;
  for (int h = 0; h < ch.halves; ++h) {
    const char* qa = reinterpret_cast<const char*>(w.q + h * kBlock * w.ep);
    const char* ga = reinterpret_cast<const char*>(w.go + h * kBlock * w.evp);
    for (int64_t c0 = 0; c0 < ch.extent[h]; c0 += kBlock) {
      float* s = w.scores + h * kBlock * ld + c0;
      float* dp = w.dprob + h * kBlock * ld + c0;
      amx::multiply_block<false, true>(qa, w.ep * 2,
                                       reinterpret_cast<const char*>(w.k_t + c0 * w.ep / 2),
                                       w.ep / kBlock, s, ld * 4);
      amx::multiply_block<false, true>(ga, w.evp * 2,
                                       reinterpret_cast<const char*>(w.v_t + c0 * w.evp / 2),
                                       w.evp / kBlock, dp, ld * 4);
    }
  }
  const float scale = static_cast<float>(p.scale);
  const V vscale = _mm512_set1_ps(scale);
  const bool adjust =
      p.softcap > 0.0 || p.alibi_slopes != nullptr || p.mask.base != nullptr || ch.diagonal;
  auto seen_by = [&](int64_t r) {
    return ch.diagonal ? simd::keys_seen_by(p, ch.i0 + r, j0, cols) : cols;
  };
  if (adjust) {
    // The adjustments see scaled scores (as flash_backward_bf16.h's).
    for (int64_t r = 0; r < ch.rows; ++r) {
      float* s = w.scores + r * ld;
      const int64_t seen = seen_by(r);
      for (int64_t c = 0; c < seen; c += 16) {
        const __mmask16 m = first_lanes(seen - c);
        _mm512_mask_storeu_ps(s + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), vscale));
      }
    }
    simd::adjust_scores(p, ch.b, ch.i0, ch.rows, j0, cols, w.scores, ld, 1, w.cap_slope);
  }
  const V zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < ch.halves * kBlock; ++r) {
    float* s = w.scores + r * ld;
    float* dp = w.dprob + r * ld;
    const double lse = r < ch.rows ? p.lse[ch.b * p.L + ch.i0 + r] : 0.0;
    const int64_t seen =
        r < ch.rows && lse != -std::numeric_limits<double>::infinity() ? seen_by(r) : 0;
    const V shift = _mm512_set1_ps(static_cast<float>(lse));
    const V d =
        _mm512_set1_ps(r < ch.rows ? static_cast<float>(row_dot[ch.b * p.L + ch.i0 + r]) : 0.0f);
    int64_t c = 0;
    for (; c < seen; c += 16) {
      const __mmask16 m = first_lanes(seen - c);
      V x = _mm512_maskz_loadu_ps(m, s + c);
      if (!adjust) x = _mm512_mul_ps(x, vscale);
      const V prob = _mm512_maskz_mov_ps(m, simd::exp<Avx512Bf16>(_mm512_sub_ps(x, shift)));
      V ds = _mm512_mul_ps(prob, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + c), d));
      if (p.softcap > 0.0)
        ds = _mm512_mul_ps(ds, _mm512_maskz_loadu_ps(m, w.cap_slope + r * ld + c));
      _mm512_storeu_ps(s + c, prob);
      _mm512_storeu_ps(dp + c, ds);
    }
    for (; c < ld; c += 16) {
      _mm512_storeu_ps(s + c, zero);
      _mm512_storeu_ps(dp + c, zero);
    }
  }
}

// P̂ᵀ and dŜᵀ (pairs along queries) and the dŜ rows of keys [0, keys)
// (a multiple of 32), from the chunk's float P and dS.
void pack_probabilities(const Chunk& ch, int64_t keys, const Scratch& w) {
  const int64_t ld = w.kp;
  __m512i pr[16], dr[16];
  for (int h = 0; h < ch.halves; ++h)
    for (int64_t c0 = 0; c0 < keys; c0 += 16) {
      for (int i = 0; i < 16; ++i) {
        const int64_t r = h * kBlock + 2 * i;
        const float* s = w.scores + r * ld + c0;
        const float* dp = w.dprob + r * ld + c0;
        pr[i] = _mm512_castps_si512(
            Avx512Bf16::bf16_pairs(_mm512_loadu_ps(s), _mm512_loadu_ps(s + ld)));
        // vcvtne2ps2bf16: row r in words 0-15, row r + 1 in 16-31.
        const __m512i both =
            (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(dp + ld), _mm512_loadu_ps(dp));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.ds + r * ld + c0),
                            _mm512_castsi512_si256(both));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.ds + (r + 1) * ld + c0),
                            _mm512_extracti64x4_epi64(both, 1));
        dr[i] = Avx512Bf16::interleave_words(both);
      }
      transpose_16x16_words(pr);
      transpose_16x16_words(dr);
      for (int i = 0; i < 16; ++i) {
        _mm512_storeu_si512(w.p_t + (c0 + i) * (kChunk / 2) + h * 16, pr[i]);
        _mm512_storeu_si512(w.ds_t + (c0 + i) * (kChunk / 2) + h * 16, dr[i]);
      }
    }
}

// dV += P̂ᵀ dÔ and dK += dŜᵀ Q̂ for the chunk: per block of 32 keys, from
// the first half whose queries see one of them.
void add_key_gradients(const Chunk& ch, int64_t keys, const Scratch& w) {
  const int64_t a_stride = kChunk * 2;  // bytes per row of P̂ᵀ, dŜᵀ
  const int64_t steps = kChunk / 2;     // steps of the query-pair panels
  for (int64_t c0 = 0; c0 < keys; c0 += kBlock) {
    int h0 = 0;
    while (h0 < ch.halves && ch.extent[h0] <= c0) ++h0;
    if (h0 == ch.halves) continue;
    const int64_t blocks = ch.halves - h0;
    const char* pa = reinterpret_cast<const char*>(w.p_t + c0 * steps + h0 * 16);
    const char* da = reinterpret_cast<const char*>(w.ds_t + c0 * steps + h0 * 16);
    for (int64_t e0 = 0; e0 < w.evp; e0 += kBlock)
      add_product_block(pa, a_stride,
                        reinterpret_cast<const char*>(w.go_pairs + (e0 * steps + h0 * 16 * kBlock)),
                        blocks, w.grad_v + c0 * w.evp + e0, w.evp * 4);
    for (int64_t e0 = 0; e0 < w.ep; e0 += kBlock)
      add_product_block(da, a_stride,
                        reinterpret_cast<const char*>(w.q_pairs + (e0 * steps + h0 * 16 * kBlock)),
                        blocks, w.grad_k + c0 * w.ep + e0, w.ep * 4);
  }
}

// dQ rows of the chunk += scale · dŜ K̂.
void add_query_gradients(const SdpaBackwardProblem& bp, const Chunk& ch, float* grad_q_base,
                         const Scratch& w) {
  const SdpaProblem& p = bp.forward;
  float* grad_q = grad_q_base + bp.grad_q.offsets[ch.b];
  const int64_t ldgq = bp.grad_q.row_stride;
  const V vscale = _mm512_set1_ps(static_cast<float>(p.scale));
  alignas(64) float c[kBlock * kBlock];
  for (int h = 0; h < ch.halves; ++h) {
    const int64_t blocks = round_up(ch.extent[h], kBlock) / kBlock;
    if (blocks == 0) continue;
    const int64_t rows = std::min<int64_t>(kBlock, ch.rows - h * kBlock);
    const char* a = reinterpret_cast<const char*>(w.ds + h * kBlock * w.kp);
    for (int64_t e0 = 0; e0 < w.ep; e0 += kBlock) {
      const char* panel = reinterpret_cast<const char*>(w.k_pairs + e0 * (w.kp / 2));
      if (rows > 16) {
        amx::multiply_block<false, true>(a, w.kp * 2, panel, blocks, c);
      } else {
        amx::multiply_block<false, false>(a, w.kp * 2, panel, blocks, c);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* out = grad_q + (ch.i0 + h * kBlock + r) * ldgq + e0;
        for (int64_t e = 0; e < kBlock && e0 + e < p.E; e += 16) {
          const __mmask16 m = first_lanes(p.E - e0 - e);
          _mm512_mask_storeu_ps(out + e, m,
                                _mm512_fmadd_ps(_mm512_load_ps(c + r * kBlock + e), vscale,
                                                _mm512_maskz_loadu_ps(m, out + e)));
        }
      }
    }
  }
}

}  // namespace

int64_t amx_backward_bf16_key_block(const SdpaProblem& p) {
  // 256 keys pack each query a third as often as 96 (B8 H8 L512 E64, one
  // thread: 42.5 -> 38.7 ms), unless that leaves fewer key tiles than two
  // per thread to share out.
  constexpr int64_t kKeys = 256, kDefault = 96;
  const int64_t tiles = p.problems * ((p.S + kKeys - 1) / kKeys);
  return tiles >= 2 * omp_get_max_threads() ? kKeys : kDefault;
}

int64_t amx_backward_bf16_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling) {
  return std::max(avx512_bf16_backward_scratch_floats(problem, tiling),
                  Scratch(problem, tiling, nullptr).floats);
}

void amx_backward_bf16_tile(const SdpaBackwardProblem& bp, const FlashTiling& t,
                            const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                            const double* row_dot, float* grad_q_base, float* scratch) {
  const SdpaProblem& p = bp.forward;
  if (!runs_on_tiles(p))
    return avx512_bf16_backward_tile(bp, t, problems, count, j0, cols, row_dot, grad_q_base,
                                     scratch);
  const Scratch w(p, t, scratch);
  const int64_t b0 = problems[0];
  pack_keys_values(p, b0, j0, cols, w);
  std::fill_n(w.grad_k, w.kp * w.ep, 0.0f);
  std::fill_n(w.grad_v, w.kp * w.evp, 0.0f);
  amx::configure_tiles();
  int64_t q_first, q_last;
  simd::queries_seeing(p, j0, cols, &q_first, &q_last);
  for (int64_t n = 0; n < count; ++n) {
    const int64_t b = problems[n];
    int64_t kept_begin = 0, kept_end = p.S;
    simd::trim_to_kept_keys(p, b, &kept_begin, &kept_end);
    if (kept_end <= j0 || kept_begin >= j0 + cols) continue;  // all padding for problem b
    for (int64_t i0 = q_first; i0 < q_last; i0 += kChunk) {
      Chunk ch;
      ch.b = b;
      ch.i0 = i0;
      ch.rows = std::min<int64_t>(kChunk, q_last - i0);
      ch.halves = static_cast<int>((ch.rows + kBlock - 1) / kBlock);
      ch.diagonal = !simd::tile_fully_visible(p, i0, ch.rows, j0, cols);
      for (int h = 0; h < ch.halves; ++h) {
        const int64_t last = std::min<int64_t>(ch.rows, (h + 1) * kBlock) - 1;
        ch.extent[h] = ch.diagonal ? simd::keys_seen_by(p, i0 + last, j0, cols) : cols;
      }
      const int64_t keys = round_up(ch.extent[ch.halves - 1], kBlock);
      if (keys == 0) continue;
      pack_queries(bp, ch, w);
      probabilities(bp, ch, j0, cols, row_dot, w);
      pack_probabilities(ch, keys, w);
      add_key_gradients(ch, keys, w);
      add_query_gradients(bp, ch, grad_q_base, w);
    }
  }
  _tile_release();
  float* grad_k =
      static_cast<float*>(bp.grad_k.base) + bp.grad_k.offsets[b0] + j0 * bp.grad_k.row_stride;
  float* grad_v =
      static_cast<float*>(bp.grad_v.base) + bp.grad_v.offsets[b0] + j0 * bp.grad_v.row_stride;
  const V vscale = _mm512_set1_ps(static_cast<float>(p.scale));
  for (int64_t c = 0; c < cols; ++c) {
    float* dk = grad_k + c * bp.grad_k.row_stride;
    float* dv = grad_v + c * bp.grad_v.row_stride;
    for (int64_t e = 0; e < p.E; e += 16) {
      const __mmask16 m = first_lanes(p.E - e);
      _mm512_mask_storeu_ps(dk + e, m,
                            _mm512_fmadd_ps(_mm512_loadu_ps(w.grad_k + c * w.ep + e), vscale,
                                            _mm512_maskz_loadu_ps(m, dk + e)));
    }
    for (int64_t e = 0; e < p.Ev; e += 16) {
      const __mmask16 m = first_lanes(p.Ev - e);
      _mm512_mask_storeu_ps(dv + e, m,
                            _mm512_add_ps(_mm512_loadu_ps(w.grad_v + c * w.evp + e),
                                          _mm512_maskz_loadu_ps(m, dv + e)));
    }
  }
}

}  // namespace qkv::kernels
