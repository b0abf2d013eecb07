// The KernelTable of one instruction set: included once by each of
// kernels_avx512.cc, kernels_avx2.cc and kernels_portable.cc, which are
// compiled with that ISA's flags (top CMakeLists.txt).
#pragma once

#include "kernels/fused_attention.h"
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/fma_peak.h"
#include "kernels/simd/gemv_rows.h"

namespace qkv::kernels::simd {

// `rows`: the same ISA's float32 row loops (row_table.h).
template <class Isa>
constexpr KernelTable kernel_table(const RowKernels* rows) {
  return {Isa::kName,
          &fma_peak_gflops<Isa>,
          &map_into<Isa, exp<Isa>>,
          &map_into<Isa, log<Isa>>,
          TileShape<Isa>::kMr,
          TileShape<Isa>::kNr,
          ForwardShape<Isa>::kQueryPanel,
          &forward_scratch_floats<Isa>,
          &forward_tile<Isa>,
          &weights_tile<Isa>,
          &gemv_rows<Isa>,
          kGemvMaxRows<Isa>,
          &backward_scratch_floats<Isa>,
          &flash_backward_tile<Isa>,
          rows};
}

}  // namespace qkv::kernels::simd
