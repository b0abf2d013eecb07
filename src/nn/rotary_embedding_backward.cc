// RoPE's backward: the gradient rotated back by the forward's angles.
#include <cmath>
#include <vector>

#include "qkv/nn/positional_encoding.h"

namespace qkv::nn {

namespace {

// Rotates each pair of coordinates of `g` (a contiguous copy of grad_output)
// by −angle in place. cos_sin holds, for each of the L positions, E/2
// (cos, sin) pairs.
template <class T>
void rotate_back(T* g, int64_t batches, int64_t L, int64_t E, RopeStyle style,
                 const std::vector<double>& cos_sin) {
  const int64_t half = E / 2;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t l = 0; l < L; ++l) {
      T* row = g + (b * L + l) * E;
      const double* cs = cos_sin.data() + l * E;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        // Forward: a' = a cos − b sin,  b' = b cos + a sin, so
        // ∂/∂a = g_a' cos + g_b' sin,  ∂/∂b = g_b' cos − g_a' sin.
        const double ga = row[ia], gb = row[ib], c = cs[2 * i], s = cs[2 * i + 1];
        row[ia] = static_cast<T>(ga * c + gb * s);
        row[ib] = static_cast<T>(gb * c - ga * s);
      }
    }
}

}  // namespace

Tensor RotaryEmbedding::backward(const Tensor& grad_output, int64_t offset) const {
  const int64_t E = options_.head_dim;
  const char* m = "RotaryEmbedding::backward";
  QKV_CHECK(grad_output.defined(), m, ": grad_output is undefined");
  QKV_CHECK_TYPE(is_floating(grad_output.dtype()), m,
                 ": grad_output must be float32 or float64, got ", dtype_name(grad_output.dtype()));
  QKV_CHECK(grad_output.dim() >= 2 && grad_output.size(-1) == E, m,
            ": grad_output must be [..., L, E] with E = head_dim = ", E, ", got shape ",
            shape_str(grad_output.shape()));
  QKV_CHECK(offset >= 0, m, ": position offset must be >= 0, got ", offset);
  const int64_t L = grad_output.size(-2);
  const int64_t batches = L == 0 ? 0 : grad_output.numel() / (L * E);

  // The forward's angles, pos · θ_i, in float64.
  std::vector<double> cos_sin(static_cast<size_t>(L * E));
  const std::vector<double> theta = inverse_frequencies();
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < E / 2; ++i) {
      const double angle = static_cast<double>(offset + l) * theta[i];
      cos_sin[l * E + 2 * i] = std::cos(angle);
      cos_sin[l * E + 2 * i + 1] = std::sin(angle);
    }

  Tensor g = grad_output.clone();
  if (g.dtype() == DType::kFloat64)
    rotate_back<double>(g.data<double>(), batches, L, E, options_.style, cos_sin);
  else
    rotate_back<float>(g.data<float>(), batches, L, E, options_.style, cos_sin);
  return g;
}

}  // namespace qkv::nn
