// The forward and bfloat16-backward entries of the avx512_bf16 kernel table
// (kernels_avx512.cc):
// compiled for AVX-512 with AVX512_BF16, so that the bfloat16 products of
// flash_forward_bf16.h run on vdpbf16ps. Float32 problems run the same
// kernels as the avx512 table.
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward_bf16.h"

namespace qkv::kernels {

int64_t avx512_bf16_forward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling) {
  return simd::forward_scratch_floats<simd::Avx512Bf16>(problem, tiling);
}

void avx512_bf16_forward_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                              int64_t q_begin, int64_t rows, float* scratch) {
  simd::forward_tile<simd::Avx512Bf16>(problem, tiling, b, q_begin, rows, scratch);
}

void avx512_bf16_weights_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                              int64_t q_begin, int64_t rows, float* scratch) {
  simd::weights_tile<simd::Avx512Bf16>(problem, tiling, b, q_begin, rows, scratch);
}

int64_t avx512_bf16_backward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling) {
  return simd::backward_bf16_scratch_floats<simd::Avx512Bf16>(problem, tiling);
}

void avx512_bf16_backward_tile(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                               const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                               const double* row_dot, float* grad_q_base, float* scratch) {
  simd::flash_backward_bf16_tile<simd::Avx512Bf16>(problem, tiling, problems, count, j0, cols,
                                                   row_dot, grad_q_base, scratch);
}

}  // namespace qkv::kernels
