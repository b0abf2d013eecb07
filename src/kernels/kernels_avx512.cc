// The fused kernels compiled for AVX-512 (F, BW, VL, DQ) with FMA.
#include "kernels/simd/kernel_table.h"

namespace qkv::kernels {

extern const RowKernels kAvx512Rows;

extern const KernelTable kAvx512Kernels = simd::kernel_table<simd::Avx512>(&kAvx512Rows);

}  // namespace qkv::kernels
