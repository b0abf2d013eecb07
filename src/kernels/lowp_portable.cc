// The low-precision linear kernels in plain C++ (kernels/simd/low_precision_tiles.h).
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpBf16Portable = {"portable", Precision::kBFloat16,
                                                      &lowp::gemm_block<lowp::Bf16Portable>};
extern const LowPrecisionKernels kLowpInt8Portable = {"portable", Precision::kInt8,
                                                      &lowp::gemm_block<lowp::Int8Portable>};

}  // namespace qkv::kernels
