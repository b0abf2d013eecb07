// The fused kernels compiled for any CPU (4-lane GCC vector extensions).
#include "kernels/simd/kernel_table.h"

namespace qkv::kernels {

extern const RowKernels kPortableRows;

extern const KernelTable kPortableKernels = simd::kernel_table<simd::Portable>(&kPortableRows);

}  // namespace qkv::kernels
