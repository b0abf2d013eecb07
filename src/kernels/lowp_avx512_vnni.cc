// The int8 linear kernel on vpdpbusd (AVX512_VNNI,
// kernels/simd/low_precision_tiles.h).
#include "kernels/simd/low_precision_tiles.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpInt8Avx512Vnni = {"avx512_vnni", Precision::kInt8,
                                                        &lowp::gemm_block<lowp::Int8Vnni512>};

}  // namespace qkv::kernels
