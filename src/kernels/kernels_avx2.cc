// The fused kernels compiled for AVX2 with FMA.
#include "kernels/simd/kernel_table.h"

namespace qkv::kernels {

extern const RowKernels kAvx2Rows;

extern const KernelTable kAvx2Kernels = simd::kernel_table<simd::Avx2>(&kAvx2Rows);

}  // namespace qkv::kernels
