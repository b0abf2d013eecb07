// The KernelTable of one instruction set: included once by each of
// kernels_avx512.cc, kernels_avx2.cc and kernels_portable.cc, which are
// compiled with that ISA's flags (top CMakeLists.txt).
#pragma once

#include "kernels/fused_attention.h"
#include "kernels/simd/few_query_forward.h"
#include "kernels/simd/flash_backward.h"
#include "kernels/simd/flash_backward_bf16.h"
#include "kernels/simd/fma_peak.h"
#include "kernels/simd/gemv_rows.h"

namespace qkv::kernels::simd {

// `rows`: the same ISA's float32 row loops (row_table.h).
template <class Isa>
constexpr KernelTable kernel_table(const RowKernels* rows) {
  KernelTable table = {Isa::kName,
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
                       rows,
                       &backward_bf16_scratch_floats<Isa>,
                       &flash_backward_bf16_tile<Isa>};
  table.key_chunks = &kKeyChunkKernels<Isa>;
  return table;
}

// `base` with the forward entries of another table of the same ISA family
// (avx512_bf16: the avx512 table with its bfloat16-product forward).
constexpr KernelTable with_forward_entries(KernelTable base, const char* name,
                                           decltype(KernelTable::forward_scratch_floats) scratch,
                                           decltype(KernelTable::forward_tile) forward,
                                           decltype(KernelTable::weights_tile) weights) {
  base.name = name;
  base.forward_scratch_floats = scratch;
  base.forward_tile = forward;
  base.weights_tile = weights;
  return base;
}

// `base` with the bfloat16-product backward entries of another table
// (avx512_bf16: compiled with AVX512_BF16 for vdpbf16ps).
constexpr KernelTable with_bf16_backward_entries(
    KernelTable base, decltype(KernelTable::backward_bf16_scratch_floats) scratch,
    decltype(KernelTable::flash_backward_bf16_tile) tile) {
  base.backward_bf16_scratch_floats = scratch;
  base.flash_backward_bf16_tile = tile;
  return base;
}

}  // namespace qkv::kernels::simd
