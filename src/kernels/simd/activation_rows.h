// The float32 activations and their derivatives on vectors of one
// instruction set, with the kernels' exp and erf (vec.h): rows_*.cc compile
// them once per ISA into RowKernels. Against float64 they are within
// ~3e-7 · (|x| + 1) (tests/test_gelu.cc, tests/test_isa_row_ops.cc).
// Internal linkage, as vec.h.
#pragma once

#include <cstdint>

#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

// gi[i] += go[i] · d(x[i]), as map_span (kernels/simd/vec.h).
template <class Isa, class D>
[[gnu::always_inline]] inline void backward_span(const float* go, const float* x, float* gi,
                                                 int64_t n, D d) {
  constexpr int kL = Isa::kLanes;
  int64_t i = 0;
  for (; i + kL <= n; i += kL)
    Isa::store(gi + i, Isa::fmadd(Isa::load(go + i), d(Isa::load(x + i)), Isa::load(gi + i)));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    const typename Isa::V g = Isa::load_first(go + i, rest), v = Isa::load_first(x + i, rest);
    Isa::store_first(gi + i, Isa::fmadd(g, d(v), Isa::load_first(gi + i, rest)), rest);
  }
}

template <class Isa>
[[gnu::always_inline]] inline typename Isa::V k(float c) {
  return Isa::set1(c);
}

// gelu(x) = x/2 (1 + erf(x/√2)).
template <class Isa>
void gelu_span(const float* x, float* y, int64_t n) {
  map_span<Isa>(
      x, y, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto e = erf<Isa>(Isa::mul(v, k<Isa>(0.70710678118654752f)));
        return Isa::mul(Isa::mul(k<Isa>(0.5f), v), Isa::add(k<Isa>(1.0f), e));
      });
}

// u = √(2/π) (x + 0.044715 x³).
template <class Isa>
[[gnu::always_inline]] inline typename Isa::V gelu_tanh_u(typename Isa::V v) {
  const auto cube = Isa::mul(Isa::mul(Isa::mul(k<Isa>(0.044715f), v), v), v);
  return Isa::mul(k<Isa>(0.79788456080286536f), Isa::add(v, cube));
}

// x/2 (1 + tanh(u)) = x / (1 + exp(-2u)).
template <class Isa>
void gelu_tanh_span(const float* x, float* y, int64_t n) {
  map_span<Isa>(
      x, y, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto a = Isa::mul(k<Isa>(-2.0f), gelu_tanh_u<Isa>(v));
        const auto q = Isa::div(v, Isa::add(k<Isa>(1.0f), exp<Isa>(a)));
        // Past exp's clamp the quotient would stay ~x e^-88, not 0: take the limit.
        return Isa::ge_select(a, k<Isa>(86.0f), Isa::mul(k<Isa>(0.0f), v), q);
      });
}

template <class Isa>
void silu_span(const float* x, float* y, int64_t n) {
  map_span<Isa>(
      x, y, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto a = Isa::mul(k<Isa>(-1.0f), v);
        const auto q = Isa::div(v, Isa::add(k<Isa>(1.0f), exp<Isa>(a)));
        return Isa::ge_select(a, k<Isa>(86.0f), Isa::mul(k<Isa>(0.0f), v), q);  // as gelu_tanh
      });
}

// d for |x| <= limit; 1 above, 0 below (NaN stays in d).
template <class Isa>
[[gnu::always_inline]] inline typename Isa::V saturate(typename Isa::V v, float limit,
                                                       typename Isa::V d) {
  return Isa::gt_select(v, k<Isa>(limit), k<Isa>(1.0f),
                        Isa::gt_select(k<Isa>(-limit), v, k<Isa>(0.0f), d));
}

template <class Isa>
void relu_backward_span(const float* go, const float* x, float* gi, int64_t n) {
  backward_span<Isa>(
      go, x, gi, n, [](typename Isa::V v) __attribute__((always_inline)) {
        return Isa::gt_select(v, Isa::zero(), k<Isa>(1.0f), Isa::zero());
      });
}

// gelu'(x) = Φ(x) + x φ(x), Φ(x) = (1 + erf(x/√2)) / 2, φ(x) = exp(−x²/2) / √(2π).
template <class Isa>
void gelu_backward_span(const float* go, const float* x, float* gi, int64_t n) {
  backward_span<Isa>(
      go, x, gi, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto e = erf<Isa>(Isa::mul(v, k<Isa>(0.70710678118654752f)));
        const auto cdf = Isa::mul(k<Isa>(0.5f), Isa::add(k<Isa>(1.0f), e));
        const auto pdf = Isa::mul(k<Isa>(0.39894228040143268f),
                                  exp<Isa>(Isa::mul(Isa::mul(k<Isa>(-0.5f), v), v)));
        // Past ±10 the derivative is 1 or 0 in float32.
        return saturate<Isa>(v, 10.0f, Isa::fmadd(v, pdf, cdf));
      });
}

// With t = tanh(u), u = k (x + 0.044715 x³), k = √(2/π):
// f'(x) = (1 + t) / 2 + x/2 (1 − t²) k (1 + 3 · 0.044715 x²); t = 1 − 2 / (1 + e^{2u}).
template <class Isa>
void gelu_tanh_backward_span(const float* go, const float* x, float* gi, int64_t n) {
  backward_span<Isa>(
      go, x, gi, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto one = k<Isa>(1.0f), half = k<Isa>(0.5f);
        const auto u = gelu_tanh_u<Isa>(v);
        const auto t = Isa::sub(
            one, Isa::div(k<Isa>(2.0f), Isa::add(one, exp<Isa>(Isa::mul(k<Isa>(2.0f), u)))));
        const auto du = Isa::mul(k<Isa>(0.79788456080286536f),
                                 Isa::add(one, Isa::mul(Isa::mul(k<Isa>(0.134145f), v), v)));
        const auto right = Isa::mul(Isa::mul(Isa::mul(half, v), Isa::sub(one, Isa::mul(t, t))), du);
        return saturate<Isa>(v, 10.0f, Isa::fmadd(half, Isa::add(one, t), right));  // x³ overflows
      });
}

// silu'(x) = s (1 + x (1 − s)), s = 1 / (1 + e^{−x}).
template <class Isa>
void silu_backward_span(const float* go, const float* x, float* gi, int64_t n) {
  backward_span<Isa>(
      go, x, gi, n, [](typename Isa::V v) __attribute__((always_inline)) {
        const auto one = k<Isa>(1.0f);
        const auto s = Isa::div(one, Isa::add(one, exp<Isa>(Isa::mul(k<Isa>(-1.0f), v))));
        const auto d = Isa::mul(s, Isa::fmadd(v, Isa::sub(one, s), one));
        return saturate<Isa>(v, 80.0f, d);
      });
}

}  // namespace
}  // namespace qkv::kernels::simd
