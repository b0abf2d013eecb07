// The fused kernels compiled for AVX-512 (F, BW, VL, DQ) with FMA, the
// avx512_bf16 table that adds the AVX512_BF16 forward to them, and the amx
// table that runs the bfloat16 products of that forward on AMX tiles.
#include "kernels/simd/kernel_table.h"

namespace qkv::kernels {

extern const RowKernels kAvx512Rows;

extern const KernelTable kAvx512Kernels = simd::kernel_table<simd::Avx512>(&kAvx512Rows);

// The forward entries compiled with AVX512_BF16 (kernels_avx512_bf16.cc).
int64_t avx512_bf16_forward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void avx512_bf16_forward_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                              int64_t q_begin, int64_t rows, float* scratch);
void avx512_bf16_weights_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                              int64_t q_begin, int64_t rows, float* scratch);

int64_t avx512_bf16_backward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void avx512_bf16_backward_tile(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                               const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                               const double* row_dot, float* grad_q_base, float* scratch);

// This table's entries with a forward and a bfloat16-product backward whose
// products use vdpbf16ps (float32 problems run the same code as here).
constexpr KernelTable avx512_bf16_table() {
  return simd::with_bf16_backward_entries(
      simd::with_forward_entries(simd::kernel_table<simd::Avx512>(&kAvx512Rows), "avx512_bf16",
                                 &avx512_bf16_forward_scratch_floats, &avx512_bf16_forward_tile,
                                 &avx512_bf16_weights_tile),
      &avx512_bf16_backward_scratch_floats, &avx512_bf16_backward_tile);
}
extern const KernelTable kAvx512Bf16Kernels = avx512_bf16_table();

// The amx table: avx512_bf16 with a forward (attention_amx.cc) and a
// bfloat16-product backward (attention_amx_backward.cc) whose products run
// on AMX tiles, listed only where kernels/cpu_features.h says so.
int64_t amx_forward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void amx_forward_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                      int64_t q_begin, int64_t rows, float* scratch);

int64_t amx_forward_query_block(const SdpaProblem& problem);

int64_t amx_backward_bf16_key_block(const SdpaProblem& problem);
int64_t amx_backward_bf16_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void amx_backward_bf16_tile(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                            const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                            const double* row_dot, float* grad_q_base, float* scratch);

constexpr KernelTable amx_table() {
  KernelTable table = simd::with_bf16_backward_entries(
      simd::with_forward_entries(avx512_bf16_table(), "amx", &amx_forward_scratch_floats,
                                 &amx_forward_tile, &avx512_bf16_weights_tile),
      &amx_backward_bf16_scratch_floats, &amx_backward_bf16_tile);
  table.forward_query_block = &amx_forward_query_block;
  table.bf16_backward_key_block = &amx_backward_bf16_key_block;
  table.bf16_backward_reads_bfloat16 = true;
  return table;
}
extern const KernelTable kAmxKernels = amx_table();

}  // namespace qkv::kernels
