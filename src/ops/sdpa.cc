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

// GQA with few queries (decoding): the g query heads of a group read the same
// keys and values, so their rows are stacked into one problem of g·L queries
// and K, V are streamed once per group instead of g times. The memory layout
// of the output, weights and log-sum-exp is the same either way. Only done
// where row positions do not matter: no causal mask beyond a single query,
// a mask (if any) equal for all heads and queries, no per-head ALiBi, no
// dropout.
kernels::SdpaProblem stack_gqa_queries(const kernels::SdpaProblem& p, int64_t group,
                                       const Tensor& q) {
  const bool single_query = p.L == 1;
  const bool positions_free =
      p.causal == CausalMask::kNone || (single_query && p.causal == CausalMask::kBottomRight);
  const bool per_position_bias =
      p.alibi_slopes != nullptr || p.window_left >= 0 || p.window_right >= 0;
  if (group <= 1 || p.dropout_p > 0.0 || !positions_free || per_position_bias || q.dim() < 3)
    return p;
  if (p.mask.base != nullptr && !single_query) return p;
  const int64_t problems = p.problems / group;
  // Rows of consecutive heads must follow each other evenly in memory.
  for (int64_t n = 0; n < problems; ++n)
    for (int64_t r = 1; r < group; ++r) {
      const int64_t b = n * group + r;
      if (p.q.offsets[b] - p.q.offsets[b - 1] != p.L * p.q.row_stride) return p;
      if (p.mask.base != nullptr && p.mask.offsets[b] != p.mask.offsets[b - 1]) return p;
    }
  kernels::SdpaProblem stacked = p;
  stacked.problems = problems;
  stacked.L = p.L * group;
  stacked.causal = CausalMask::kNone;
  auto every_group = [&](const std::vector<int64_t>& offsets) {
    std::vector<int64_t> out(static_cast<size_t>(problems));
    for (int64_t n = 0; n < problems; ++n) out[n] = offsets[n * group];
    return out;
  };
  stacked.q.offsets = every_group(p.q.offsets);
  stacked.k.offsets = every_group(p.k.offsets);
  stacked.v.offsets = every_group(p.v.offsets);
  if (p.mask.base != nullptr) {
    stacked.mask.offsets = every_group(p.mask.offsets);
    stacked.mask.row_stride = 0;  // one query per head: the same mask row for all
  }
  return stacked;
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
    kernels::sdpa_forward_fused(stack_gqa_queries(p, prepared.head_group, q), table);
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
