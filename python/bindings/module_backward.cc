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
#include "module_common.h"
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

Tensor mask_arg(py::handle obj, const char* function, const char* name) {
  return to_optional_tensor(obj, function, name, Accept::kFloatOrBool);
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
      [](py::object self, py::handle query, py::handle key, py::handle value,
         py::handle key_padding_mask, bool need_weights, py::handle attn_mask,
         bool average_attn_weights, bool is_causal) {
        MultiheadAttention& mha = self.cast<MultiheadAttention&>();
        const Tensor q = to_tensor(query, kForward, "query", Accept::kFloat);
        const Tensor k = to_tensor(key, kForward, "key", Accept::kFloat);
        const Tensor v = to_tensor(value, kForward, "value", Accept::kFloat);
        const nn::MultiheadAttentionForward args{
            .key_padding_mask = mask_arg(key_padding_mask, kForward, "key_padding_mask"),
            .need_weights = need_weights,
            .attn_mask = mask_arg(attn_mask, kForward, "attn_mask"),
            .average_attn_weights = average_attn_weights,
            .is_causal = is_causal};
        MhaBackward backward{self, &mha, {}, "MultiheadAttention.backward"};
        const nn::MultiheadAttentionOutput out =
            without_gil_unless(draws_random(mha, mha.options().dropout),
                               [&] { return mha.forward(q, k, v, args, &backward.record); });
        return py::make_tuple(to_numpy(out.output), to_numpy_or_none(out.weights),
                              std::move(backward));
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("key_padding_mask") = py::none(),
      py::arg("need_weights") = false, py::arg("attn_mask") = py::none(),
      py::arg("average_attn_weights") = true, py::arg("is_causal") = false);
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
      [](py::object self, py::handle src, py::handle src_mask, py::handle src_key_padding_mask,
         bool is_causal) {
        TransformerEncoderLayer& layer = self.cast<TransformerEncoderLayer&>();
        const Tensor x = to_tensor(src, kForward, "src", Accept::kFloat);
        const nn::TransformerEncoderLayerForward args{
            .src_mask = mask_arg(src_mask, kForward, "src_mask"),
            .src_key_padding_mask =
                mask_arg(src_key_padding_mask, kForward, "src_key_padding_mask"),
            .is_causal = is_causal};
        EncoderLayerBackward backward{self, &layer, {}, "TransformerEncoderLayer.backward"};
        const Tensor out = without_gil_unless(draws_random(layer, layer.options().dropout), [&] {
          return layer.forward(x, args, &backward.record);
        });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("src"), py::arg("src_mask") = py::none(),
      py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = false);
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
      [](py::object self, py::handle tgt, py::handle memory, py::handle tgt_mask,
         py::handle memory_mask, py::handle tgt_key_padding_mask,
         py::handle memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
        TransformerDecoderLayer& layer = self.cast<TransformerDecoderLayer&>();
        const Tensor x = to_tensor(tgt, kForward, "tgt", Accept::kFloat);
        const Tensor mem = to_tensor(memory, kForward, "memory", Accept::kFloat);
        const nn::TransformerDecoderLayerForward args{
            .tgt_mask = mask_arg(tgt_mask, kForward, "tgt_mask"),
            .memory_mask = mask_arg(memory_mask, kForward, "memory_mask"),
            .tgt_key_padding_mask =
                mask_arg(tgt_key_padding_mask, kForward, "tgt_key_padding_mask"),
            .memory_key_padding_mask =
                mask_arg(memory_key_padding_mask, kForward, "memory_key_padding_mask"),
            .tgt_is_causal = tgt_is_causal,
            .memory_is_causal = memory_is_causal};
        DecoderLayerBackward backward{self, &layer, {}, "TransformerDecoderLayer.backward"};
        const Tensor out = without_gil_unless(draws_random(layer, layer.options().dropout), [&] {
          return layer.forward(x, mem, args, &backward.record);
        });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
      py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
      py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = false,
      py::arg("memory_is_causal") = false);
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
      [](py::object self, py::handle src, py::handle mask, py::handle src_key_padding_mask,
         std::optional<bool> is_causal) {
        TransformerEncoder& enc = self.cast<TransformerEncoder&>();
        const Tensor x = to_tensor(src, kForward, "src", Accept::kFloat);
        const nn::TransformerEncoderForward args{
            .mask = mask_arg(mask, kForward, "mask"),
            .src_key_padding_mask =
                mask_arg(src_key_padding_mask, kForward, "src_key_padding_mask"),
            .is_causal = is_causal};
        EncoderBackward backward{self, &enc, {}, "TransformerEncoder.backward"};
        const Tensor out =
            without_gil_unless(draws_random(enc, enc.layers().front().options().dropout),
                               [&] { return enc.forward(x, args, &backward.record); });
        return py::make_tuple(to_numpy(out), std::move(backward));
      },
      py::arg("src"), py::arg("mask") = py::none(), py::arg("src_key_padding_mask") = py::none(),
      py::arg("is_causal") = py::none());
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
