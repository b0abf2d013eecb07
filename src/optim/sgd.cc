// SGD with torch 2.13's single-tensor update. Each torch tensor op is one
// rounding in the parameter's dtype; `a.add(b, alpha=s)` is a fused
// multiply-add, as in torch's vectorised CPU kernel.
#include "qkv/optim/sgd.h"

#include <cmath>
#include <set>

#include "optim/optimizer_util.h"

namespace qkv::optim {

namespace {

template <class T>
void sgd_update(T* param, const T* grad_in, T* buf, bool first_step, int64_t n, const SgdOptions& o,
                double lr) {
  const T weight_decay = static_cast<T>(o.weight_decay), momentum = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-lr);
  for (int64_t i = 0; i < n; ++i) {
    T g = grad_in[i];
    // grad = grad.add(param, alpha=weight_decay)
    if (o.weight_decay != 0.0) g = std::fma(param[i], weight_decay, g);
    if (o.momentum != 0.0) {
      // buf = clone(grad) at the first step, else buf.mul_(momentum).add_(grad, alpha=1 -
      // dampening)
      buf[i] = first_step ? g : std::fma(g, keep, buf[i] * momentum);
      // nesterov: grad = grad.add(buf, alpha=momentum); else grad = buf
      g = o.nesterov ? std::fma(buf[i], momentum, g) : buf[i];
    }
    // param.add_(grad, alpha=-lr)
    param[i] = std::fma(g, neg_lr, param[i]);
  }
}

}  // namespace

SGD::SGD(std::vector<nn::Parameter> params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  QKV_CHECK(std::isfinite(options.momentum) && options.momentum >= 0.0,
            "SGD: invalid momentum value ", options.momentum);
  QKV_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0,
            "SGD: invalid weight_decay value ", options.weight_decay);
  QKV_CHECK(std::isfinite(options.dampening), "SGD: invalid dampening value ", options.dampening);
  QKV_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
            "SGD: nesterov momentum requires a momentum and zero dampening, got momentum ",
            options.momentum, " and dampening ", options.dampening);
  momentum_buffers_.resize(params_.size());
}

void SGD::step() {
  options_.lr = lr_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = params_[i];
    Tensor& buf = momentum_buffers_[i];
    const bool first_step = !buf.defined();
    if (options_.momentum != 0.0 && first_step)
      buf = Tensor::empty(p.value.shape(), p.value.dtype());
    const int64_t n = p.value.numel();
    if (p.value.dtype() == DType::kFloat64)
      sgd_update<double>(p.value.data<double>(), p.grad.data<double>(),
                         buf.defined() ? buf.data<double>() : nullptr, first_step, n, options_,
                         lr_);
    else
      sgd_update<float>(p.value.data<float>(), p.grad.data<float>(),
                        buf.defined() ? buf.data<float>() : nullptr, first_step, n, options_, lr_);
  }
}

std::map<std::string, Tensor> SGD::state_dict() const {
  std::map<std::string, Tensor> state;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined())
      state[params_[i].name + ".momentum_buffer"] = momentum_buffers_[i].clone();
  return state;
}

void SGD::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::set<std::string> used;
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (const Tensor* t = detail::find_entry(state, params_[i], "momentum_buffer", used))
      buffers[i] = detail::load_buffer(*t, params_[i], "momentum_buffer", kind_);
  detail::check_no_unexpected(state, used, kind_);
  momentum_buffers_ = std::move(buffers);
}

}  // namespace qkv::optim
