// The compiled half of qkv.optim (python/qkv/optim.py gives it torch's
// signatures): SGD, Adam and AdamW updating numpy arrays in place,
// clip_grad_norm_, the warmup-cosine schedule, and cross_entropy with its
// backward (the loss the optimizers are tested with).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "qkv/loss.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "qkv/optim/sgd.h"

namespace qkv::python {

namespace {

// A Tensor over the memory of a writeable, C-contiguous float32/float64 numpy
// array, so that C++ updates change the array itself. It keeps the array alive.
Tensor wrap_in_place(py::handle obj, const char* function, const std::string& name) {
  const std::string what = std::string(function) + "(): " + name;
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(what + " must be a numpy array (updated in place), got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  py::array array = py::reinterpret_borrow<py::array>(obj);
  DType dtype;
  if (array.dtype().is(py::dtype::of<float>()))
    dtype = DType::kFloat32;
  else if (array.dtype().is(py::dtype::of<double>()))
    dtype = DType::kFloat64;
  else
    throw py::type_error(what + " must be float32 or float64, got " +
                         std::string(py::str(array.dtype())));
  if (!(array.flags() & py::array::c_style) || !array.writeable())
    throw py::value_error(what +
                          " must be a writeable C-contiguous array (it is updated in place)");
  Shape shape(array.shape(), array.shape() + array.ndim());
  auto* keep = new py::object(array);
  std::shared_ptr<void> owner(keep, [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  return Tensor::from_blob(array.mutable_data(), shape, contiguous_strides(shape), dtype,
                           std::move(owner));
}

// (name, array) pairs -> parameters over the arrays' memory, with zero gradients.
std::vector<nn::Parameter> parameters_of(
    const std::vector<std::pair<std::string, py::object>>& params, const char* function) {
  std::vector<nn::Parameter> out;
  for (const auto& [name, array] : params) {
    Tensor value = wrap_in_place(array, function, "parameter '" + name + "'");
    out.push_back({name, value, Tensor::zeros(value.shape(), value.dtype())});
  }
  return out;
}

// Either numpy arrays (name, array) or a module's own parameters.
std::vector<nn::Parameter> parameters_of(py::handle params, const char* function) {
  if (py::isinstance<ModuleParameters>(params)) return params.cast<ModuleParameters&>().params;
  return parameters_of(params.cast<std::vector<std::pair<std::string, py::object>>>(), function);
}

// An optimizer over numpy arrays, where step(grads) copies the gradients in
// first, or over a module's parameters, where step() reads their buffers.
class PyOptimizer {
 public:
  PyOptimizer(std::unique_ptr<optim::Optimizer> impl, const char* kind, bool over_module)
      : impl_(std::move(impl)), kind_(kind), over_module_(over_module) {}

  // grads empty: the parameters belong to a module whose backward filled
  // their gradient buffers already (ModuleParameters).
  void step(const std::vector<py::object>& grads) {
    const auto& params = impl_->parameters();
    const std::string fn = std::string(kind_) + ".step";
    if (grads.empty() && over_module_) {
      py::gil_scoped_release release;
      impl_->step();
      return;
    }
    if (over_module_)
      throw py::value_error(fn +
                            "(): this optimizer updates a module from the gradients its "
                            "backward accumulated; call step() without gradients");
    if (grads.size() != params.size())
      throw py::value_error(fn + "(): expected " + std::to_string(params.size()) +
                            " gradients (one per parameter), got " + std::to_string(grads.size()));
    for (size_t i = 0; i < grads.size(); ++i) {
      const std::string what = "grads[" + std::to_string(i) + "]";
      const Tensor g = to_tensor(grads[i], fn.c_str(), what.c_str(), Accept::kFloat);
      if (g.shape() != params[i].value.shape())
        throw py::value_error(fn + "(): " + what + " must have the shape " +
                              shape_str(params[i].value.shape()) + " of parameter '" +
                              params[i].name + "', got " + shape_str(g.shape()));
      Tensor dst = params[i].grad;
      dst.copy_from(g);
    }
    py::gil_scoped_release release;
    impl_->step();
  }

  optim::Optimizer& impl() { return *impl_; }

 private:
  std::unique_ptr<optim::Optimizer> impl_;
  const char* kind_;
  bool over_module_;
};

CrossEntropyOptions ce_options(int64_t ignore_index, double label_smoothing,
                               const std::string& reduction) {
  CrossEntropyOptions o{.ignore_index = ignore_index, .label_smoothing = label_smoothing};
  if (reduction == "mean")
    o.reduction = Reduction::kMean;
  else if (reduction == "sum")
    o.reduction = Reduction::kSum;
  else if (reduction == "none")
    o.reduction = Reduction::kNone;
  else
    throw py::value_error("cross_entropy(): reduction must be 'mean', 'sum' or 'none', got '" +
                          reduction + "'");
  return o;
}

}  // namespace

void bind_optim(py::module_& m) {
  // A list of (name, array) pairs, or ModuleParameters.
  using Params = py::object;
  py::class_<PyOptimizer> cls(m, "Optimizer");
  cls.def("step", &PyOptimizer::step, py::arg("grads") = std::vector<py::object>{})
      .def_property(
          "lr", [](PyOptimizer& self) { return self.impl().lr(); },
          [](PyOptimizer& self, double lr) { self.impl().set_lr(lr); })
      .def("state_dict",
           [](PyOptimizer& self) { return state_dict_to_python(self.impl().state_dict()); })
      .def(
          "load_state_dict",
          [](PyOptimizer& self, const py::dict& state) {
            self.impl().load_state_dict(state_dict_from_python(state, "Optimizer.load_state_dict"));
          },
          py::arg("state_dict"));

  m.def(
      "make_sgd",
      [](const Params& params, double lr, double momentum, double dampening, double weight_decay,
         bool nesterov) {
        return PyOptimizer(
            std::make_unique<optim::SGD>(parameters_of(params, "SGD"),
                                         optim::SgdOptions{.lr = lr,
                                                           .momentum = momentum,
                                                           .dampening = dampening,
                                                           .weight_decay = weight_decay,
                                                           .nesterov = nesterov}),
            "SGD", py::isinstance<ModuleParameters>(params));
      },
      py::arg("params"), py::arg("lr"), py::arg("momentum"), py::arg("dampening"),
      py::arg("weight_decay"), py::arg("nesterov"));

  m.def(
      "make_adam",
      [](const Params& params, double lr, double beta1, double beta2, double eps,
         double weight_decay, bool amsgrad, bool decoupled) {
        const char* kind = decoupled ? "AdamW" : "Adam";
        const optim::AdamOptions o{.lr = lr,
                                   .beta1 = beta1,
                                   .beta2 = beta2,
                                   .eps = eps,
                                   .weight_decay = weight_decay,
                                   .amsgrad = amsgrad};
        std::vector<nn::Parameter> p = parameters_of(params, kind);
        std::unique_ptr<optim::Optimizer> impl;
        if (decoupled)
          impl = std::make_unique<optim::AdamW>(std::move(p), o);
        else
          impl = std::make_unique<optim::Adam>(std::move(p), o);
        return PyOptimizer(std::move(impl), kind, py::isinstance<ModuleParameters>(params));
      },
      py::arg("params"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
      py::arg("weight_decay"), py::arg("amsgrad"), py::arg("decoupled"));

  m.def(
      "clip_grad_norm_",
      [](const std::vector<py::object>& grads, double max_norm, double norm_type,
         bool error_if_nonfinite) {
        std::vector<Tensor> tensors;
        for (size_t i = 0; i < grads.size(); ++i)
          tensors.push_back(
              wrap_in_place(grads[i], "clip_grad_norm_", "grads[" + std::to_string(i) + "]"));
        py::gil_scoped_release release;
        return optim::clip_grad_norm(tensors, max_norm, norm_type, error_if_nonfinite);
      },
      py::arg("grads"), py::arg("max_norm"), py::arg("norm_type"), py::arg("error_if_nonfinite"));

  m.def(
      "warmup_cosine_lr",
      [](int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr) {
        return optim::WarmupCosineSchedule({.base_lr = base_lr,
                                            .warmup_steps = warmup_steps,
                                            .total_steps = total_steps,
                                            .min_lr = min_lr})
            .lr(step);
      },
      py::arg("step"), py::arg("base_lr"), py::arg("warmup_steps"), py::arg("total_steps"),
      py::arg("min_lr"));

  m.def(
      "cross_entropy",
      [](py::handle input, const std::vector<int64_t>& target, int64_t ignore_index,
         double label_smoothing, const std::string& reduction) {
        const Tensor x = to_tensor(input, "cross_entropy", "input", Accept::kFloat);
        return to_numpy(
            cross_entropy(x, target, ce_options(ignore_index, label_smoothing, reduction)));
      },
      py::arg("input"), py::arg("target"), py::arg("ignore_index"), py::arg("label_smoothing"),
      py::arg("reduction"));

  m.def(
      "cross_entropy_backward",
      [](py::handle grad_output, py::handle input, const std::vector<int64_t>& target,
         int64_t ignore_index, double label_smoothing, const std::string& reduction) {
        const char* fn = "cross_entropy_backward";
        const Tensor x = to_tensor(input, fn, "input", Accept::kFloat);
        const Tensor g = to_tensor(grad_output, fn, "grad_output", Accept::kFloat);
        Tensor grad = Tensor::zeros(x.shape(), x.dtype());
        cross_entropy_backward(g, x, target, ce_options(ignore_index, label_smoothing, reduction),
                               grad);
        return to_numpy(grad);
      },
      py::arg("grad_output"), py::arg("input"), py::arg("target"), py::arg("ignore_index"),
      py::arg("label_smoothing"), py::arg("reduction"));
}

}  // namespace qkv::python
