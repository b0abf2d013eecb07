// Adam and AdamW with torch 2.13's single-tensor update (_single_tensor_adam).
// Each torch tensor op is one rounding in the parameter's dtype; scalars are
// computed in float64 (Python floats there) and rounded to the dtype where
// torch hands them to a kernel. `add(alpha=)` and `lerp` are fused
// multiply-adds, as in torch's vectorised CPU kernels. The update of a span
// is kernels/simd/adam_span.h; float32 runs the active instruction set's
// copy (kernels/row_kernels.h).
#include "qkv/optim/adam.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "kernels/row_kernels.h"
#include "kernels/simd/adam_span.h"
#include "optim/optimizer_util.h"
#include "tensor/parallel_threshold.h"

namespace qkv::optim {

namespace {

// Scalars of one step, as torch derives them from the hyperparameters.
struct AdamScalars {
  double lr, weight_decay;
  double beta1, beta2, eps;
  int64_t step;
  bool decoupled, amsgrad;
};

using kernels::AdamConstants;

template <class T>
AdamConstants<T> adam_constants(const AdamScalars& s) {
  const double bias_correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  return {.neg_step_size = static_cast<T>(-(s.lr / bias_correction1)),
          .bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2)),
          .decay = static_cast<T>(1.0 - s.lr * s.weight_decay),
          .weight_decay = static_cast<T>(s.weight_decay),
          .one_minus_beta1 = static_cast<T>(1.0 - s.beta1),
          .beta2 = static_cast<T>(s.beta2),
          .one_minus_beta2 = static_cast<T>(1.0 - s.beta2),
          .eps = static_cast<T>(s.eps),
          .has_weight_decay = s.weight_decay != 0.0,
          .decoupled = s.decoupled,
          .amsgrad = s.amsgrad};
}

template <class T>
void adam_update(T* param, const T* grad_in, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                 int64_t n, const AdamScalars& s) {
  const AdamConstants<T> c = adam_constants<T>(s);
  const kernels::RowKernels& isa = kernels::active_row_kernels();
  // Blocks of elements go to the threads (for large parameters): each element
  // is updated on its own, so the thread count changes nothing in the result.
  constexpr int64_t kBlock = 1 << 13;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= qkv::detail::kParallelMinElements && \
                                              !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    T* max = max_exp_avg_sq == nullptr ? nullptr : max_exp_avg_sq + begin;
    if constexpr (std::is_same_v<T, float>)
      isa.adam(param + begin, grad_in + begin, exp_avg + begin, exp_avg_sq + begin, max, count, c);
    else
      kernels::simd::adam_span_for(param + begin, grad_in + begin, exp_avg + begin,
                                   exp_avg_sq + begin, max, count, c);
  }
}

}  // namespace

Adam::Adam(std::vector<nn::Parameter> params, const AdamOptions& options)
    : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<nn::Parameter> params, const AdamOptions& options, bool decoupled,
           const char* kind)
    : Optimizer(std::move(params), options.lr, kind), options_(options), decoupled_(decoupled) {
  QKV_CHECK(std::isfinite(options.eps) && options.eps >= 0.0, kind, ": invalid epsilon value ",
            options.eps);
  QKV_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0, kind,
            ": invalid beta parameter at index 0: ", options.beta1, " (must be in [0, 1))");
  QKV_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0, kind,
            ": invalid beta parameter at index 1: ", options.beta2, " (must be in [0, 1))");
  QKV_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0, kind,
            ": invalid weight_decay value ", options.weight_decay);
  state_.resize(params_.size());
}

AdamW::AdamW(std::vector<nn::Parameter> params, const AdamOptions& options)
    : Adam(std::move(params), options, true, "AdamW") {}

int64_t Adam::step_count() const { return state_.empty() ? 0 : state_[0].step; }

void Adam::step() {
  options_.lr = lr_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = params_[i];
    State& st = state_[i];
    if (st.step == 0) {  // torch's lazy state initialisation
      st.exp_avg = Tensor::zeros(p.value.shape(), p.value.dtype());
      st.exp_avg_sq = Tensor::zeros(p.value.shape(), p.value.dtype());
      if (options_.amsgrad) st.max_exp_avg_sq = Tensor::zeros(p.value.shape(), p.value.dtype());
    }
    ++st.step;
    const AdamScalars s{
        lr_,        options_.weight_decay, options_.beta1, options_.beta2, options_.eps, st.step,
        decoupled_, options_.amsgrad};
    const int64_t n = p.value.numel();
    auto run = [&]<class T>(T*) {
      adam_update<T>(p.value.data<T>(), p.grad.data<T>(), st.exp_avg.data<T>(),
                     st.exp_avg_sq.data<T>(),
                     options_.amsgrad ? st.max_exp_avg_sq.data<T>() : nullptr, n, s);
    };
    if (p.value.dtype() == DType::kFloat64)
      run(static_cast<double*>(nullptr));
    else
      run(static_cast<float*>(nullptr));
  }
}

std::map<std::string, Tensor> Adam::state_dict() const {
  std::map<std::string, Tensor> state;
  for (size_t i = 0; i < params_.size(); ++i) {
    const State& st = state_[i];
    if (st.step == 0) continue;
    const std::string& name = params_[i].name;
    state[name + ".step"] = Tensor::full({}, static_cast<double>(st.step), DType::kFloat64);
    state[name + ".exp_avg"] = st.exp_avg.clone();
    state[name + ".exp_avg_sq"] = st.exp_avg_sq.clone();
    if (options_.amsgrad) state[name + ".max_exp_avg_sq"] = st.max_exp_avg_sq.clone();
  }
  return state;
}

void Adam::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::set<std::string> used;
  std::vector<State> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter& p = params_[i];
    const Tensor* step = detail::find_entry(state, p, "step", used);
    const Tensor* exp_avg = detail::find_entry(state, p, "exp_avg", used);
    const Tensor* exp_avg_sq = detail::find_entry(state, p, "exp_avg_sq", used);
    const Tensor* max_sq = detail::find_entry(state, p, "max_exp_avg_sq", used);
    if (!step && !exp_avg && !exp_avg_sq && !max_sq) continue;  // no step taken yet
    QKV_CHECK(step && exp_avg && exp_avg_sq && (max_sq != nullptr) == options_.amsgrad, kind_,
              "::load_state_dict: the state of \"", p.name, "\" must have \"", p.name,
              ".step\", \"", p.name, ".exp_avg\", \"", p.name, ".exp_avg_sq\"",
              options_.amsgrad ? " and \"" + p.name + ".max_exp_avg_sq\" (amsgrad)"
                               : " and no max_exp_avg_sq (amsgrad is off)",
              ", got only some of them");
    QKV_CHECK(step->defined() && step->numel() == 1, kind_, "::load_state_dict: \"", p.name,
              ".step\" must hold one number");
    const double count = step->reshape({1}).at({0});
    QKV_CHECK(count >= 1 && count == std::floor(count) && count < 9.0e15, kind_,
              "::load_state_dict: \"", p.name, ".step\" must be a whole number >= 1, got ", count);
    State& st = loaded[i];
    st.step = static_cast<int64_t>(count);
    st.exp_avg = detail::load_buffer(*exp_avg, p, "exp_avg", kind_);
    st.exp_avg_sq = detail::load_buffer(*exp_avg_sq, p, "exp_avg_sq", kind_);
    if (max_sq) st.max_exp_avg_sq = detail::load_buffer(*max_sq, p, "max_exp_avg_sq", kind_);
  }
  detail::check_no_unexpected(state, used, kind_);
  state_ = std::move(loaded);
}

}  // namespace qkv::optim
