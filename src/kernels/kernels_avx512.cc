// The fused kernels compiled for AVX-512 (F, BW, VL, DQ) with FMA.
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/fma_peak.h"
#include "kernels/simd/gemv_rows.h"

namespace qkv::kernels {

extern const RowKernels kAvx512Rows;

extern const KernelTable kAvx512Kernels = {
    "avx512",
    &simd::fma_peak_gflops<simd::Avx512>,
    &simd::map_into<simd::Avx512, simd::exp<simd::Avx512>>,
    &simd::map_into<simd::Avx512, simd::log<simd::Avx512>>,
    simd::TileShape<simd::Avx512>::kMr,
    simd::TileShape<simd::Avx512>::kNr,
    simd::ForwardShape<simd::Avx512>::kQueryPanel,
    &simd::forward_scratch_floats<simd::Avx512>,
    &simd::forward_tile<simd::Avx512>,
    &simd::weights_tile<simd::Avx512>,
    &simd::gemv_rows<simd::Avx512>,
    simd::kGemvMaxRows<simd::Avx512>,
    &simd::backward_scratch_floats<simd::Avx512>,
    &simd::flash_backward_tile<simd::Avx512>,
    &kAvx512Rows,
};

}  // namespace qkv::kernels
