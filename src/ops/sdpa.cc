// scaled_dot_product_attention: checks (sdpa_prepare.cc), dropout seed, then
// one kernel call: fused for float32, the float64-capable reference otherwise.
#include "kernels/dropout.h"
#include "kernels/fused_attention.h"
#include "ops/checks.h"
#include "ops/sdpa_bfloat16.h"
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
// Returns p itself, or `storage` filled with the stacked problem.
const kernels::SdpaProblem& stack_gqa_queries(const kernels::SdpaProblem& p, int64_t group,
                                              const Tensor& q, kernels::SdpaProblem& storage) {
  const bool single_query = p.L == 1;
  const bool positions_free =
      p.causal == CausalMask::kNone || (single_query && p.causal == CausalMask::kBottomRight);
  const bool per_position_bias =
      p.alibi_slopes != nullptr || p.window_left >= 0 || p.window_right >= 0;
  if (group <= 1 || p.dropout_p > 0.0 || !positions_free || per_position_bias || q.dim() < 3 ||
      !p.output_offsets.empty())
    return p;
  if (p.mask.base != nullptr && !single_query) return p;
  const int64_t problems = p.problems / group;
  // Rows of consecutive heads must follow each other evenly in memory. With
  // one query per head any even spacing will do, as in the heads of a
  // [B, 1, H, E] view, which Hugging Face passes: it becomes the stacked
  // rows' stride.
  const int64_t q_step = single_query ? p.q.offsets[1] - p.q.offsets[0] : p.L * p.q.row_stride;
  if (q_step <= 0) return p;
  for (int64_t n = 0; n < problems; ++n)
    for (int64_t r = 1; r < group; ++r) {
      const int64_t b = n * group + r;
      if (p.q.offsets[b] - p.q.offsets[b - 1] != q_step) return p;
      if (p.mask.base != nullptr && p.mask.offsets[b] != p.mask.offsets[b - 1]) return p;
    }
  kernels::SdpaProblem& stacked = storage;
  stacked = p;  // copy-assignment reuses the vectors' memory
  stacked.problems = problems;
  stacked.L = p.L * group;
  stacked.causal = CausalMask::kNone;
  if (single_query) stacked.q.row_stride = q_step;
  auto every_group = [&](std::vector<int64_t>& offsets) {
    for (int64_t n = 0; n < problems; ++n) offsets[n] = offsets[n * group];
    offsets.resize(static_cast<size_t>(problems));
  };
  every_group(stacked.q.offsets);
  every_group(stacked.k.offsets);
  every_group(stacked.v.offsets);
  if (p.mask.base != nullptr) {
    every_group(stacked.mask.offsets);
    stacked.mask.row_stride = 0;  // one query per head: the same mask row for all
  }
  return stacked;
}

// Runs the chosen kernel on a prepared problem whose output (and lse) are set.
// Returns the name of the kernel that ran.
const char* run_forward(const kernels::SdpaProblem& p, bool fused, int64_t head_group,
                        const Tensor& q, kernels::SdpaProblem& stacked) {
  if (!fused) {
    kernels::sdpa_forward_reference(p);
    return "reference";
  }
  const kernels::KernelTable& table = kernels::active_kernel_table();
  kernels::sdpa_forward_fused(stack_gqa_queries(p, head_group, q, stacked), table);
  return table.name;
}

// In the fused kernels NaN or inf in the inputs reach the output; checking
// the output alone is one read instead of three, and also catches overflow of
// huge inputs. The fused kernels check what they write (`flagged`). The
// reference (float64 arithmetic) takes a row of NaN scores for a fully masked
// one and writes zeros: its inputs are scanned, then its output.
void check_output_finite(const Tensor& output, const std::atomic<bool>* flagged, const Tensor& q,
                         const Tensor& k, const Tensor& v, const char* fn) {
  // (bfloat16 inputs are widened to be scanned: the error path only)
  auto scannable = [](const Tensor& t) {
    return t.dtype() == DType::kBFloat16 ? t.to(DType::kFloat32) : t;
  };
  auto check_inputs = [&] {
    check_finite(scannable(q), fn, "query");
    check_finite(scannable(k), fn, "key");
    check_finite(scannable(v), fn, "value");
  };
  if (flagged == nullptr) check_inputs();
  if (flagged ? !flagged->load() : all_finite(output)) return;
  check_inputs();
  QKV_CHECK(false, fn, ": the output overflowed to NaN/inf although query, key and value are ",
            "finite; scale the inputs down (max |q|·|k|·scale must stay well below 1e38)");
}

}  // namespace

