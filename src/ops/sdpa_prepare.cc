// Argument checks and problem set-up shared by the SDPA forward and backward.
#include "ops/sdpa_prepare.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "ops/checks.h"

namespace qkv {

namespace {

Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// torch's is_non_overlapping_and_dense: the dims of size > 1, from the
// smallest stride up, each step over exactly the elements inside it.
bool dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// The strides torch.empty_like(t) gives (preserve_format): t's own when t is
// dense, else torch's infer_dense_strides (TensorIterator's order: dims by
// stride, stride-0 dims kept in place, ties broken by size).
Strides empty_like_strides(const Tensor& t) {
  if (dense(t)) return t.strides();
  const int64_t n = t.dim();
  std::vector<int64_t> perm(static_cast<size_t>(n));  // innermost first
  for (int64_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  // -1: dim0 goes inside dim1, 1: outside, 0: ambiguous.
  auto should_swap = [&](int64_t dim0, int64_t dim1) {
    const int64_t s0 = t.stride(dim0), s1 = t.stride(dim1);
    if (s0 == 0 || s1 == 0) return 0;
    if (s0 != s1) return s0 < s1 ? -1 : 1;
    return t.size(dim0) > t.size(dim1) ? 1 : 0;
  };
  for (int64_t i = 1; i < n; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      const int comparison = should_swap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  Strides strides(static_cast<size_t>(n));
  int64_t next = 1;
  for (int64_t d : perm) {
    strides[d] = next;
    next *= std::max<int64_t>(t.size(d), 1);
  }
  return strides;
}

// empty_laid_out / zeros_laid_out.
Tensor laid_out(const Shape& shape, DType dtype, const Tensor& like, SdpaLayout layout,
                bool zeroed) {
  const int64_t n = static_cast<int64_t>(shape.size());
  bool follow = layout == SdpaLayout::kLikeInputs && like.dim() == n && n >= 2;
  for (int64_t d = 0; follow && d < n - 1; ++d) follow = like.size(d) == shape[d];
  Strides strides;
  if (follow) {
    strides = empty_like_strides(like);
    if (like.size(-1) != shape.back()) {
      // Another last dim (Ev != E): like's dims in that order (outermost
      // first, ties in dim order), packed.
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t d = 0; d < n; ++d) order[d] = d;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
      int64_t next = 1;
      for (int64_t i = n; i-- > 0;) {
        strides[order[i]] = next;
        next *= std::max<int64_t>(shape[order[i]], 1);
      }
    }
    // The kernels write rows of the last dim contiguous.
    follow = shape.back() == 1 || strides.back() == 1;
  }
  if (!follow) return zeroed ? Tensor::zeros(shape, dtype) : Tensor::empty(shape, dtype);
  int64_t span = 1;  // elements from the first to past the last
  for (int64_t d = 0; d < n; ++d) {
    if (shape[d] == 0) return Tensor::empty(shape, dtype);
    span += (shape[d] - 1) * strides[d];
  }
  Tensor buffer = zeroed ? Tensor::zeros({span}, dtype) : Tensor::empty({span}, dtype);
  void* data = buffer.raw_data();
  return Tensor::from_blob(data, shape, strides, dtype,
                           std::make_shared<Tensor>(std::move(buffer)));
}

}  // namespace

Tensor empty_laid_out(const Shape& shape, DType dtype, const Tensor& like, SdpaLayout layout) {
  return laid_out(shape, dtype, like, layout, /*zeroed=*/false);
}

Tensor zeros_laid_out(const Shape& shape, DType dtype, const Tensor& like, SdpaLayout layout) {
  return laid_out(shape, dtype, like, layout, /*zeroed=*/true);
}

void fill_offsets(std::vector<int64_t>& offsets, const Tensor& t, const Shape& out_lead,
                  int64_t head_group) {
  const int64_t nd = static_cast<int64_t>(out_lead.size());
  const int64_t t_nd = t.dim() - 2;
  // The stride in t of each output leading dim: 0 where t broadcasts it.
  Dims step(static_cast<size_t>(nd), 0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t td = d - (nd - t_nd);
    if (td >= 0 && t.shape()[td] != 1) step[d] = t.strides()[td];
  }
  offsets.assign(static_cast<size_t>(shape_numel(out_lead)), 0);
  Dims index(static_cast<size_t>(nd), 0);
  for (size_t n = 0; n < offsets.size(); ++n) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t i = (d == nd - 1 && head_group > 1) ? index[d] / head_group : index[d];
      off += i * step[d];
    }
    offsets[n] = off;
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++index[d] < out_lead[d]) break;
      index[d] = 0;
    }
  }
}

std::vector<int64_t> matrix_offsets(const Tensor& t, const Shape& out_lead, int64_t head_group) {
  std::vector<int64_t> offsets;
  fill_offsets(offsets, t, out_lead, head_group);
  return offsets;
}

