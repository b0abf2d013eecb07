// General attention with any score function (§2.2–2.4), and the §2.4 example's
// simple_attention. Computed in float64 and rounded once to the input dtype.
#include "qkv/attention.h"

#include <limits>

#include "kernels/reference/softmax_reference.h"
#include "ops/checks.h"
#include "qkv/linear.h"

namespace qkv {

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const ScoreFunction& score, const Tensor& mask) {
  const char* fn = "attention";
  check_floating(q, fn, "q");
  check_floating(v, fn, "v");
  QKV_CHECK_TYPE(k.dtype() == q.dtype() && v.dtype() == q.dtype(), fn,
                 ": q, k and v must share one dtype, got q ", dtype_name(q.dtype()), ", k ",
                 dtype_name(k.dtype()), ", v ", dtype_name(v.dtype()));
  QKV_CHECK(v.dim() == k.dim() && v.size(-2) == k.size(-2), fn,
            ": v [..., S, Ev] must match k [..., S, Ek] in S and leading dims, got k ",
            shape_str(k.shape()), " and v ", shape_str(v.shape()));
  QKV_CHECK(q.size(-2) > 0 && k.size(-2) > 0, fn, ": empty sequence, got q ", shape_str(q.shape()),
            " and k ", shape_str(k.shape()));
  check_finite(q, fn, "q");
  check_finite(k, fn, "k");
  check_finite(v, fn, "v");
  Tensor scores = score.scores(q, k).to(DType::kFloat64).contiguous();  // [..., L, S]
  const int64_t S = scores.size(-1);
  double* s = scores.data<double>();
  if (mask.defined()) {
    QKV_CHECK_TYPE(mask.dtype() == DType::kBool || is_floating(mask.dtype()), fn,
                   ": mask must be bool (True = take part) or floating (added), got ",
                   dtype_name(mask.dtype()));
    const Shape b = broadcast_shapes(mask.shape(), scores.shape(), "attention (mask)");
    QKV_CHECK(b == scores.shape(), fn, ": mask of shape ", shape_str(mask.shape()),
              " does not broadcast to the scores' shape ", shape_str(scores.shape()));
    if (mask.dtype() != DType::kBool) check_mask_values(mask, fn, "mask");
    const std::vector<double> m = mask.expand(scores.shape()).to_vector();
    const bool is_bool = mask.dtype() == DType::kBool;
    for (size_t i = 0; i < m.size(); ++i) {
      s[i] =
          is_bool ? (m[i] != 0.0 ? s[i] : -std::numeric_limits<double>::infinity()) : s[i] + m[i];
    }
  }
  for (int64_t row = 0; row < scores.numel() / S; ++row)
    kernels::softmax_row_in_place(s + row * S, S);
  AttentionResult result;
  result.output = matmul(scores, v.to(DType::kFloat64)).to(q.dtype());
  result.weights = scores.to(q.dtype());
  return result;
}

AttentionResult simple_attention(const Tensor& query, const Tensor& keys, const Tensor& values) {
  const char* fn = "simple_attention";
  check_dim(query, 1, fn, "query", "[E]");
  check_dim(keys, 2, fn, "keys", "[S, E]");
  check_dim(values, 2, fn, "values", "[S, Ev]");
  QKV_CHECK(keys.size(1) == query.size(0), fn, ": keys must be [S, ", query.size(0),
            "] to match query [", query.size(0), "], got ", shape_str(keys.shape()));
  QKV_CHECK(values.size(0) == keys.size(0), fn,
            ": values must have one row per key (S = ", keys.size(0), "), got ",
            shape_str(values.shape()));
  // scores = keys · query; weights = softmax(scores); output = weights · values
  AttentionResult r = attention(query.unsqueeze(0), keys, values, ScoreFunction::dot());
  return {r.output.squeeze(0), r.weights.squeeze(0)};
}

}  // namespace qkv
