// The fused kernels for any CPU (4-lane GCC vector extensions).
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/fma_peak.h"
#include "kernels/simd/gemv_rows.h"

namespace qkv::kernels {

extern const RowKernels kPortableRows;

extern const KernelTable kPortableKernels = {
    "portable",
    &simd::fma_peak_gflops<simd::Portable>,
    &simd::map_into<simd::Portable, simd::exp<simd::Portable>>,
    &simd::map_into<simd::Portable, simd::log<simd::Portable>>,
    simd::TileShape<simd::Portable>::kMr,
    simd::TileShape<simd::Portable>::kNr,
    simd::ForwardShape<simd::Portable>::kQueryPanel,
    &simd::forward_scratch_floats<simd::Portable>,
    &simd::forward_tile<simd::Portable>,
    &simd::weights_tile<simd::Portable>,
    &simd::gemv_rows<simd::Portable>,
    simd::kGemvMaxRows<simd::Portable>,
    &simd::backward_scratch_floats<simd::Portable>,
    &simd::flash_backward_tile<simd::Portable>,
    &kPortableRows,
};

}  // namespace qkv::kernels
