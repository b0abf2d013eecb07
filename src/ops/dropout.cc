// Dropout (torch.nn.functional.dropout): zero with probability p, scale the
// kept values by 1 / (1 - p) so that the expectation is unchanged.
#include <cmath>

#include "ops/checks.h"
#include "qkv/functional.h"

namespace qkv {

namespace {

template <class T>
void dropout_typed(const Tensor& x, Tensor& y, double p, Generator& gen) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    out[i] = gen.uniform() < p ? T(0) : in[i] * keep_scale;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_floating(x, "dropout", "input");
  QKV_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return Tensor::zeros(x.shape(), x.dtype());
  Generator& g = gen ? *gen : default_generator();
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.dtype() == DType::kFloat64)
    dropout_typed<double>(xc, y, p, g);
  else
    dropout_typed<float>(xc, y, p, g);
  return y;
}

}  // namespace qkv
