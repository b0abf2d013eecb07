// scaled_dot_product_attention: checks (sdpa_prepare.cc), dropout seed, then
// one kernel call: fused for float32, the float64-capable reference otherwise.
#include "kernels/dropout.h"
#include "kernels/fused_attention.h"
#include "ops/checks.h"
#include "ops/sdpa_prepare.h"

namespace qkv {

namespace {

// The keep-mask that seed-based dropout uses, materialised for export.
Tensor export_keep_mask(const Shape& shape, uint64_t seed, double p) {
  Tensor keep = Tensor::empty(shape, DType::kBool);
  bool* k = keep.data<bool>();
  for (int64_t i = 0; i < keep.numel(); ++i) k[i] = kernels::dropout_keep(seed, i, p);
  return keep;
}

}  // namespace

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention";
  PreparedSdpa prepared = prepare_sdpa(q, k, v, options, fn);
  kernels::SdpaProblem& p = prepared.problem;
  const bool fused = use_fused_kernel(q, options, fn);

  SdpaResult result;
  if (p.dropout_p > 0.0) {
    if (p.keep.base == nullptr) {
      Generator& gen = options.generator ? *options.generator : default_generator();
      p.dropout_seed = gen.next_u64();
      result.dropout_seed = p.dropout_seed;
    }
    if (options.return_dropout_mask) {
      result.dropout_mask = p.keep.base != nullptr ? prepared.keep.contiguous()
                                                   : export_keep_mask(prepared.weights_shape,
                                                                      p.dropout_seed, p.dropout_p);
    }
  }
  result.output = Tensor::empty(prepared.out_shape, q.dtype());
  p.output = result.output.raw_data();
  if (options.need_weights) {
    result.weights = Tensor::empty(prepared.weights_shape, q.dtype());
    p.weights = result.weights.raw_data();
  }
  // The log-sum-exp per query row: the fused kernel needs it (weights are
  // rebuilt from it) and the backward reuses it.
  Shape lse_shape = prepared.out_lead;
  lse_shape.push_back(p.L);
  result.logsumexp = Tensor::empty(lse_shape, DType::kFloat64);
  p.lse = result.logsumexp.data<double>();
  if (fused) {
    const kernels::KernelTable& table = kernels::active_kernel_table();
    kernels::sdpa_forward_fused(p, table);
    result.kernel = std::string("fused-") + table.name;
  } else {
    kernels::sdpa_forward_reference(p);
    result.kernel = "reference";
  }
  // NaN or inf in the inputs reach the output; checking the output alone is
  // one read instead of three, and also catches overflow of huge inputs.
  if (!all_finite(result.output)) {
    check_finite(q, fn, "query");
    check_finite(k, fn, "key");
    check_finite(v, fn, "value");
    QKV_CHECK(false, fn, ": the output overflowed to NaN/inf although query, key and value are ",
              "finite; scale the inputs down (max |q|·|k|·scale must stay well below 1e38)");
  }
  return result;
}

}  // namespace qkv
