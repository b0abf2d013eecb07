// The GGUF block-quantised linear kernels (kernels/simd/quant_rows.h) on simd::Avx512.
// F16C for the blocks' fp16 scales (Bytes::half): CMakeLists.txt gives -mf16c.
#include "kernels/simd/quant_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx512 = {"avx512", &quant::gemv_block<simd::Avx512>,
                                          &quant::dequantize_rows<simd::Avx512>};

}  // namespace qkv::kernels
