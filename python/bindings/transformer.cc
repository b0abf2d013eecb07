// The compiled half of qkv.nn's Transformer blocks (python/qkv/nn/transformer.py
// gives them torch's signatures, key order and docstrings): the encoder and
// decoder layers, their stacks and nn.Transformer.
#include "qkv/nn/transformer.h"

#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "module_calls.h"
#include "module_common.h"
#include "options.h"

namespace qkv::python {

namespace {

using nn::LayerNorm;
using nn::MultiheadAttention;
using nn::Transformer;
using nn::TransformerDecoder;
using nn::TransformerDecoderLayer;
using nn::TransformerEncoder;
using nn::TransformerEncoderLayer;
using nn::TransformerLayerOptions;

// A layer's options (TransformerLayerOptions) or nn.Transformer's
// (TransformerOptions, which adds the layer counts after nhead), in the order
// of the Python classes' signatures: d_model, nhead, [num_encoder_layers,
// num_decoder_layers,] dim_feedforward, dropout, activation, layer_norm_eps,
// batch_first, norm_first, bias, dtype.
template <class LayerOptions>
LayerOptions layer_options(Options& a) {
  LayerOptions o;
  o.d_model = a.integer("d_model");
  o.nhead = a.integer("nhead");
  if constexpr (requires { o.num_encoder_layers; }) {
    o.num_encoder_layers = a.integer("num_encoder_layers");
    o.num_decoder_layers = a.integer("num_decoder_layers");
  }
  o.dim_feedforward = a.integer("dim_feedforward");
  o.dropout = a.number("dropout");
  o.activation = activation_from_string(a.string("activation"));
  o.layer_norm_eps = a.number("layer_norm_eps");
  o.batch_first = a.flag("batch_first");
  o.norm_first = a.flag("norm_first");
  o.bias = a.flag("bias");
  o.dtype = a.dtype("dtype");
  return o;
}

// Module((its options..., generator)): a layer kind or nn.Transformer.
template <class Module, class ModuleOptions>
auto module_init(const char* module) {
  return init_from_tuple(module, [](Options& a) {
    const auto o = layer_options<ModuleOptions>(a);
    return Module(o, a.generator("generator"));
  });
}

// Read-only views of the constructor arguments, shared by both layer kinds.
template <class Layer, class PyClass>
void def_layer_options(PyClass& cls) {
  cls.def_property_readonly("d_model", [](const Layer& s) { return s.options().d_model; })
      .def_property_readonly("nhead", [](const Layer& s) { return s.options().nhead; })
      .def_property_readonly("dim_feedforward",
                             [](const Layer& s) { return s.options().dim_feedforward; })
      .def_property_readonly("dropout", [](const Layer& s) { return s.options().dropout; })
      .def_property_readonly(
          "activation",
          [](const Layer& s) { return std::string(activation_name(s.options().activation)); })
      .def_property_readonly("layer_norm_eps",
                             [](const Layer& s) { return s.options().layer_norm_eps; })
      .def_property_readonly("batch_first", [](const Layer& s) { return s.options().batch_first; })
      .def_property_readonly("norm_first", [](const Layer& s) { return s.options().norm_first; })
      .def_property_readonly("bias", [](const Layer& s) { return s.options().bias; })
      .def_property_readonly(
          "dtype", [](const Layer& s) { return std::string(dtype_name(s.options().dtype)); });
}

// A layer kind: its constructor, forward on the tuple `Call` reads, the
// options read back, train/eval and state_dict. -> the class, for the rest.
template <class Layer, class Call>
py::class_<Layer, nn::Module> bind_layer(py::module_& m, const char* module, const char* forward) {
  py::class_<Layer, nn::Module> cls(m, module);
  cls.def(module_init<Layer, TransformerLayerOptions>(module), py::arg("args"));
  def_forward<Call>(cls, forward);
  def_layer_options<Layer>(cls);
  def_set_generator(cls);
  return cls;
}

void bind_encoder_layer(py::module_& m) {
  bind_layer<TransformerEncoderLayer, EncoderCall<nn::TransformerEncoderLayerForward>>(
      m, "TransformerEncoderLayer", "TransformerEncoderLayer.forward")
      .def_property_readonly("self_attn", [](TransformerEncoderLayer& s) -> MultiheadAttention& {
        return s.self_attn();
      });
}

void bind_decoder_layer(py::module_& m) {
  bind_layer<TransformerDecoderLayer, DecoderCall<nn::TransformerDecoderLayerForward>>(
      m, "TransformerDecoderLayer", "TransformerDecoderLayer.forward")
      .def_property_readonly(
          "self_attn",
          [](TransformerDecoderLayer& s) -> MultiheadAttention& { return s.self_attn(); })
      .def_property_readonly(
          "multihead_attn",
          [](TransformerDecoderLayer& s) -> MultiheadAttention& { return s.multihead_attn(); });
}

// A stack of copies of a layer: Stack(layer, num_layers, norm or None),
// forward on the tuple `Call` reads, layer(i), num_layers, the optional final
// norm (views into the stack, which they keep alive), train/eval, state_dict.
template <class Stack, class Layer, class Call>
void bind_stack(py::module_& m, const char* module, const char* forward) {
  py::class_<Stack, nn::Module> cls(m, module);
  cls.def(py::init([](const Layer& layer, int64_t num_layers, const LayerNorm* norm) {
            return Stack(layer, num_layers, norm ? std::optional<LayerNorm>(*norm) : std::nullopt);
          }),
          py::arg("layer"), py::arg("num_layers"), py::arg("norm"))
      .def_property_readonly("num_layers",
                             [](Stack& s) { return static_cast<int64_t>(s.layers().size()); })
      .def(
          "layer",
          [module](Stack & s, int64_t i) -> auto& {
            const auto n = static_cast<int64_t>(s.layers().size());
            if (i < -n || i >= n)
              throw py::index_error(std::string(module) + ".layers: index " + std::to_string(i) +
                                    " is out of range for " + std::to_string(n) + " layers");
            return s.layers()[static_cast<size_t>(i < 0 ? i + n : i)];
          },
          py::arg("index"), py::return_value_policy::reference_internal)
      .def_property_readonly(
          "norm", [](Stack& s) -> LayerNorm* { return s.norm() ? &*s.norm() : nullptr; });
  def_forward<Call>(cls, forward);
  def_set_generator(cls);
}

void bind_transformer_model(py::module_& m) {
  py::class_<Transformer, nn::Module> cls(m, "Transformer");
  cls.def(module_init<Transformer, nn::TransformerOptions>("Transformer"), py::arg("args"))
      .def_static(
          "generate_square_subsequent_mask",
          [](int64_t sz, py::handle dtype) {
            return to_numpy(Transformer::generate_square_subsequent_mask(
                sz,
                parse_float_dtype(dtype, "Transformer.generate_square_subsequent_mask", "dtype")));
          },
          py::arg("sz"), py::arg("dtype"))
      .def_property_readonly("encoder",
                             [](Transformer& s) -> TransformerEncoder& { return s.encoder(); })
      .def_property_readonly("decoder",
                             [](Transformer& s) -> TransformerDecoder& { return s.decoder(); })
      .def_property_readonly("d_model", [](const Transformer& s) { return s.options().d_model; })
      .def_property_readonly("nhead", [](const Transformer& s) { return s.options().nhead; })
      .def_property_readonly("batch_first",
                             [](const Transformer& s) { return s.options().batch_first; })
      .def_property_readonly(
          "dtype", [](const Transformer& s) { return std::string(dtype_name(s.options().dtype)); });
  def_forward<TransformerCall>(cls, "Transformer.forward");
  def_set_generator(cls);
}

}  // namespace

void bind_transformer(py::module_& m) {
  bind_encoder_layer(m);
  bind_decoder_layer(m);
  bind_stack<TransformerEncoder, TransformerEncoderLayer,
             EncoderCall<nn::TransformerEncoderForward>>(m, "TransformerEncoder",
                                                         "TransformerEncoder.forward");
  bind_stack<TransformerDecoder, TransformerDecoderLayer,
             DecoderCall<nn::TransformerDecoderForward>>(m, "TransformerDecoder",
                                                         "TransformerDecoder.forward");
  bind_transformer_model(m);
}

}  // namespace qkv::python
