// The GGUF block-quantised linear kernels (kernels/simd/quant_rows.h) on simd::Avx2.
// F16C for the blocks' fp16 scales (Bytes::half): CMakeLists.txt gives -mf16c.
#include "kernels/simd/quant_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx2 = {"avx2", &quant::gemv_block<simd::Avx2>,
                                        &quant::dequantize_rows<simd::Avx2>};

}  // namespace qkv::kernels
