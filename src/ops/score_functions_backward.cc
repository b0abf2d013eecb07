// Backward of the four scoring functions of tutorial §2.2 (ScoreFunction in
// qkv/attention.h; the forwards are in src/ops/score_functions.cc). dot,
// scaled dot and bilinear are matrix products and reuse matmul_backward; the
// additive score's tanh is differentiated here, in float64.
#include <cmath>

#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/linear.h"

namespace qkv {

namespace {

// Checks q, k and grad_scores: q [..., L, E], k [..., S, Ek] with equal leading dims.
void check_scores(const Tensor& grad_scores, const Tensor& q, const Tensor& k,
                  const ScoreGradients& grads, const char* fn) {
  check_same_floating(q, k, fn, "q", "k");
  QKV_CHECK(q.dim() >= 2 && k.dim() == q.dim(), fn,
            ": q [..., L, E] and k [..., S, Ek] need the same number (>= 2) of dims, got q ",
            shape_str(q.shape()), " and k ", shape_str(k.shape()));
  for (int64_t d = 0; d + 2 < q.dim(); ++d)
    QKV_CHECK(q.size(d) == k.size(d), fn, ": leading dims differ: q ", shape_str(q.shape()),
              " and k ", shape_str(k.shape()));
  Shape scores_shape = q.shape();
  scores_shape.back() = k.size(-2);
  check_grad_output(grad_scores, scores_shape, q, fn);
  check_grad(grads.q, q, fn, "grads.q");
  check_grad(grads.k, k, fn, "grads.k");
}

// A gradient view of kᵀ from one of k (undefined stays undefined).
Tensor transposed(const Tensor& grad_k) {
  return grad_k.defined() ? grad_k.transpose(-1, -2) : Tensor();
}

void check_weight(const Tensor& w, const Tensor& q, const Tensor& grad, const char* fn,
                  const char* name) {
  check_floating(w, fn, name);
  QKV_CHECK_TYPE(w.dtype() == q.dtype(), fn, ": q is ", dtype_name(q.dtype()), " but ", name,
                 " is ", dtype_name(w.dtype()));
  const std::string grad_name = std::string("grads.") + name;
  check_grad(grad, w, fn, grad_name.c_str());
}

}  // namespace

void dot_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k, bool scaled,
                         const ScoreGradients& grads) {
  const char* fn = "dot_scores_backward";
  check_scores(grad_scores, q, k, grads, fn);
  QKV_CHECK(q.size(-1) == k.size(-1), fn, ": dot-product scores need equal head dims, got q ",
            shape_str(q.shape()), " and k ", shape_str(k.shape()));
  // Forward: return scale(s, 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const Tensor g =
      scaled ? scale(grad_scores, 1.0 / std::sqrt(static_cast<double>(q.size(-1)))) : grad_scores;
  // Forward: Tensor s = matmul(q, kt);
  matmul_backward(g, q, k.transpose(-1, -2), {.a = grads.q, .b = transposed(grads.k)});
}

