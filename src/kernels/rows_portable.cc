// The float32 row loops of the ops compiled for portable (kernels/row_kernels.h).
#include "kernels/simd/row_table.h"

namespace qkv::kernels {

extern const RowKernels kPortableRows = simd::row_kernels<simd::Portable>();

}  // namespace qkv::kernels
