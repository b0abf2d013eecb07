#include "ops/backward_util.h"

#include "ops/checks.h"

namespace qkv {

void check_grad(const Tensor& grad, const Tensor& input, const char* fn, const char* arg) {
  if (!grad.defined()) return;
  QKV_CHECK_TYPE(grad.dtype() == input.dtype(), fn, ": ", arg, " must have dtype ",
                 dtype_name(input.dtype()), " like its input, got ", dtype_name(grad.dtype()));
  QKV_CHECK(grad.shape() == input.shape(), fn, ": ", arg, " must have its input's shape ",
            shape_str(input.shape()), ", got ", shape_str(grad.shape()));
}

void check_grad_output(const Tensor& grad_output, const Shape& shape, const Tensor& like,
                       const char* fn) {
  check_floating(grad_output, fn, "grad_output");
  QKV_CHECK_TYPE(grad_output.dtype() == like.dtype(), fn, ": grad_output must have dtype ",
                 dtype_name(like.dtype()), ", got ", dtype_name(grad_output.dtype()));
  QKV_CHECK(grad_output.shape() == shape, fn, ": grad_output must have the output's shape ",
            shape_str(shape), ", got ", shape_str(grad_output.shape()));
}

namespace {
template <class T>
void add_typed(Tensor& grad, std::span<const double> contribution) {
  T* base = grad.data<T>();
  for_each_offset(grad.shape(), grad.strides(), [&](int64_t i, int64_t off) {
    base[off] = static_cast<T>(static_cast<double>(base[off]) + contribution[i]);
  });
}
}  // namespace

void add_to_grad(Tensor& grad, std::span<const double> contribution) {
  QKV_CHECK(static_cast<int64_t>(contribution.size()) == grad.numel(),
            "add_to_grad: ", contribution.size(), " values for a gradient of shape ",
            shape_str(grad.shape()));
  if (grad.dtype() == DType::kFloat64)
    add_typed<double>(grad, contribution);
  else
    add_typed<float>(grad, contribution);
}

void add_to_grad(Tensor& grad, const Tensor& contribution) {
  const std::vector<double> values = contribution.to_vector();
  add_to_grad(grad, values);
}

std::vector<double> sum_to_shape(std::span<const double> full, const Shape& full_shape,
                                 const Shape& shape) {
  if (shape == full_shape) return {full.begin(), full.end()};
  std::vector<double> out(static_cast<size_t>(shape_numel(shape)), 0.0);
  // A stride-0 view of `out` walks it in step with the full shape.
  const Tensor target = Tensor::zeros(shape, DType::kFloat64).expand(full_shape);
  for_each_offset(target.shape(), target.strides(),
                  [&](int64_t i, int64_t off) { out[off] += full[i]; });
  return out;
}

}  // namespace qkv
