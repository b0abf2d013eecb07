// The reference attention kernel: the oracle every faster kernel is tested
// against. Scalar loops, float64 arithmetic for float32 and float64 inputs,
// written to be read next to the formula
//
//   weights = dropout(softmax(scale · q kᵀ + mask)),   output = weights · v
//
// The op layer (src/ops/sdpa.cc) has already checked shapes and broadcast the
// operands; the kernel sees a flat list of (batch, head) problems, each with
// the element offset of its q, k, v and mask matrices.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/attention.h"
#include "qkv/tensor.h"

namespace qkv::kernels {

// A strided [rows, cols] matrix per (batch, head) problem.
struct MatrixOperand {
  const void* base = nullptr;     // element 0 of the tensor the offsets refer to
  std::vector<int64_t> offsets;   // per problem, in elements
  int64_t row_stride = 0;         // in elements
  int64_t col_stride = 0;         // in elements
  DType dtype = DType::kFloat32;  // masks: kBool or the query's dtype
};

struct SdpaProblem {
  int64_t problems = 0;  // product of the output's leading dims (batch dims × H)
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  MatrixOperand q, k, v;  // [L, E], [S, E], [S, Ev] per problem
  MatrixOperand mask;     // [L, S] per problem; base == nullptr when absent
  MatrixOperand keep;     // dropout keep-mask [L, S] (bool); base == nullptr when no dropout
  double scale = 1.0;
  CausalMask causal = CausalMask::kNone;
  double dropout_p = 0.0;
  DType dtype = DType::kFloat32;  // of q, k, v, output and weights
  void* output = nullptr;         // contiguous [problems, L, Ev]
  void* weights = nullptr;        // contiguous [problems, L, S], or nullptr
};

// Whether causal alignment `causal` lets query i see key j (L queries, S keys).
inline bool causal_allows(CausalMask causal, int64_t i, int64_t j, int64_t L, int64_t S) {
  switch (causal) {
    case CausalMask::kNone:
      return true;
    case CausalMask::kTopLeft:
      return j <= i;
    case CausalMask::kBottomRight:
      return j <= i + S - L;
  }
  return true;
}

void sdpa_forward_reference(const SdpaProblem& problem);

}  // namespace qkv::kernels
