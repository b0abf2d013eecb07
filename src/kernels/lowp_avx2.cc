// The low-precision linear kernels compiled for AVX2 with FMA: bfloat16
// widened to float32, int8 widened to int16 (kernels/simd/low_precision_tiles.h).
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpBf16Avx2 = {"avx2", Precision::kBFloat16,
                                                  &lowp::gemm_block<lowp::Bf16Widen256>};
extern const LowPrecisionKernels kLowpInt8Avx2 = {"avx2", Precision::kInt8,
                                                  &lowp::gemm_block<lowp::Int8Avx2>};

}  // namespace qkv::kernels
