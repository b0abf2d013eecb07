// The four scoring functions of tutorial §2.2.
#include <cmath>

#include "ops/checks.h"
#include "qkv/attention.h"
#include "qkv/functional.h"
#include "qkv/linear.h"

namespace qkv {

ScoreFunction ScoreFunction::dot() { return ScoreFunction(Kind::kDot); }

ScoreFunction ScoreFunction::scaled_dot() { return ScoreFunction(Kind::kScaledDot); }

ScoreFunction ScoreFunction::additive(Tensor w_q, Tensor w_k, Tensor v) {
  const char* fn = "ScoreFunction::additive";
  check_dim(w_q, 2, fn, "w_q", "[A, E]");
  check_dim(w_k, 2, fn, "w_k", "[A, Ek]");
  check_dim(v, 1, fn, "v", "[A]");
  check_floating(w_q, fn, "w_q");
  QKV_CHECK(w_k.size(0) == w_q.size(0) && v.size(0) == w_q.size(0), fn,
            ": w_q [A, E], w_k [A, Ek] and v [A] must agree on A, got w_q ", shape_str(w_q.shape()),
            ", w_k ", shape_str(w_k.shape()), ", v ", shape_str(v.shape()));
  QKV_CHECK_TYPE(w_k.dtype() == w_q.dtype() && v.dtype() == w_q.dtype(), fn,
                 ": w_q, w_k and v must share one dtype");
  ScoreFunction f(Kind::kAdditive);
  f.w_q_ = std::move(w_q);
  f.w_k_ = std::move(w_k);
  f.v_ = std::move(v);
  return f;
}

ScoreFunction ScoreFunction::bilinear(Tensor w) {
  check_dim(w, 2, "ScoreFunction::bilinear", "w", "[E, Ek]");
  check_floating(w, "ScoreFunction::bilinear", "w");
  ScoreFunction f(Kind::kBilinear);
  f.w_ = std::move(w);
  return f;
}

namespace {

// scores[..., i, j] = Σ_a v_a tanh(qp[..., i, a] + kp[..., j, a]), in float64.
Tensor additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& v) {
  const int64_t L = qp.size(-2), S = kp.size(-2), A = qp.size(-1);
  const Tensor q3 = qp.to(DType::kFloat64).reshape({-1, L, A}).contiguous();
  const Tensor k3 = kp.to(DType::kFloat64).reshape({-1, S, A}).contiguous();
  const std::vector<double> va = v.to_vector();
  Shape shape = qp.shape();
  shape.back() = S;
  Tensor out = Tensor::empty(shape, DType::kFloat64);
  const double* q = q3.data<double>();
  const double* k = k3.data<double>();
  double* o = out.data<double>();
  for (int64_t b = 0; b < q3.size(0); ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        double s = 0.0;
        for (int64_t a = 0; a < A; ++a)
          s += va[a] * std::tanh(q[(b * L + i) * A + a] + k[(b * S + j) * A + a]);
        o[(b * L + i) * S + j] = s;
      }
  return out.to(qp.dtype());
}

}  // namespace

Tensor ScoreFunction::scores(const Tensor& q, const Tensor& k) const {
  const char* fn = "ScoreFunction::scores";
  check_floating(q, fn, "q");
  check_floating(k, fn, "k");
  QKV_CHECK(q.dim() >= 2 && k.dim() == q.dim(), fn,
            ": q [..., L, E] and k [..., S, Ek] need the same number (>= 2) of dims, got q ",
            shape_str(q.shape()), " and k ", shape_str(k.shape()));
  const Tensor kt = k.transpose(-1, -2);
  switch (kind_) {
    case Kind::kDot:
    case Kind::kScaledDot: {
      QKV_CHECK(q.size(-1) == k.size(-1), fn, ": dot-product scores need equal head dims, got q ",
                shape_str(q.shape()), " and k ", shape_str(k.shape()));
      Tensor s = matmul(q, kt);
      if (kind_ == Kind::kScaledDot)
        return scale(s, 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
      return s;
    }
    case Kind::kAdditive: {
      QKV_CHECK(q.size(-1) == w_q_.size(1) && k.size(-1) == w_k_.size(1), fn,
                ": additive scores need q [..., L, ", w_q_.size(1), "] and k [..., S, ",
                w_k_.size(1), "], got q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
      QKV_CHECK_TYPE(q.dtype() == w_q_.dtype(), fn, ": q is ", dtype_name(q.dtype()),
                     " but the scorer's weights are ", dtype_name(w_q_.dtype()));
      return additive_scores(linear(q, w_q_), linear(k, w_k_), v_);
    }
    case Kind::kBilinear: {
      QKV_CHECK(q.size(-1) == w_.size(0) && k.size(-1) == w_.size(1), fn,
                ": bilinear scores need q [..., L, ", w_.size(0), "] and k [..., S, ", w_.size(1),
                "], got q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
      QKV_CHECK_TYPE(q.dtype() == w_.dtype(), fn, ": q is ", dtype_name(q.dtype()), " but W is ",
                     dtype_name(w_.dtype()));
      // q^T W k for every pair: (q W) kᵀ
      Shape w_shape = q.shape();
      w_shape[w_shape.size() - 2] = w_.size(0);
      w_shape.back() = w_.size(1);
      return matmul(matmul(q, w_.expand(w_shape)), kt);
    }
  }
  return {};
}

}  // namespace qkv
