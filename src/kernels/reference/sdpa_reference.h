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

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/dropout.h"
#include "qkv/causal_mask.h"
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
  MatrixOperand keep;     // given dropout keep-mask [L, S] (bool); base == nullptr: use the seed
  double scale = 1.0;
  CausalMask causal = CausalMask::kNone;
  int64_t window_left = -1;              // −1: unbounded
  int64_t window_right = -1;             // −1: unbounded
  int64_t heads = 1;                     // H: problem b is head b % H (for ALiBi)
  const double* alibi_slopes = nullptr;  // [H] or nullptr
  double softcap = 0.0;                  // 0: off
  double dropout_p = 0.0;
  uint64_t dropout_seed = 0;      // keep(b, i, j) = dropout_keep(seed, (b·L + i)·S + j, p)
  DType dtype = DType::kFloat32;  // of q, k, v, output and weights
  // The fused kernels multiply bfloat16 values in the two products (q, k, v
  // and the weights rounded to bfloat16; softmax and sums in float32): set
  // for bfloat16 inputs and for Precision::kBFloat16. The reference ignores it.
  bool bf16_products = false;
  void* output = nullptr;  // [problems, L, Ev]: contiguous unless output_offsets is set
  // A strided output (each row's Ev elements contiguous): problem b's row i
  // starts at output_offsets[b] + i · output_row_stride elements. Empty: contiguous.
  std::vector<int64_t> output_offsets;
  int64_t output_row_stride = 0;
  void* weights = nullptr;  // contiguous [problems, L, S], or nullptr
  double* lse = nullptr;    // log-sum-exp of each score row [problems, L], or nullptr
  // The fused kernels set it (and never clear it) when they write a NaN or
  // infinite output, so that no second pass over the output has to look.
  std::atomic<bool>* nonfinite_output = nullptr;
};

// Where row i of problem b's output starts, in elements from p.output.
static inline int64_t output_row_offset(const SdpaProblem& p, int64_t b, int64_t i) {
  return p.output_offsets.empty() ? (b * p.L + i) * p.Ev
                                  : p.output_offsets[b] + i * p.output_row_stride;
}

// Element (row, col) of problem b's matrix in m, as double.
template <class T>
static inline double element(const MatrixOperand& m, int64_t b, int64_t row, int64_t col) {
  const T* base = static_cast<const T*>(m.base);
  return static_cast<double>(base[m.offsets[b] + row * m.row_stride + col * m.col_stride]);
}

// One row of a problem's matrix, read as double: row[col]. The loops over a
// head dimension locate their rows once instead of once per element.
// Always inlined: the sanitizer build (-O1) would otherwise call it per
// element, and the reference is most of the sanitized tests' time.
template <class T>
struct MatrixRow {
  const T* first;
  int64_t col_stride;
  [[gnu::always_inline]] double operator[](int64_t col) const {
    return static_cast<double>(first[col * col_stride]);
  }
};

// Row `row` of problem b's matrix in m.
template <class T>
static inline MatrixRow<T> matrix_row(const MatrixOperand& m, int64_t b, int64_t row) {
  return {static_cast<const T*>(m.base) + m.offsets[b] + row * m.row_stride, m.col_stride};
}

// Whether causal alignment `causal` lets query i see key j (L queries, S keys).
static inline bool causal_allows(CausalMask causal, int64_t i, int64_t j, int64_t L, int64_t S) {
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

// Query i's position on the key axis: i, or i + S − L when bottom-right aligned.
static inline int64_t aligned_position(const SdpaProblem& p, int64_t i) {
  return p.causal == CausalMask::kBottomRight ? i + p.S - p.L : i;
}

// The keys [begin, end) query i may see under the causal mask and the window.
static inline void visible_keys(const SdpaProblem& p, int64_t i, int64_t* begin, int64_t* end) {
  const int64_t pos = aligned_position(p, i);
  int64_t lo = 0, hi = p.S;
  if (p.causal != CausalMask::kNone) hi = std::min<int64_t>(hi, pos + 1);
  if (p.window_right >= 0) hi = std::min<int64_t>(hi, pos + p.window_right + 1);
  if (p.window_left >= 0) lo = std::max<int64_t>(lo, pos - p.window_left);
  *begin = std::min<int64_t>(std::max<int64_t>(lo, 0), p.S);
  *end = std::max<int64_t>(hi, *begin);
}

// Whether some query sees only part of the keys: then key tiles need masking.
static inline bool limits_keys(const SdpaProblem& p) {
  return p.causal != CausalMask::kNone || p.window_left >= 0 || p.window_right >= 0;
}

// raw = scale·q·k  ->  cap·tanh(raw / cap) when soft-capping, else raw.
static inline double softcapped(const SdpaProblem& p, double raw) {
  return p.softcap > 0.0 ? p.softcap * std::tanh(raw / p.softcap) : raw;
}

// The ALiBi bias of (i, j) for problem b: −slope_h·|i' − j|.
static inline double alibi_bias(const SdpaProblem& p, int64_t b, int64_t i, int64_t j) {
  if (p.alibi_slopes == nullptr) return 0.0;
  const int64_t d = aligned_position(p, i) - j;
  return -p.alibi_slopes[b % p.heads] * static_cast<double>(d < 0 ? -d : d);
}

// Whether dropout keeps weight (b, i, j): from the given keep-mask, else from the seed.
static inline bool dropout_kept(const SdpaProblem& p, int64_t b, int64_t i, int64_t j) {
  if (p.dropout_p <= 0.0) return true;
  if (p.keep.base != nullptr) {
    const bool* keep = static_cast<const bool*>(p.keep.base);
    return keep[p.keep.offsets[b] + i * p.keep.row_stride + j * p.keep.col_stride];
  }
  return dropout_keep(p.dropout_seed, (b * p.L + i) * p.S + j, p.dropout_p);
}

void sdpa_forward_reference(const SdpaProblem& problem);

// A writable [rows, cols] matrix per problem (column stride 1). Problems that
// share a matrix (GQA groups, broadcast dims) add their gradients up in it.
struct GradOperand {
  void* base = nullptr;
  std::vector<int64_t> offsets;  // per problem, in elements
  int64_t row_stride = 0;
};

struct SdpaBackwardProblem {
  SdpaProblem forward;        // the forward's problem; output and lse as it saved them
  MatrixOperand grad_output;  // dO [L, Ev] per problem
  GradOperand grad_q;         // += dQ [L, E]
  GradOperand grad_k;         // += dK [S, E]
  GradOperand grad_v;         // += dV [S, Ev]
  // dS = ∂loss/∂(scores after the mask), contiguous [problems, L, S]: the
  // gradient of an additive mask. nullptr when not needed.
  void* grad_scores = nullptr;
};

// Recomputes the softmax from q and k (ignores the saved output and lse) and
// accumulates the exact gradients, in float64 arithmetic.
void sdpa_backward_reference(const SdpaBackwardProblem& problem);

}  // namespace qkv::kernels
