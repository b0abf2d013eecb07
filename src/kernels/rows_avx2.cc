// The float32 row loops of the ops compiled for avx2 (kernels/row_kernels.h).
#include "kernels/simd/row_table.h"

namespace qkv::kernels {

extern const RowKernels kAvx2Rows = simd::row_kernels<simd::Avx2>();

}  // namespace qkv::kernels
