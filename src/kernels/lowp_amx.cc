// The bfloat16 and int8 linear kernels on AMX tiles (kernels/cpu_features.h), for
// low_precision_gemm.h's y = x · Wᵀ + bias.
//
// A block of 32 rows × one 32-column panel of y is four 16 × 16 tiles of
// float32 (bf16) or int32 (int8) sums, summed over k 16 steps (32 bfloat16
// or 64 int8 of k) at a time by TDPBF16PS or TDPBUSD (u8 x × s8 W):
// kernels/simd/amx_tiles.h.
//
// W's packed panels are already what a B tile reads: step s of column c at
// word s · 32 + c, so 16 columns × 16 steps are 16 rows of 64 bytes at a
// stride of 128, and the panels hold their steps padded to 16 with zeros.
// x is converted once per block into 32 row-major rows of panel_steps words
// (bf16 pairs or u8 quads, zeros past k and in rows past the block's end):
// an A tile is 16 of them. The epilogue is the other tables' (store_bf16_tile,
// int8_output): the int8 results are the same bits on every table.
#include "kernels/simd/amx_tiles.h"
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {
namespace {

using lowp::RowQuant;

using amx::kPanelRowBytes;
constexpr int kPanel = static_cast<int>(kLowpPanel);
constexpr int kBlockRows = amx::kBlock;
static_assert(kPanel == amx::kBlock);

// y[r, lo:hi] of `rows` rows from the sums c[32][32] (lowp::int8_output and
// store_bf16_tile, in vectors: the same operations in the same order).
template <bool kInt8>
void store_block(const void* c, int rows, const RowQuant* row_quant, const float* col_scale,
                 const int32_t* col_sum, const float* bias, float* y, int64_t ldy, int lo, int hi) {
  const __mmask16 masks[2] = {lowp::lane_mask(lo, hi), lowp::lane_mask(lo - 16, hi - 16)};
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < 2; ++h) {
      if (masks[h] == 0) continue;
      __m512 out;
      if constexpr (kInt8) {
        const __m512i acc =
            _mm512_loadu_si512(static_cast<const int32_t*>(c) + r * kPanel + 16 * h);
        const __m512i zero_sums = _mm512_mullo_epi32(_mm512_loadu_si512(col_sum + 16 * h),
                                                     _mm512_set1_epi32(row_quant[r].zero));
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, zero_sums));
        const __m512 scale =
            _mm512_mul_ps(_mm512_set1_ps(row_quant[r].scale), _mm512_loadu_ps(col_scale + 16 * h));
        out = _mm512_add_ps(_mm512_mul_ps(sum, scale), _mm512_loadu_ps(bias + 16 * h));
      } else {
        out = _mm512_add_ps(_mm512_loadu_ps(static_cast<const float*>(c) + r * kPanel + 16 * h),
                            _mm512_loadu_ps(bias + 16 * h));
      }
      _mm512_mask_storeu_ps(y + r * ldy + 16 * h, masks[h], out);
    }
}

// LowPrecisionKernels::gemm_block: y[r0:r1, c0:c1] = x[r0:r1] · Wᵀ + bias.
template <bool kInt8>
void amx_gemm_block(const float* x, int64_t ldx, const PackedWeights& packed, const float* bias,
                    float* y, int64_t ldy, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (r0 >= r1 || c0 >= c1) return;
  const PackedWeights::View w = packed.view();
  const int64_t steps = w.steps, panel_steps = w.panel_steps;
  const int64_t row_bytes = std::max<int64_t>(panel_steps, 1) * 4;
  const int64_t smooth_bytes = w.input_scale ? (w.k * 4 + 63) / 64 * 64 : 0;
  char* scratch =
      static_cast<char*>(thread_scratch_bytes(kBlockRows * row_bytes + kBlockRows * kPanel * 4 +
                                              smooth_bytes + kBlockRows * sizeof(RowQuant)));
  char* a = scratch;
  void* c = scratch + kBlockRows * row_bytes;
  float* smoothed =
      reinterpret_cast<float*>(scratch + kBlockRows * row_bytes + kBlockRows * kPanel * 4);
  RowQuant* row_quant =
      reinterpret_cast<RowQuant*>(reinterpret_cast<char*>(smoothed) + smooth_bytes);
  alignas(64) float bias_pad[kPanel];
  const char* panels =
      kInt8 ? reinterpret_cast<const char*>(w.int8) : reinterpret_cast<const char*>(w.bf16);
  const int64_t panel_bytes = panel_steps * kPanelRowBytes;
  amx::configure_tiles();

  for (int64_t i0 = r0; i0 < r1; i0 += kBlockRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kBlockRows, r1 - i0));
    const int tile_rows = rows > 16 ? 32 : 16;
    for (int r = 0; r < tile_rows; ++r) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(a + r * row_bytes);
      int64_t done = 0;
      if (r < rows) {
        const float* src = x + (i0 + r) * ldx;
        if (w.input_scale) {
          for (int64_t p = 0; p < w.k; ++p) smoothed[p] = src[p] * w.input_scale[p];
          src = smoothed;
        }
        if constexpr (kInt8) {
          row_quant[r] = lowp::quantize_row_u8_512(src, w.k, steps, dst);
        } else {
          lowp::bf16_row_pairs(src, w.k, steps, dst);
        }
        done = steps;
      }
      std::fill(dst + done, dst + panel_steps, 0u);
    }
    for (int64_t panel = c0 / kPanel; panel * kPanel < c1; ++panel) {
      const int64_t j0 = panel * kPanel;
      const float* bias_panel = lowp::panel_bias(bias, w.n, j0, bias_pad);
      if (panel_steps == 0) {
        std::fill(static_cast<char*>(c), static_cast<char*>(c) + kBlockRows * kPanel * 4, 0);
      } else if (tile_rows == 32) {
        amx::multiply_block<kInt8, true>(a, row_bytes, panels + panel * panel_bytes,
                                         panel_steps / 16, c);
      } else {
        amx::multiply_block<kInt8, false>(a, row_bytes, panels + panel * panel_bytes,
                                          panel_steps / 16, c);
      }
      store_block<kInt8>(c, rows, row_quant, kInt8 ? w.scales + j0 : nullptr,
                         kInt8 ? w.col_sums + j0 : nullptr, bias_panel, y + i0 * ldy + j0, ldy,
                         static_cast<int>(std::max<int64_t>(c0 - j0, 0)),
                         static_cast<int>(std::min<int64_t>(c1 - j0, kPanel)));
    }
  }
  _tile_release();
}

}  // namespace

extern const LowPrecisionKernels kLowpBf16Amx = {"amx_bf16", Precision::kBFloat16,
                                                 &amx_gemm_block<false>};
extern const LowPrecisionKernels kLowpInt8Amx = {"amx_int8", Precision::kInt8,
                                                 &amx_gemm_block<true>};

}  // namespace qkv::kernels
