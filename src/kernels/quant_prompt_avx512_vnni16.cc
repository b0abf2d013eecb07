// The prompt route of the avx512_vnni16 table (quant_gemm.h): y = x · Wᵀ +
// bias for more rows than the few-rows route takes, on 16-bit integer dot
// products (vpdpwssd), where the other tables dequantise W for sgemm.
//
// x is rounded as the few-rows route rounds it (quantize_x_q16_reference:
// per block of 32, dx = max|x| / 32767, q = round(x / dx)), once per call,
// the rows split among the threads. W goes in panels of 32 channels, each
// packed once by the thread that takes it so that a register holds one int32
// lane per channel: per 32-weight (sub-)block u and pair p, two zmm whose
// lane c is the word pair (weights 2p, 2p + 1) of channel c (and 16 + c),
// then the block's d and m of the 32 channels (int16_blocks' decoders: w =
// d·q_w + m). A tile of kRows rows of x meets the panel block by block: 16
// vpdpwssd per row and zmm sum the block's Σ q_w·q_x exactly in int32, then
//   Σ w·x̂ = (d·dx)·Σ q_w·q_x (+ m·(dx·Σ q_x) for the formats with a min)
// is added in float32, block after block: the float32 product with x̂, as the
// few-rows route computes it, summed in another order. Each int32 lane holds
// 32 products; below 2^24 (exact in float32) where |q_w| ≤ 15 (Q4_0, Q4_1,
// Q4_K), else rounded once when converted (Q5_*, Q8_0, IQ4_NL). Q6_K's words
// (sc·(q − 32), up to 4096) would overflow 32 of them: its lanes hold 16
// (below 2^31), scaled and added twice per block.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/simd/quant_int16_blocks.h"
#include "kernels/simd/quant_int_rows.h"
#include "kernels/simd/transpose_16x16.h"
#include "kernels/thread_scratch.h"

namespace qkv::kernels {
namespace {

using namespace int16_blocks;

constexpr float kTiny = 0x1p-100f;  // see quantize_x_q16_reference
constexpr int kPanel = 32;          // channels per panel: two zmm of int32 lanes
// Rows of x per tile: 12 int32 and 12 float32 accumulators, 2 zmm of W and 4
// of scales fill the 32 registers.
constexpr int kRows = 6;
// Blocks of k per pass of the row tiles over a panel: their 16 KiB of words
// stay in L1 while every tile of rows meets them.
constexpr int64_t kChunkUnits = 8;

// x rounded for the whole call (buffers of the calling thread): row r's q
// (x's own order) at q + r·k, its blocks' dx and sx = dx·Σ q at dx / sx + r·units.
struct PromptX {
  int16_t* q;
  float* dx;
  float* sx;
  int64_t k, units;
};

// Rounds rows [r0, r1) of x into the buffers of `out` (sx kept for every
// format: one rounding serves products of any formats).
void round_rows(const float* x, int64_t ldx, int64_t r0, int64_t r1, const PromptX& out) {
  for (int64_t r = r0; r < r1; ++r) {
    int16_t* q = out.q + r * out.k;
    for (int64_t b = 0; b < out.units; ++b) {
      __m512i qa, qb;
      float dx;
      int32_t sum;
      quant::round_block<int16_t>(x + r * ldx + 32 * b, kTiny, &qa, &qb, &dx, &sum);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm512_cvtsepi32_epi16(qa));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b + 16), _mm512_cvtsepi32_epi16(qb));
      out.dx[r * out.units + b] = dx;
      out.sx[r * out.units + b] = dx * static_cast<float>(sum);
    }
  }
}

// Channels [j0, j0 + 32) of W packed as the top of the file says (channels
// past n: zero words and scales).
struct Panel {
  const __m512i* words;  // [units][16 pairs][2 halves]
  const float* d;        // [units][32]
  const float* m;        // [units][32]
};

inline int64_t panel_bytes(int64_t units) { return units * (16 * 2 * 64 + 2 * kPanel * 4); }

