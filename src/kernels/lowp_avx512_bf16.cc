// The bfloat16 linear kernel on vdpbf16ps (AVX512_BF16,
// kernels/simd/low_precision_tiles.h).
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpBf16Avx512Bf16 = {"avx512_bf16", Precision::kBFloat16,
                                                        &lowp::gemm_block<lowp::Bf16Dot512>};

}  // namespace qkv::kernels