void fill_matrix_operand(kernels::MatrixOperand& m, const Tensor& t, const Shape& out_lead,
                         int64_t head_group) {
  m.base = t.raw_data();
  fill_offsets(m.offsets, t, out_lead, head_group);
  m.row_stride = t.stride(-2);
  m.col_stride = t.stride(-1);
  m.dtype = t.dtype();
}

kernels::MatrixOperand matrix_operand(const Tensor& t, const Shape& out_lead, int64_t head_group) {
  kernels::MatrixOperand m;
  fill_matrix_operand(m, t, out_lead, head_group);
  return m;
}

PreparedSdpa prepare_sdpa(const Tensor& q, const Tensor& k, const Tensor& v,
                          const SdpaOptions& options, const char* fn) {
  PreparedSdpa prepared;
  prepare_sdpa(prepared, q, k, v, options, fn);
  return prepared;
}

void prepare_sdpa(PreparedSdpa& prepared, const Tensor& q, const Tensor& k, const Tensor& v,
                  const SdpaOptions& options, const char* fn) {
  check_defined(q, fn, "query");
  check_defined(k, fn, "key");
  check_defined(v, fn, "value");
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, fn,
            ": query, key and value must have at least 2 dimensions [..., L, E], got query ",
            shape_str(q.shape()), ", key ", shape_str(k.shape()), ", value ", shape_str(v.shape()));
  // bfloat16 comes here only for the fused forward (ops/sdpa_bfloat16.h).
  if (q.dtype() != DType::kBFloat16) check_floating(q, fn, "query");
  QKV_CHECK_TYPE(k.dtype() == q.dtype() && v.dtype() == q.dtype(), fn,
                 ": query, key and value must have the same dtype, got query ",
                 dtype_name(q.dtype()), ", key ", dtype_name(k.dtype()), ", value ",
                 dtype_name(v.dtype()));
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  QKV_CHECK(k.size(-1) == E, fn, ": key's last dim must equal query's E = ", E, ", got key ",
            shape_str(k.shape()), " for query ", shape_str(q.shape()));
  QKV_CHECK(v.size(-2) == S, fn, ": value must have as many positions as key (S = ", S,
            "), got value ", shape_str(v.shape()), " for key ", shape_str(k.shape()));
  QKV_CHECK(L > 0, fn, ": query sequence is empty (L = 0) in query ", shape_str(q.shape()));
  QKV_CHECK(S > 0, fn, ": key/value sequence is empty (S = 0) in key ", shape_str(k.shape()),
            "; with no keys there is nothing to attend to");
  QKV_CHECK(E > 0 && Ev > 0, fn, ": head dims must be positive, got query ", shape_str(q.shape()),
            " and value ", shape_str(v.shape()));
  QKV_CHECK(options.dropout_p >= 0.0 && options.dropout_p < 1.0, fn,
            ": dropout_p must be in [0, 1), got ", options.dropout_p);
  QKV_CHECK(!(options.attn_mask.defined() && options.causal != CausalMask::kNone), fn,
            ": attn_mask must not be set together with is_causal (as torch); fold the causal mask "
            "into attn_mask (see causal_mask()) or drop one of them");
  if (options.scale) {
    QKV_CHECK(std::isfinite(*options.scale), fn, ": scale must be finite, got ", *options.scale);
  }

  // Leading dims: batch dims broadcast; heads must match unless GQA groups them.
  Shape out_lead;
  int64_t head_group = 1;
  const Shape q_lead = leading(q), k_lead = leading(k), v_lead = leading(v);
  if (options.enable_gqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3) {
    const int64_t H = q.size(-3), Hkv = k.size(-3);
    QKV_CHECK(v.size(-3) == Hkv, fn, ": key and value must have the same number of heads, got key ",
              shape_str(k.shape()), " and value ", shape_str(v.shape()));
    QKV_CHECK(Hkv > 0 && H % Hkv == 0, fn, ": with enable_gqa the key/value heads (", Hkv,
              ") must divide the query heads (", H, "), got query ", shape_str(q.shape()),
              " and key ", shape_str(k.shape()));
    head_group = H / Hkv;
    auto batch = [](const Shape& s) { return Shape(s.begin(), s.end() - 1); };
    out_lead = broadcast_shapes(batch(q_lead), batch(k_lead), fn);
    out_lead = broadcast_shapes(out_lead, batch(v_lead), fn);
    out_lead.push_back(H);
  } else {
    out_lead = broadcast_shapes(q_lead, k_lead, "scaled_dot_product_attention (query vs key)");
    out_lead = broadcast_shapes(out_lead, v_lead, "scaled_dot_product_attention (value)");
  }

  Shape weights_shape = out_lead;
  weights_shape.push_back(L);
  weights_shape.push_back(S);
  Shape out_shape = out_lead;
  out_shape.push_back(L);
  out_shape.push_back(Ev);

  kernels::SdpaProblem& p = prepared.problem;
  // Everything optional starts absent: `prepared` may hold an earlier call.
  p.mask.base = nullptr;
  p.keep.base = nullptr;
  p.dropout_p = 0.0;
  p.dropout_seed = 0;
  p.alibi_slopes = nullptr;
  p.output = p.weights = nullptr;
  p.output_offsets.clear();
  p.output_row_stride = 0;
  p.lse = nullptr;
  prepared.mask = Tensor();
  prepared.keep = Tensor();
  p.problems = shape_numel(out_lead);
  p.L = L;
  p.S = S;
  p.E = E;
  p.Ev = Ev;
  fill_matrix_operand(p.q, q, out_lead);
  fill_matrix_operand(p.k, k, out_lead, head_group);
  fill_matrix_operand(p.v, v, out_lead, head_group);
  p.scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(E));
  p.causal = options.causal;
  QKV_CHECK(options.window_left >= -1 && options.window_right >= -1, fn,
            ": window_left and window_right must be >= 0, or -1 for unbounded, got ",
            options.window_left, " and ", options.window_right);
  p.window_left = options.window_left;
  p.window_right = options.window_right;
  p.heads = out_lead.empty() ? 1 : out_lead.back();
  if (!options.alibi_slopes.empty()) {
    QKV_CHECK(q.dim() >= 3 && static_cast<int64_t>(options.alibi_slopes.size()) == p.heads, fn,
              ": alibi_slopes needs one slope per query head (H = ", p.heads, " in query ",
              shape_str(q.shape()), "), got ", options.alibi_slopes.size());
    for (double slope : options.alibi_slopes)
      QKV_CHECK(std::isfinite(slope), fn, ": alibi_slopes must be finite, got ", slope);
    p.alibi_slopes = options.alibi_slopes.data();
  }
  QKV_CHECK(options.softcap >= 0.0 && std::isfinite(options.softcap), fn,
            ": softcap must be a finite value >= 0 (0 = off), got ", options.softcap);
  p.softcap = options.softcap;
  p.dtype = q.dtype();
  p.bf16_products = q.dtype() == DType::kBFloat16 ||
                    (q.dtype() == DType::kFloat32 && options.precision != Precision::kFloat32);

  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    QKV_CHECK_TYPE(m.dtype() == DType::kBool || m.dtype() == q.dtype(), fn,
                   ": attn_mask must be bool or have the query's dtype ", dtype_name(q.dtype()),
                   ", got ", dtype_name(m.dtype()));
    QKV_CHECK(m.dim() >= 1, fn, ": attn_mask must have at least 1 dimension, got a scalar");
    const Shape b = broadcast_shapes(
        m.shape(), weights_shape,
        "scaled_dot_product_attention: attn_mask does not broadcast to the weights");
    QKV_CHECK(b == weights_shape, fn, ": attn_mask of shape ", shape_str(m.shape()),
              " does not broadcast to the attention weights' shape ", shape_str(weights_shape));
    if (m.dtype() != DType::kBool) check_mask_values(m, fn, "attn_mask");
    prepared.mask = m.expand(weights_shape);
    fill_matrix_operand(p.mask, prepared.mask, out_lead);
  }

  if (options.dropout_p > 0.0) {
    if (options.dropout_mask.defined()) {
      QKV_CHECK_TYPE(options.dropout_mask.dtype() == DType::kBool, fn,
                     ": dropout_mask must be bool (True = keep), got ",
                     dtype_name(options.dropout_mask.dtype()));
      const Shape b = broadcast_shapes(
          options.dropout_mask.shape(), weights_shape,
          "scaled_dot_product_attention: dropout_mask does not broadcast to the weights");
      QKV_CHECK(b == weights_shape, fn, ": dropout_mask of shape ",
                shape_str(options.dropout_mask.shape()), " does not broadcast to ",
                shape_str(weights_shape));
      prepared.keep = options.dropout_mask.expand(weights_shape);
      fill_matrix_operand(p.keep, prepared.keep, out_lead);
    }
    p.dropout_p = options.dropout_p;
  }
  prepared.out_lead = out_lead;
  prepared.out_shape = out_shape;
  prepared.weights_shape = weights_shape;
  prepared.head_group = head_group;
}

bool use_fused_kernel(const Tensor& q, const SdpaOptions& options, const char* fn) {
  // The fused kernels handle float32; float64 is the reference's.
  const bool fused = options.backend == SdpaBackend::kFused ||
                     (options.backend == SdpaBackend::kAuto && q.dtype() == DType::kFloat32);
  QKV_CHECK_TYPE(!fused || q.dtype() == DType::kFloat32, fn,
                 ": the fused kernel computes float32 only, got ", dtype_name(q.dtype()),
                 "; use backend kReference or kAuto for float64");
  return fused;
}

}  // namespace qkv