// Each block of 16 channels decoded to a zmm of 16 word pairs per channel,
// then transposed so that lanes are channels.
template <class F>
Panel pack_panel(const QuantMatrix& w, int64_t j0, int64_t units, void* memory) {
  auto* words = static_cast<__m512i*>(memory);
  float* d = reinterpret_cast<float*>(words + units * 32);
  float* m = d + units * kPanel;
  const int64_t channels = std::min<int64_t>(kPanel, w.n - j0);
  for (int h = 0; h < 2; ++h)
    for (int64_t bi = 0; bi < units / F::kSubs; ++bi) {
      __m512i pairs[F::kSubs][16];  // [sub-block][channel]: its 16 word pairs
      for (int c = 0; c < 16; ++c) {
        const int64_t channel = 16 * h + c;
        float ds[F::kSubs] = {}, ms[F::kSubs] = {};
        if (channel < channels) {
          const uint8_t* b = w.data + (j0 + channel) * w.row_bytes + F::kBytes * bi;
          F::scales(b, ds, ms);
          for (int s = 0; s < F::kSubs; ++s) {
            __m256i wv[2];
            F::words(b, s, wv);
            pairs[s][c] = _mm512_inserti64x4(_mm512_castsi256_si512(wv[0]), wv[1], 1);
          }
        } else {
          for (int s = 0; s < F::kSubs; ++s) pairs[s][c] = _mm512_setzero_si512();
        }
        for (int s = 0; s < F::kSubs; ++s) {
          d[(bi * F::kSubs + s) * kPanel + channel] = ds[s];
          m[(bi * F::kSubs + s) * kPanel + channel] = F::kHasMin ? ms[s] : 0.0f;
        }
      }
      for (int s = 0; s < F::kSubs; ++s) {
        simd::transpose_16x16_words(pairs[s]);  // pairs[s][p]: pair p of each channel
        for (int p = 0; p < 16; ++p)
          _mm512_store_si512(words + ((bi * F::kSubs + s) * 16 + p) * 2 + h, pairs[s][p]);
      }
    }
  return {words, d, m};
}

// y[r0 + r, j0 + c] for R rows and the panel's first `channels` channels,
// over the blocks [u0, u1) of k: their terms added to what y holds (unless
// u0 = 0), and the bias after the last block.
template <int R, bool kMin, int kPairsPerSum>
void tile(const PromptX& xq, int64_t r0, const Panel& panel, int64_t u0, int64_t u1,
          const float* bias, float* y, int64_t ldy, int64_t j0, int64_t channels) {
  const __mmask16 lo = channels >= 16 ? 0xffff : static_cast<__mmask16>((1u << channels) - 1);
  const __mmask16 hi = channels <= 16 ? 0 : static_cast<__mmask16>((1u << (channels - 16)) - 1);
  __m512 out[R][2];
  for (int r = 0; r < R; ++r) {
    const float* yr = y + (r0 + r) * ldy + j0;
    out[r][0] = u0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lo, yr);
    out[r][1] = u0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(hi, yr + 16);
  }
  const int16_t* x0 = xq.q + r0 * xq.k;
  for (int64_t u = u0; u < u1; ++u) {
    const __m512i* wu = panel.words + 32 * u;
    const __m512 d0 = _mm512_load_ps(panel.d + kPanel * u),
                 d1 = _mm512_load_ps(panel.d + kPanel * u + 16);
    // the block's 16 pairs in int32 sums of kPairsPerSum pairs each
    for (int p0 = 0; p0 < 16; p0 += kPairsPerSum) {
      __m512i acc[R][2];
      for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int p = p0; p < p0 + kPairsPerSum; ++p) {
        const __m512i w0 = _mm512_load_si512(wu + 2 * p), w1 = _mm512_load_si512(wu + 2 * p + 1);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
          const __m512i xp = _mm512_set1_epi32(
              quant::load_u32(reinterpret_cast<const uint8_t*>(x0 + r * xq.k + 32 * u + 2 * p)));
          acc[r][0] = _mm512_dpwssd_epi32(acc[r][0], w0, xp);
          acc[r][1] = _mm512_dpwssd_epi32(acc[r][1], w1, xp);
        }
      }
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m512 dx = _mm512_set1_ps(xq.dx[(r0 + r) * xq.units + u]);
        out[r][0] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][0]), _mm512_mul_ps(d0, dx), out[r][0]);
        out[r][1] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][1]), _mm512_mul_ps(d1, dx), out[r][1]);
      }
    }
    if constexpr (kMin) {
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m512 sx = _mm512_set1_ps(xq.sx[(r0 + r) * xq.units + u]);
        out[r][0] = _mm512_fmadd_ps(_mm512_load_ps(panel.m + kPanel * u), sx, out[r][0]);
        out[r][1] = _mm512_fmadd_ps(_mm512_load_ps(panel.m + kPanel * u + 16), sx, out[r][1]);
      }
    }
  }
  const bool with_bias = bias != nullptr && u1 == xq.units;
  const __m512 b0 = with_bias ? _mm512_maskz_loadu_ps(lo, bias + j0) : _mm512_setzero_ps();
  const __m512 b1 = with_bias ? _mm512_maskz_loadu_ps(hi, bias + j0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    float* yr = y + (r0 + r) * ldy + j0;
    _mm512_mask_storeu_ps(yr, lo, _mm512_add_ps(out[r][0], b0));
    _mm512_mask_storeu_ps(yr + 16, hi, _mm512_add_ps(out[r][1], b1));
  }
}

