// The fused kernels compiled for AVX2 with FMA.
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/fma_peak.h"
#include "kernels/simd/gemv_rows.h"

namespace qkv::kernels {

extern const RowKernels kAvx2Rows;

extern const KernelTable kAvx2Kernels = {
    "avx2",
    &simd::fma_peak_gflops<simd::Avx2>,
    &simd::map_into<simd::Avx2, simd::exp<simd::Avx2>>,
    &simd::map_into<simd::Avx2, simd::log<simd::Avx2>>,
    simd::TileShape<simd::Avx2>::kMr,
    simd::TileShape<simd::Avx2>::kNr,
    simd::ForwardShape<simd::Avx2>::kQueryPanel,
    &simd::forward_scratch_floats<simd::Avx2>,
    &simd::forward_tile<simd::Avx2>,
    &simd::weights_tile<simd::Avx2>,
    &simd::gemv_rows<simd::Avx2>,
    simd::kGemvMaxRows<simd::Avx2>,
    &simd::backward_scratch_floats<simd::Avx2>,
    &simd::flash_backward_tile<simd::Avx2>,
    &kAvx2Rows,
};

}  // namespace qkv::kernels
