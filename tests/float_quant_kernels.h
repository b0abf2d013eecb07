// FloatQuantKernels: while alive, pins the fastest quantised-linear table that
// never rounds x (kernels/quant_gemm.h: avx512_vnni16 rounds it to 16 bits on
// both routes, avx512_vnni to 8 on the few-rows one), so that decoding and
// recomputing differ by float32 summation order only.
#pragma once

#include "kernels/quant_gemm.h"

namespace qkv_test {

struct FloatQuantKernels {
  FloatQuantKernels() {
    for (const auto* t : qkv::kernels::supported_quant_kernels())
      if (t->x_bits == 32) {
        qkv::kernels::override_quant_kernels(t);
        break;
      }
  }
  ~FloatQuantKernels() { qkv::kernels::override_quant_kernels(nullptr); }
  FloatQuantKernels(const FloatQuantKernels&) = delete;
  FloatQuantKernels& operator=(const FloatQuantKernels&) = delete;
};

}  // namespace qkv_test