// Below this many multiply-adds one thread does it all.
constexpr double kParallelMinMacs = 1 << 20;

// Pairs summed per int32 lane before it is scaled: 16 (32 products) but for
// Q6_K, whose words reach 4096: 8 (16 products, below 2^31).
template <class F>
constexpr int kPairsPerSum = F::kFormat == BlockFormat::kQ6_K ? 8 : 16;

// Every row tile of x meeting the panel of channels [j0, j0 + 32) of p.
template <class F>
void panel_product(const PromptX& xq, int64_t m, const QuantProduct& p, int64_t j0, void* memory) {
  const int64_t units = xq.units, channels = std::min<int64_t>(kPanel, p.w->n - j0);
  const Panel panel = pack_panel<F>(*p.w, j0, units, memory);
  for (int64_t u0 = 0; u0 < units; u0 += kChunkUnits)
    for (int64_t r0 = 0; r0 < m; r0 += kRows)
      quant::with_rows<kRows>(std::min<int64_t>(kRows, m - r0), [&]<int R>() {
        tile<R, F::kHasMin, kPairsPerSum<F>>(xq, r0, panel, u0, std::min(units, u0 + kChunkUnits),
                                             p.bias, p.y, p.ldy, j0, channels);
      });
}

using PromptFormats = Formats<Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K>;
static_assert(PromptFormats::kMask == kEveryFormat, "a block format without a prompt kernel");

// x rounded once for all the products (same k); the threads share the panels
// of all of them in one fork/join.
void prompt_gemm(const float* x, int64_t ldx, int64_t m, std::span<const QuantProduct> products) {
  const int64_t k = products[0].w->k, units = k / 32;
  std::vector<int64_t> first_panel;  // of each product in the concatenation, then the total
  double macs = 0;
  first_panel.push_back(0);
  for (const QuantProduct& p : products) {
    first_panel.push_back(first_panel.back() + (p.w->n + kPanel - 1) / kPanel);
    macs += static_cast<double>(m) * p.w->n * k;
  }
  // x's rounding, kept by the calling thread from call to call
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> scales;
  q.resize(static_cast<size_t>(m * k));
  scales.resize(static_cast<size_t>(2 * m * units));
  const PromptX xq = {q.data(), scales.data(), scales.data() + m * units, k, units};
  const bool parallel = !omp_in_parallel() && omp_get_max_threads() > 1 && macs >= kParallelMinMacs;
#pragma omp parallel if (parallel)
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    round_rows(x, ldx, m * t / threads, m * (t + 1) / threads, xq);
#pragma omp barrier
    void* memory = thread_scratch_bytes(panel_bytes(units));
    // Dynamic: a thread slowed by a neighbour on its core takes fewer panels.
#pragma omp for schedule(dynamic, 1)
    for (int64_t pi = 0; pi < first_panel.back(); ++pi) {
      const size_t i = static_cast<size_t>(
          std::upper_bound(first_panel.begin(), first_panel.end(), pi) - first_panel.begin() - 1);
      const QuantProduct& p = products[i];
      PromptFormats::dispatch(p.w->format, [&]<class F>() {
        panel_product<F>(xq, m, p, (pi - first_panel[i]) * kPanel, memory);
      });
    }
  }
}

}  // namespace

extern const QuantPromptKernel kQuantPromptAvx512Vnni16 = {&prompt_gemm, PromptFormats::kMask};

}  // namespace qkv::kernels
