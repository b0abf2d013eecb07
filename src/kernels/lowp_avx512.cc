// The bfloat16 linear kernel for AVX-512 CPUs without AVX512_BF16: bfloat16
// widened to float32 and FMA (kernels/simd/low_precision_tiles.h).
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpBf16Avx512 = {"avx512", Precision::kBFloat16,
                                                    &lowp::gemm_block<lowp::Bf16Widen512>};

}  // namespace qkv::kernels
