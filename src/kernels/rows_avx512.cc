// The float32 row loops of the ops compiled for avx512 (kernels/row_kernels.h).
#include "kernels/simd/row_table.h"

namespace qkv::kernels {

extern const RowKernels kAvx512Rows = simd::row_kernels<simd::Avx512>();

}  // namespace qkv::kernels
