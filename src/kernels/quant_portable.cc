// The GGUF block-quantised linear kernels (kernels/simd/quant_rows.h) on simd::Portable.
#include "kernels/simd/quant_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantPortable = {"portable", &quant::gemv_block<simd::Portable>,
                                            &quant::dequantize_rows<simd::Portable>};

}  // namespace qkv::kernels
