// Backward of the embedding lookup (a scatter-add into the table's gradient)
// and of dropout (given the keep-mask its forward drew).
#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

template <class T>
void scatter_add_rows(const Tensor& dy, const std::vector<int64_t>& ids, int64_t skip,
                      Tensor& grad_weight) {
  const int64_t d = dy.size(-1);
  const T* src = dy.data<T>();
  T* dst = grad_weight.data<T>();
  const int64_t row_stride = grad_weight.stride(0), col_stride = grad_weight.stride(1);
  // Forward: memcpy(dst + i * row_bytes, src + ids[i] * row_bytes, row_bytes)
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == skip) continue;
    T* row = dst + ids[i] * row_stride;
    for (int64_t j = 0; j < d; ++j) row[j * col_stride] += src[i * d + j];
  }
}

template <class T>
void dropout_typed(const Tensor& x, Tensor& y, Tensor& keep, double p, Generator& gen) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  bool* kept = keep.data<bool>();
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    kept[i] = !(gen.uniform() < p);
    out[i] = kept[i] ? in[i] * keep_scale : T(0);
  }
}

}  // namespace

void embedding_backward(const Tensor& grad_output, const std::vector<int64_t>& ids,
                        const Shape& shape, const Tensor& weight, Tensor grad_weight,
                        std::optional<int64_t> padding_idx) {
  const char* fn = "embedding_backward";
  check_floating(weight, fn, "weight");
  check_dim(weight, 2, fn, "weight", "[num_embeddings, embedding_dim]");
  QKV_CHECK(shape_numel(shape) == static_cast<int64_t>(ids.size()), fn, ": ", ids.size(),
            " ids do not form the shape ", shape_str(shape));
  const int64_t n = weight.size(0), d = weight.size(1);
  Shape out_shape = shape;
  out_shape.push_back(d);
  check_grad_output(grad_output, out_shape, weight, fn);
  check_defined(grad_weight, fn, "grad_weight");
  check_grad(grad_weight, weight, fn, "grad_weight");
  for (size_t i = 0; i < ids.size(); ++i)
    QKV_CHECK(ids[i] >= 0 && ids[i] < n, fn, ": id ", ids[i], " at flat index ", i,
              " is out of range [0, ", n, ") of the table ", shape_str(weight.shape()));
  int64_t skip = -1;  // no id equals −1
  if (padding_idx) {
    QKV_CHECK(*padding_idx >= -n && *padding_idx < n, fn, ": padding_idx ", *padding_idx,
              " must be in [-", n, ", ", n, ")");
    skip = *padding_idx < 0 ? *padding_idx + n : *padding_idx;
  }
  const Tensor dy = grad_output.contiguous();
  if (weight.dtype() == DType::kFloat64)
    scatter_add_rows<double>(dy, ids, skip, grad_weight);
  else
    scatter_add_rows<float>(dy, ids, skip, grad_weight);
}

DropoutResult dropout_forward(const Tensor& x, double p, bool training, Generator* gen) {
  check_floating(x, "dropout_forward", "input");
  QKV_CHECK(p >= 0.0 && p <= 1.0, "dropout_forward: probability p must be in [0, 1], got ", p);
  // The same cases, in the same order, as dropout(): only the p in (0, 1) case draws.
  if (!training || p == 0.0) return {x, Tensor()};
  if (p == 1.0)
    return {Tensor::zeros(x.shape(), x.dtype()), Tensor::zeros(x.shape(), DType::kBool)};
  Generator& g = gen ? *gen : default_generator();
  const Tensor xc = x.contiguous();
  DropoutResult r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(x.shape(), DType::kBool)};
  if (x.dtype() == DType::kFloat64)
    dropout_typed<double>(xc, r.output, r.keep_mask, p, g);
  else
    dropout_typed<float>(xc, r.output, r.keep_mask, p, g);
  return r;
}

void dropout_backward(const Tensor& grad_output, const Tensor& keep_mask, double p,
                      Tensor grad_input) {
  const char* fn = "dropout_backward";
  check_floating(grad_output, fn, "grad_output");
  QKV_CHECK(p >= 0.0 && p <= 1.0, fn, ": probability p must be in [0, 1], got ", p);
  check_defined(grad_input, fn, "grad_input");
  check_grad(grad_input, grad_output, fn, "grad_input");
  if (keep_mask.defined()) {
    QKV_CHECK_TYPE(keep_mask.dtype() == DType::kBool, fn, ": keep_mask must be bool, got ",
                   dtype_name(keep_mask.dtype()));
    QKV_CHECK(keep_mask.shape() == grad_output.shape(), fn, ": keep_mask must have shape ",
              shape_str(grad_output.shape()), ", got ", shape_str(keep_mask.shape()));
  }
  // Forward: out[i] = kept[i] ? in[i] * keep_scale : T(0); keep_scale rounded to the dtype
  const double keep_scale = p == 1.0 ? 0.0
                            : grad_output.dtype() == DType::kFloat32
                                ? static_cast<float>(1.0 / (1.0 - p))
                                : 1.0 / (1.0 - p);
  if (keep_mask.defined() && grad_output.is_contiguous() && grad_input.is_contiguous() &&
      keep_mask.is_contiguous()) {
    // The same arithmetic in place, without float64 copies of the tensors.
    auto run = [&]<class T>(T*) {
      const T* g = grad_output.data<T>();
      const bool* kept = keep_mask.data<bool>();
      T* gi = grad_input.data<T>();
      const int64_t n = grad_output.numel();
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements)
      for (int64_t i = 0; i < n; ++i)
        gi[i] = static_cast<T>(static_cast<double>(gi[i]) +
                               (kept[i] ? static_cast<double>(g[i]) * keep_scale : 0.0));
    };
    if (grad_output.dtype() == DType::kFloat64)
      run(static_cast<double*>(nullptr));
    else
      run(static_cast<float*>(nullptr));
    return;
  }
  std::vector<double> g = grad_output.to_vector();
  if (keep_mask.defined()) {
    const std::vector<double> kept = keep_mask.to_vector();
    for (size_t i = 0; i < g.size(); ++i) g[i] = kept[i] != 0.0 ? g[i] * keep_scale : 0.0;
  }
  add_to_grad(grad_input, g);
}

}  // namespace qkv
