#include "kernels/reference/sdpa_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/dropout.h"
#include "kernels/interrupt.h"
#include "kernels/reference/softmax_reference.h"

namespace qkv::kernels {

namespace {

// The mask's contribution to score (i, j): 0, a float to add, or -inf.
template <class T>
double mask_term(const MatrixOperand& mask, int64_t problem, int64_t i, int64_t j) {
  if (mask.base == nullptr) return 0.0;
  if (mask.dtype == DType::kBool) {
    return element<bool>(mask, problem, i, j) ? 0.0 : -std::numeric_limits<double>::infinity();
  }
  return element<T>(mask, problem, i, j);
}

template <class T>
void forward(const SdpaProblem& p) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  T* output = static_cast<T*>(p.output);
  T* weights_out = static_cast<T*>(p.weights);
  const double keep_scale = p.dropout_p > 0.0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  std::vector<double> scores(static_cast<size_t>(p.S));
  std::vector<double> out_row(static_cast<size_t>(p.Ev));

  InterruptPoll poll;
  for (int64_t b = 0; b < p.problems && !poll.stop(); ++b) {
    for (int64_t i = 0; i < p.L && !poll.stop(); ++i) {
      // scores = softcap(scale · q_i · k_j) + alibi_ij + mask_ij   (−inf where not visible)
      int64_t begin, end;
      visible_keys(p, i, &begin, &end);
      const MatrixRow<T> q_i = matrix_row<T>(p.q, b, i);
      for (int64_t j = 0; j < p.S; ++j) {
        double s = kNegInf;
        if (j >= begin && j < end) {
          const MatrixRow<T> k_j = matrix_row<T>(p.k, b, j);
          double dot = 0.0;
          for (int64_t e = 0; e < p.E; ++e) dot += q_i[e] * k_j[e];
          s = softcapped(p, dot * p.scale) + alibi_bias(p, b, i, j) + mask_term<T>(p.mask, b, i, j);
        }
        scores[j] = s;
      }
      if (p.lse) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (int64_t j = 0; j < p.S; ++j) mx = std::max(mx, scores[j]);
        for (int64_t j = 0; j < p.S; ++j) sum += mx == kNegInf ? 0.0 : std::exp(scores[j] - mx);
        p.lse[b * p.L + i] = sum > 0.0 ? mx + std::log(sum) : kNegInf;
      }
      softmax_row_in_place(scores.data(), p.S);
      // dropout: a kept weight is scaled by 1/(1 − p), a dropped one is 0
      for (int64_t j = 0; j < p.S; ++j) {
        double w = scores[j];
        if (p.dropout_p > 0.0) w = dropout_kept(p, b, i, j) ? w * keep_scale : 0.0;
        scores[j] = w;
        if (weights_out) weights_out[(b * p.L + i) * p.S + j] = static_cast<T>(w);
      }
      // output_i = Σ_j w_ij v_j
      std::fill(out_row.begin(), out_row.end(), 0.0);
      for (int64_t j = 0; j < p.S; ++j) {
        if (scores[j] == 0.0) continue;
        const MatrixRow<T> v_j = matrix_row<T>(p.v, b, j);
        for (int64_t e = 0; e < p.Ev; ++e) out_row[e] += scores[j] * v_j[e];
      }
      for (int64_t e = 0; e < p.Ev; ++e)
        output[output_row_offset(p, b, i) + e] = static_cast<T>(out_row[e]);
    }
  }
  poll.throw_if_stopped("scaled_dot_product_attention");
}

}  // namespace

void sdpa_forward_reference(const SdpaProblem& problem) {
  if (problem.dtype == DType::kFloat64) {
    forward<double>(problem);
  } else {
    forward<float>(problem);
  }
}

}  // namespace qkv::kernels
