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

using MhaBackward = ModuleBackward<MultiheadAttention, nn::MultiheadAttentionRecord>;
using EncoderLayerBackward =
    ModuleBackward<TransformerEncoderLayer, nn::TransformerEncoderLayerRecord>;
using DecoderLayerBackward =
    ModuleBackward<TransformerDecoderLayer, nn::TransformerDecoderLayerRecord>;
using EncoderBackward = ModuleBackward<TransformerEncoder, nn::TransformerEncoderRecord>;

// name -> a copy of the gradient buffer (names as the state_dict's).
py::dict grads_to_python(const std::vector<nn::Parameter>& params) {
  py::dict out;
  for (const nn::Parameter& p : params) out[p.name.c_str()] = to_numpy(p.grad.clone());
  return out;
}

// named_grads() and zero_grad() for a module with parameters() and zero_grad().
template <class Module, class PyClass>
void def_grads(PyClass& cls) {
  cls.def("named_grads", [](Module& self) { return grads_to_python(self.parameters()); })
      .def("zero_grad", [](Module& self) { self.zero_grad(); })
      .def("_parameter_list", [](Module& self) { return ModuleParameters{self.parameters()}; });
}

// Dropout draws from a generator shared with Python only in training mode with p > 0.
template <class Module>
bool draws_random(Module& m, double p) {
  return m.is_training() && p > 0.0;
}

void bind_mha(py::module_& m) {
  constexpr const char* kForward = "MultiheadAttention.forward_with_grad";
  py::class_<MhaBackward>(m, "MultiheadAttentionBackward")
      .def(
          "__call__",
          [](MhaBackward& self, py::handle grad_output) {
            const nn::MultiheadAttentionInputGradients g = self.run(grad_output);
            return py::make_tuple(to_numpy(g.query), to_numpy(g.key), to_numpy(g.value));
          },
          py::arg("grad_output"));
  auto cls = py::reinterpret_borrow<py::class_<MultiheadAttention>>(m.attr("MultiheadAttention"));
  cls.def(
      "forward_with_grad",
      [](py::object self, py::handle args) {
        MultiheadAttention& mha = self.cast<MultiheadAttention&>();
        Options a(args, kForward);
        const MultiheadAttentionCall c = read_mha_call(a);
        MhaBackward backward{self, &mha, {}, "MultiheadAttention.backward"};
        const nn::MultiheadAttentionOutput out = without_gil_unless(
            draws_random(mha, mha.options().dropout),
            [&] { return mha.forward(c.query, c.key, c.value, c.args, &backward.record); });
        return py::make_tuple(to_numpy(out.output), to_numpy_or_none(out.weights),
                              std::move(backward));
      },
      py::arg("args"));
  def_grads<MultiheadAttention>(cls);
}

void bind_encoder_layer(py::module_& m) {
  constexpr const char* kForward = "TransformerEncoderLayer.forward_with_grad";
  py::class_<EncoderLayerBackward>(m, "TransformerEncoderLayerBackward")
      .def(
          "__call__",
          [](EncoderLayerBackward& self, py::handle grad_output) {
            return to_numpy(self.run(grad_output));
          },
          py::arg("grad_output"));
  auto cls = py::reinterpret_borrow<py::class_<TransformerEncoderLayer>>(
      m.attr("TransformerEncoderLayer"));
  cls.def(
      "forward_with_grad",
      [](py::object self, py::handle args) {
        TransformerEncoderLayer& layer = self.cast<TransformerEncoderLayer&>();
        Options a(args, kForward);
        const EncoderLayerCall c = read_encoder_layer_call(a);
        EncoderLayerBackward backward{self, &layer, {}, "TransformerEncoderLayer.backward"};
        const Tensor out = without_gil_unless(draws_random(layer, layer.options().dropout), [&] {
          return layer.forward(c.src, c.args, &backward.record);
        });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("args"));
  def_grads<TransformerEncoderLayer>(cls);
}

void bind_decoder_layer(py::module_& m) {
  constexpr const char* kForward = "TransformerDecoderLayer.forward_with_grad";
  py::class_<DecoderLayerBackward>(m, "TransformerDecoderLayerBackward")
      .def(
          "__call__",
          [](DecoderLayerBackward& self, py::handle grad_output) {
            const nn::TransformerDecoderInputGradients g = self.run(grad_output);
            return py::make_tuple(to_numpy(g.tgt), to_numpy(g.memory));
          },
          py::arg("grad_output"));
  auto cls = py::reinterpret_borrow<py::class_<TransformerDecoderLayer>>(
      m.attr("TransformerDecoderLayer"));
  cls.def(
      "forward_with_grad",
      [](py::object self, py::handle args) {
        TransformerDecoderLayer& layer = self.cast<TransformerDecoderLayer&>();
        Options a(args, kForward);
        const DecoderLayerCall c = read_decoder_call<nn::TransformerDecoderLayerForward>(a);
        DecoderLayerBackward backward{self, &layer, {}, "TransformerDecoderLayer.backward"};
        const Tensor out = without_gil_unless(draws_random(layer, layer.options().dropout), [&] {
          return layer.forward(c.tgt, c.memory, c.args, &backward.record);
        });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("args"));
  def_grads<TransformerDecoderLayer>(cls);
}

void bind_encoder(py::module_& m) {
  constexpr const char* kForward = "TransformerEncoder.forward_with_grad";
  py::class_<EncoderBackward>(m, "TransformerEncoderBackward")
      .def(
          "__call__",
          [](EncoderBackward& self, py::handle grad_output) {
            return to_numpy(self.run(grad_output));
          },
          py::arg("grad_output"));
  auto cls = py::reinterpret_borrow<py::class_<TransformerEncoder>>(m.attr("TransformerEncoder"));
  cls.def(
      "forward_with_grad",
      [](py::object self, py::handle args) {
        TransformerEncoder& enc = self.cast<TransformerEncoder&>();
        Options a(args, kForward);
        const EncoderCall c = read_encoder_call(a);
        EncoderBackward backward{self, &enc, {}, "TransformerEncoder.backward"};
        const Tensor out =
            without_gil_unless(draws_random(enc, enc.layers().front().options().dropout),
                               [&] { return enc.forward(c.src, c.args, &backward.record); });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("args"));
  def_grads<TransformerEncoder>(cls);
}

}  // namespace

void bind_module_backward(py::module_& m) {
  py::class_<ModuleParameters>(m, "ModuleParameters")
      .def("__len__", [](const ModuleParameters& self) { return self.params.size(); });
  bind_mha(m);
  bind_encoder_layer(m);
  bind_decoder_layer(m);
  bind_encoder(m);
}

}  // namespace qkv::python