SdpaWorkspace::SdpaWorkspace() : state_(std::make_unique<State>()) {}
SdpaWorkspace::~SdpaWorkspace() = default;
SdpaWorkspace::SdpaWorkspace(SdpaWorkspace&&) noexcept = default;
SdpaWorkspace& SdpaWorkspace::operator=(SdpaWorkspace&&) noexcept = default;

void scaled_dot_product_attention_into(Tensor& output, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const SdpaOptions& options,
                                       SdpaWorkspace& workspace) {
  const char* fn = "scaled_dot_product_attention_into";
  SdpaWorkspace::State& st = *workspace.state_;
  QKV_CHECK_TYPE(!is_bfloat16_call(q, k, v), fn,
                 ": bfloat16 inputs are not taken here; call scaled_dot_product_attention");
  prepare_sdpa(st.prepared, q, k, v, options, fn);
  kernels::SdpaProblem& p = st.prepared.problem;
  QKV_CHECK(!options.need_weights && !options.return_dropout_mask, fn,
            ": need_weights and return_dropout_mask are not available here; call "
            "scaled_dot_product_attention");
  QKV_CHECK(output.defined() && output.shape() == st.prepared.out_shape &&
                (output.stride(-1) == 1 || p.Ev == 1),
            fn, ": output must be a tensor of shape ", shape_str(st.prepared.out_shape),
            " with contiguous rows, got ",
            output.defined() ? shape_str(output.shape()) : "undefined",
            output.defined() && output.stride(-1) != 1 ? " (last dim strided)" : "");
  QKV_CHECK_TYPE(output.dtype() == q.dtype(), fn, ": output must be ", dtype_name(q.dtype()),
                 " like the query, got ", dtype_name(output.dtype()));
  QKV_CHECK(output.is_contiguous() || elements_distinct(output), fn,
            ": output must give every element its own memory (not an expanded view), got "
            "strides ",
            shape_str(output.strides()));
  QKV_CHECK(!spans_overlap(output, q) && !spans_overlap(output, k) && !spans_overlap(output, v), fn,
            ": output must not overlap query, key or value");
  if (!output.is_contiguous()) {  // e.g. the heads of a [B, L, H, E] buffer
    fill_offsets(p.output_offsets, output, st.prepared.out_lead, 1);
    p.output_row_stride = output.stride(-2);
  }
  const bool fused = use_fused_kernel(q, options, fn);
  if (p.dropout_p > 0.0 && p.keep.base == nullptr) {
    Generator& gen = options.generator ? *options.generator : default_generator();
    p.dropout_seed = gen.next_u64();
  }
  p.output = output.raw_data();
  st.lse.resize(static_cast<size_t>(p.problems * p.L));
  p.lse = st.lse.data();
  std::atomic<bool> nonfinite{false};
  p.nonfinite_output = &nonfinite;
  run_forward(p, fused, st.prepared.head_group, q, st.stacked);
  p.nonfinite_output = nullptr;  // the workspace outlives this call's flag
  check_output_finite(output, fused ? &nonfinite : nullptr, q, k, v, fn);
}

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention";
  const bool bfloat16_fused = bfloat16_runs_fused(q, k, v, options);
  if (is_bfloat16_call(q, k, v) && !bfloat16_fused)
    return scaled_dot_product_attention_bfloat16(q, k, v, options);
  PreparedSdpa prepared = prepare_sdpa(q, k, v, options, fn);
  kernels::SdpaProblem& p = prepared.problem;
  const bool fused = bfloat16_fused || use_fused_kernel(q, options, fn);

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
  result.output = empty_laid_out(prepared.out_shape, q.dtype(), q, options.layout);
  p.output = result.output.raw_data();
  if (!result.output.is_contiguous()) {  // e.g. the heads of a [B, L, H, Ev] buffer
    fill_offsets(p.output_offsets, result.output, prepared.out_lead, 1);
    p.output_row_stride = result.output.stride(-2);
  }
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
  std::atomic<bool> nonfinite{false};
  p.nonfinite_output = &nonfinite;
  kernels::SdpaProblem stacked;
  const char* kernel = run_forward(p, fused, prepared.head_group, q, stacked);
  result.kernel = fused ? std::string("fused-") + kernel : kernel;
  check_output_finite(result.output, fused ? &nonfinite : nullptr, q, k, v, fn);
  return result;
}

}  // namespace qkv