void additive_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k,
                              const Tensor& w_q, const Tensor& w_k, const Tensor& v,
                              const ScoreGradients& grads) {
  const char* fn = "additive_scores_backward";
  check_scores(grad_scores, q, k, grads, fn);
  check_weight(w_q, q, grads.w_q, fn, "w_q");
  check_weight(w_k, q, grads.w_k, fn, "w_k");
  check_weight(v, q, grads.v, fn, "v");
  QKV_CHECK(w_q.dim() == 2 && w_k.dim() == 2 && v.dim() == 1 && w_k.size(0) == w_q.size(0) &&
                v.size(0) == w_q.size(0) && q.size(-1) == w_q.size(1) && k.size(-1) == w_k.size(1),
            fn, ": need w_q [A, E], w_k [A, Ek], v [A] for q ", shape_str(q.shape()), " and k ",
            shape_str(k.shape()), ", got w_q ", shape_str(w_q.shape()), ", w_k ",
            shape_str(w_k.shape()), ", v ", shape_str(v.shape()));
  // Everything in float64; the gradients are rounded once when added.
  const DType f64 = DType::kFloat64;
  const Tensor q64 = q.to(f64), k64 = k.to(f64), wq64 = w_q.to(f64), wk64 = w_k.to(f64);
  // Forward: return additive_scores(linear(q, w_q_), linear(k, w_k_), v_);
  const Tensor qp = linear(q64, wq64), kp = linear(k64, wk64);
  const int64_t L = qp.size(-2), S = kp.size(-2), A = qp.size(-1);
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < q.dim(); ++d) batch *= q.size(d);
  const std::vector<double> qv = qp.to_vector(), kv = kp.to_vector(), va = v.to_vector();
  const std::vector<double> g = grad_scores.to_vector();
  std::vector<double> dqp(qv.size(), 0.0), dkp(kv.size(), 0.0), dv(A, 0.0);
  // Forward: s += va[a] * std::tanh(q[(b * L + i) * A + a] + k[(b * S + j) * A + a]);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const double gij = g[(b * L + i) * S + j];
        const double* qa = qv.data() + (b * L + i) * A;
        const double* ka = kv.data() + (b * S + j) * A;
        double* dqa = dqp.data() + (b * L + i) * A;
        double* dka = dkp.data() + (b * S + j) * A;
        for (int64_t a = 0; a < A; ++a) {
          const double t = std::tanh(qa[a] + ka[a]);
          const double d = gij * va[a] * (1.0 - t * t);  // tanh' = 1 − tanh²
          dqa[a] += d;
          dka[a] += d;
          dv[a] += gij * t;
        }
      }
  Tensor out;
  if (grads.v.defined()) add_to_grad(out = grads.v, dv);
  // Through the two projections (linear without bias), in float64.
  const std::pair<const Tensor*, const Tensor*> sides[] = {{&q64, &wq64}, {&k64, &wk64}};
  const std::vector<double>* dproj[] = {&dqp, &dkp};
  const Tensor* grad_in[] = {&grads.q, &grads.k};
  const Tensor* grad_w[] = {&grads.w_q, &grads.w_k};
  for (int side = 0; side < 2; ++side) {
    if (!grad_in[side]->defined() && !grad_w[side]->defined()) continue;
    const Tensor& x = *sides[side].first;
    const Tensor& w = *sides[side].second;
    Shape proj_shape = x.shape();
    proj_shape.back() = A;
    const Tensor dy = Tensor::from_vector(proj_shape, std::span<const double>(*dproj[side]));
    LinearGradients lg;
    if (grad_in[side]->defined()) lg.input = Tensor::zeros(x.shape(), f64);
    if (grad_w[side]->defined()) lg.weight = Tensor::zeros(w.shape(), f64);
    linear_backward(dy, x, w, Tensor(), lg);
    if (lg.input.defined()) add_to_grad(out = *grad_in[side], lg.input);
    if (lg.weight.defined()) add_to_grad(out = *grad_w[side], lg.weight);
  }
}

void bilinear_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k,
                              const Tensor& w, const ScoreGradients& grads) {
  const char* fn = "bilinear_scores_backward";
  check_scores(grad_scores, q, k, grads, fn);
  check_weight(w, q, grads.w, fn, "w");
  QKV_CHECK(w.dim() == 2 && q.size(-1) == w.size(0) && k.size(-1) == w.size(1), fn,
            ": need w [E, Ek] for q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
            ", got w ", shape_str(w.shape()));
  // Forward: return matmul(matmul(q, w_.expand(w_shape)), kt);
  Shape w_shape = q.shape();
  w_shape[w_shape.size() - 2] = w.size(0);
  w_shape.back() = w.size(1);
  const Tensor w_expanded = w.expand(w_shape);
  const Tensor qw = matmul(q, w_expanded);  // [..., L, Ek]
  const bool need_qw = grads.q.defined() || grads.w.defined();
  Tensor grad_qw = need_qw ? Tensor::zeros(qw.shape(), qw.dtype()) : Tensor();
  matmul_backward(grad_scores, qw, k.transpose(-1, -2), {.a = grad_qw, .b = transposed(grads.k)});
  if (!need_qw) return;
  // W was broadcast over the leading dims: its gradient is the sum over them.
  Tensor grad_w_expanded = grads.w.defined() ? Tensor::zeros(w_shape, w.dtype()) : Tensor();
  matmul_backward(grad_qw, q, w_expanded, {.a = grads.q, .b = grad_w_expanded});
  if (grads.w.defined()) {
    Tensor out = grads.w;
    add_to_grad(out, sum_to_shape(grad_w_expanded.to_vector(), w_shape, w.shape()));
  }
}

}  // namespace qkv
