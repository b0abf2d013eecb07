// The reference backward of attention, derivative by derivative, in float64.
// Forward (per query row i):  s_ij = scale·q_i·k_j + mask_ij;  p = softmax(s);
// p̃_ij = p_ij·keep_ij/(1 − p_drop);  o_i = Σ_j p̃_ij v_j.
// (Soft-capping, ALiBi and windows enter s as in the forward.)
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/interrupt.h"
#include "kernels/reference/sdpa_reference.h"
#include "kernels/reference/softmax_reference.h"

namespace qkv::kernels {

namespace {

// Row `row` of problem b's gradient (its elements are contiguous).
template <class T>
T* grad_row(const GradOperand& g, int64_t b, int64_t row) {
  return static_cast<T*>(g.base) + g.offsets[b] + row * g.row_stride;
}

template <class T>
void backward(const SdpaBackwardProblem& bp) {
  const SdpaProblem& p = bp.forward;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const double keep_scale = p.dropout_p > 0.0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  std::vector<double> prob(p.S), dprob(p.S), cap_slope(p.S);
  InterruptPoll poll;
  for (int64_t b = 0; b < p.problems && !poll.stop(); ++b) {
    for (int64_t i = 0; i < p.L && !poll.stop(); ++i) {
      // p_i = softmax(s_i), recomputed; s = softcap(scale·q·k) + alibi + mask
      int64_t begin, end;
      visible_keys(p, i, &begin, &end);
      const MatrixRow<T> q_i = matrix_row<T>(p.q, b, i), dO_i = matrix_row<T>(bp.grad_output, b, i);
      T* dq_i = grad_row<T>(bp.grad_q, b, i);
      for (int64_t j = 0; j < p.S; ++j) {
        double s = neg_inf;
        cap_slope[j] = 1.0;
        if (j >= begin && j < end) {
          const MatrixRow<T> k_j = matrix_row<T>(p.k, b, j);
          double dot = 0.0;
          for (int64_t e = 0; e < p.E; ++e) dot += q_i[e] * k_j[e];
          s = softcapped(p, dot * p.scale);
          // d/dx cap·tanh(x/cap) = 1 − tanh² = 1 − (s/cap)²
          if (p.softcap > 0.0) cap_slope[j] = 1.0 - (s / p.softcap) * (s / p.softcap);
          s += alibi_bias(p, b, i, j);
          if (p.mask.base != nullptr) {
            s = p.mask.dtype == DType::kBool ? (element<bool>(p.mask, b, i, j) ? s : neg_inf)
                                             : s + element<T>(p.mask, b, i, j);
          }
        }
        prob[j] = s;
      }
      softmax_row_in_place(prob.data(), p.S);
      // o_i = Σ_j p̃_ij v_j   ⇒   ∂p̃_ij = dO_i · v_j,  ∂v_j += p̃_ij dO_i
      // p̃_ij = p_ij·keep/(1 − p_drop)   ⇒   ∂p_ij = ∂p̃_ij·keep/(1 − p_drop)
      double row_dot = 0.0;  // D_i = Σ_j p_ij ∂p_ij
      for (int64_t j = 0; j < p.S; ++j) {
        const double kept = dropout_kept(p, b, i, j) ? keep_scale : 0.0;
        const MatrixRow<T> v_j = matrix_row<T>(p.v, b, j);
        T* dv_j = grad_row<T>(bp.grad_v, b, j);
        double dp_tilde = 0.0;
        for (int64_t e = 0; e < p.Ev; ++e) {
          dp_tilde += dO_i[e] * v_j[e];
          dv_j[e] += static_cast<T>(prob[j] * kept * dO_i[e]);
        }
        dprob[j] = dp_tilde * kept;
        row_dot += prob[j] * dprob[j];
      }
      // p = softmax(s)   ⇒   ∂s_ij = p_ij (∂p_ij − D_i)
      // s_ij = softcap(x_ij) + …, x_ij = scale·q_i·k_j   ⇒   ∂x_ij = ∂s_ij·(1 − (s/cap)²),
      // ∂q_i += scale ∂x_ij k_j,  ∂k_j += scale ∂x_ij q_i
      for (int64_t j = 0; j < p.S; ++j) {
        const double ds = prob[j] * (dprob[j] - row_dot);
        if (bp.grad_scores)
          static_cast<T*>(bp.grad_scores)[(b * p.L + i) * p.S + j] = static_cast<T>(ds);
        const double dx = ds * cap_slope[j];
        if (dx == 0.0) continue;
        const MatrixRow<T> k_j = matrix_row<T>(p.k, b, j);
        T* dk_j = grad_row<T>(bp.grad_k, b, j);
        for (int64_t e = 0; e < p.E; ++e) {
          dq_i[e] += static_cast<T>(p.scale * dx * k_j[e]);
          dk_j[e] += static_cast<T>(p.scale * dx * q_i[e]);
        }
      }
    }
  }
  poll.throw_if_stopped("scaled_dot_product_attention backward");
}

}  // namespace

void sdpa_backward_reference(const SdpaBackwardProblem& problem) {
  if (problem.forward.dtype == DType::kFloat64) {
    backward<double>(problem);
  } else {
    backward<float>(problem);
  }
}

}  // namespace qkv::kernels
