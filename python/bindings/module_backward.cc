// Training entry points of qkv.nn's modules: forward with a record, backward
// with an output gradient (python/qkv/nn gives them their Python names).
//
//   out, weights, grad_fn = mha.forward_with_grad(q, k, v, ...)
//   grad_q, grad_k, grad_v = grad_fn(grad_out)   # parameter gradients accumulate in mha
//   mha.named_grads()                            # {"in_proj_weight": array, ...}
//
// The methods are added to the classes bound in multihead_attention.cc and
// transformer.cc, so bind_module_backward must run after those.
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_calls.h"
#include "module_common.h"
#include "options.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/transformer.h"

namespace qkv::python {

namespace {

using nn::MultiheadAttention;
using nn::TransformerDecoderLayer;
using nn::TransformerEncoder;
using nn::TransformerEncoderLayer;

// The backward of one forward_with_grad call: the record it saved and the
// module (kept alive) whose gradient buffers the backward adds into. Calling
// it twice adds the parameter gradients twice.
template <class Module, class Record>
struct ModuleBackward {
  py::object owner;  // the Python object of `module`
  Module* module = nullptr;
  Record record;
  std::string function;  // "MultiheadAttention.backward" in errors

  // Runs module->backward on grad_output without the GIL (it draws nothing).
  auto run(py::handle grad_output) {
    const Tensor go = to_tensor(grad_output, function.c_str(), "grad_output", Accept::kFloat);
    py::gil_scoped_release release;
    return module->backward(go, record);
  }
};

// name -> a copy of the gradient buffer (names as the state_dict's).
py::dict grads_to_python(const std::vector<nn::Parameter>& params) {
  py::dict out;
  for (const nn::Parameter& p : params) out[p.name.c_str()] = to_numpy(p.grad.clone());
  return out;
}

// A backward's input gradients for Python, one array or a tuple of them.
py::object gradients_result(const Tensor& grad) { return to_numpy(grad); }
py::object gradients_result(const nn::MultiheadAttentionInputGradients& g) {
  return py::make_tuple(to_numpy(g.query), to_numpy(g.key), to_numpy(g.value));
}
py::object gradients_result(const nn::TransformerDecoderInputGradients& g) {
  return py::make_tuple(to_numpy(g.tgt), to_numpy(g.memory));
}

// forward_with_grad's result: the forward's, then the backward.
py::tuple with_backward(const Tensor& output, py::object backward) {
  return py::make_tuple(to_numpy(output), std::move(backward));
}
py::tuple with_backward(const nn::MultiheadAttentionOutput& out, py::object backward) {
  return py::make_tuple(to_numpy(out.output), to_numpy_or_none(out.weights), std::move(backward));
}

// The training methods of the class `module` bound earlier: forward_with_grad
// (on the tuple `Call` reads, as forward), returning a <module>Backward whose
// call gives the input gradients; named_grads(), zero_grad() and
// _parameter_list().
template <class Module, class Record, class Call>
void bind_training(py::module_& m, const std::string& module) {
  using Backward = ModuleBackward<Module, Record>;
  py::class_<Backward>(m, (module + "Backward").c_str())
      .def(
          "__call__",
          [](Backward& self, py::handle grad_output) {
            return gradients_result(self.run(grad_output));
          },
          py::arg("grad_output"));
  auto cls = py::reinterpret_borrow<py::class_<Module>>(m.attr(module.c_str()));
  cls.def(
         "forward_with_grad",
         [function = module + ".forward_with_grad", backward_name = module + ".backward"](
             py::object self, py::handle args) {
           Module& target = self.cast<Module&>();
           Options a(args, function.c_str());
           const Call c = Call::read(a);
           Backward backward{self, &target, {}, backward_name};
           const auto out = without_gil_unless(draws_random(target),
                                               [&] { return c.forward(target, &backward.record); });
           return with_backward(out, py::cast(std::move(backward)));
         },
         py::arg("args"))
      .def("named_grads", [](Module& self) { return grads_to_python(self.parameters()); })
      .def("zero_grad", [](Module& self) { self.zero_grad(); })
      .def("_parameter_list", [](Module& self) { return ModuleParameters{self.parameters()}; });
}

}  // namespace

void bind_module_backward(py::module_& m) {
  py::class_<ModuleParameters>(m, "ModuleParameters")
      .def("__len__", [](const ModuleParameters& self) { return self.params.size(); });
  bind_training<MultiheadAttention, nn::MultiheadAttentionRecord, MultiheadAttentionCall>(
      m, "MultiheadAttention");
  bind_training<TransformerEncoderLayer, nn::TransformerEncoderLayerRecord,
                EncoderCall<nn::TransformerEncoderLayerForward>>(m, "TransformerEncoderLayer");
  bind_training<TransformerDecoderLayer, nn::TransformerDecoderLayerRecord,
                DecoderCall<nn::TransformerDecoderLayerForward>>(m, "TransformerDecoderLayer");
  bind_training<TransformerEncoder, nn::TransformerEncoderRecord,
                EncoderCall<nn::TransformerEncoderForward>>(m, "TransformerEncoder");
}

}  // namespace qkv::python
