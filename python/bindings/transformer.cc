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

// The layer options in the order of the Python classes' signatures: d_model,
// nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
// norm_first, bias, dtype. (Transformer reads its layer counts in between.)
TransformerLayerOptions layer_options(Options& a) {
  TransformerLayerOptions o;
  o.d_model = a.integer("d_model");
  o.nhead = a.integer("nhead");
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

// Layer((layer options..., generator)).
template <class Layer>
auto layer_init(const char* module) {
  return [module](py::handle args) {
    Options a(args, module);
    const TransformerLayerOptions o = layer_options(a);
    Generator* generator = a.generator("generator");
    a.done();
    return Layer(o, generator);
  };
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

// Dropout draws random numbers (from a generator shared with Python) only
// in training mode with p > 0.
bool draws_random(bool training, const TransformerLayerOptions& o) {
  return training && o.dropout > 0.0;
}

void bind_encoder_layer(py::module_& m) {
  constexpr const char* kForward = "TransformerEncoderLayer.forward";
  py::class_<TransformerEncoderLayer> cls(m, "TransformerEncoderLayer");
  cls.def(py::init(layer_init<TransformerEncoderLayer>("TransformerEncoderLayer")), py::arg("args"))
      .def(
          "forward",
          [](TransformerEncoderLayer& self, py::handle args) {
            Options a(args, kForward);
            const EncoderLayerCall c = read_encoder_layer_call(a);
            return to_numpy(without_gil_unless(draws_random(self.is_training(), self.options()),
                                               [&] { return self.forward(c.src, c.args); }));
          },
          py::arg("args"))
      .def_property_readonly("self_attn", [](TransformerEncoderLayer& s) -> MultiheadAttention& {
        return s.self_attn();
      });
  def_layer_options<TransformerEncoderLayer>(cls);
  def_train_eval<TransformerEncoderLayer>(cls);
  def_state_dict<TransformerEncoderLayer>(cls, "TransformerEncoderLayer.load_state_dict");
}

void bind_decoder_layer(py::module_& m) {
  constexpr const char* kForward = "TransformerDecoderLayer.forward";
  py::class_<TransformerDecoderLayer> cls(m, "TransformerDecoderLayer");
  cls.def(py::init(layer_init<TransformerDecoderLayer>("TransformerDecoderLayer")), py::arg("args"))
      .def(
          "forward",
          [](TransformerDecoderLayer& self, py::handle args) {
            Options a(args, kForward);
            const DecoderLayerCall c = read_decoder_call<nn::TransformerDecoderLayerForward>(a);
            return to_numpy(
                without_gil_unless(draws_random(self.is_training(), self.options()),
                                   [&] { return self.forward(c.tgt, c.memory, c.args); }));
          },
          py::arg("args"))
      .def_property_readonly(
          "self_attn",
          [](TransformerDecoderLayer& s) -> MultiheadAttention& { return s.self_attn(); })
      .def_property_readonly(
          "multihead_attn",
          [](TransformerDecoderLayer& s) -> MultiheadAttention& { return s.multihead_attn(); });
  def_layer_options<TransformerDecoderLayer>(cls);
  def_train_eval<TransformerDecoderLayer>(cls);
  def_state_dict<TransformerDecoderLayer>(cls, "TransformerDecoderLayer.load_state_dict");
}

// layers[i], len(layers) and the optional final norm of a stack; the returned
// objects are views into the stack (they keep it alive).
template <class Stack, class PyClass>
void def_stack_parts(PyClass& cls, const char* module) {
  cls.def_property_readonly("num_layers",
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
}

void bind_encoder(py::module_& m) {
  constexpr const char* kForward = "TransformerEncoder.forward";
  py::class_<TransformerEncoder> cls(m, "TransformerEncoder");
  cls.def(py::init(
              [](const TransformerEncoderLayer& layer, int64_t num_layers, const LayerNorm* norm) {
                return TransformerEncoder(layer, num_layers,
                                          norm ? std::optional<LayerNorm>(*norm) : std::nullopt);
              }),
          py::arg("encoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none())
      .def(
          "forward",
          [](TransformerEncoder& self, py::handle args) {
            Options a(args, kForward);
            const EncoderCall c = read_encoder_call(a);
            const bool random = draws_random(self.is_training(), self.layers().front().options());
            return to_numpy(
                without_gil_unless(random, [&] { return self.forward(c.src, c.args); }));
          },
          py::arg("args"));
  def_stack_parts<TransformerEncoder>(cls, "TransformerEncoder");
  def_train_eval<TransformerEncoder>(cls);
  def_state_dict<TransformerEncoder>(cls, "TransformerEncoder.load_state_dict");
}

void bind_decoder(py::module_& m) {
  constexpr const char* kForward = "TransformerDecoder.forward";
  py::class_<TransformerDecoder> cls(m, "TransformerDecoder");
  cls.def(py::init(
              [](const TransformerDecoderLayer& layer, int64_t num_layers, const LayerNorm* norm) {
                return TransformerDecoder(layer, num_layers,
                                          norm ? std::optional<LayerNorm>(*norm) : std::nullopt);
              }),
          py::arg("decoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none())
      .def(
          "forward",
          [](TransformerDecoder& self, py::handle args) {
            Options a(args, kForward);
            const DecoderStackCall c = read_decoder_call<nn::TransformerDecoderForward>(a);
            const bool random = draws_random(self.is_training(), self.layers().front().options());
            return to_numpy(
                without_gil_unless(random, [&] { return self.forward(c.tgt, c.memory, c.args); }));
          },
          py::arg("args"));
  def_stack_parts<TransformerDecoder>(cls, "TransformerDecoder");
  def_train_eval<TransformerDecoder>(cls);
  def_state_dict<TransformerDecoder>(cls, "TransformerDecoder.load_state_dict");
}

void bind_transformer_model(py::module_& m) {
  constexpr const char* kForward = "Transformer.forward";
  py::class_<Transformer> cls(m, "Transformer");
  cls.def(py::init([](py::handle args) {
            Options a(args, "Transformer");
            nn::TransformerOptions o;
            o.d_model = a.integer("d_model");
            o.nhead = a.integer("nhead");
            o.num_encoder_layers = a.integer("num_encoder_layers");
            o.num_decoder_layers = a.integer("num_decoder_layers");
            o.dim_feedforward = a.integer("dim_feedforward");
            o.dropout = a.number("dropout");
            o.activation = activation_from_string(a.string("activation"));
            o.layer_norm_eps = a.number("layer_norm_eps");
            o.batch_first = a.flag("batch_first");
            o.norm_first = a.flag("norm_first");
            o.bias = a.flag("bias");
            o.dtype = a.dtype("dtype");
            Generator* generator = a.generator("generator");
            a.done();
            return Transformer(o, generator);
          }),
          py::arg("args"))
      // (src, tgt, src_mask, tgt_mask, memory_mask, src_key_padding_mask,
      //  tgt_key_padding_mask, memory_key_padding_mask, src_is_causal,
      //  tgt_is_causal, memory_is_causal)
      .def(
          "forward",
          [](Transformer& self, py::handle args) {
            Options a(args, kForward);
            const Tensor s = sequence_field(a, "src");
            const Tensor t = sequence_field(a, "tgt");
            nn::TransformerForward f;
            f.src_mask = mask_field(a, "src_mask");
            f.tgt_mask = mask_field(a, "tgt_mask");
            f.memory_mask = mask_field(a, "memory_mask");
            f.src_key_padding_mask = mask_field(a, "src_key_padding_mask");
            f.tgt_key_padding_mask = mask_field(a, "tgt_key_padding_mask");
            f.memory_key_padding_mask = mask_field(a, "memory_key_padding_mask");
            f.src_is_causal = a.optional_flag("src_is_causal");
            f.tgt_is_causal = a.optional_flag("tgt_is_causal");
            f.memory_is_causal = a.flag("memory_is_causal");
            a.done();
            const bool random = self.is_training() && self.options().dropout > 0.0;
            return to_numpy(without_gil_unless(random, [&] { return self.forward(s, t, f); }));
          },
          py::arg("args"))
      .def_static(
          "generate_square_subsequent_mask",
          [](int64_t sz, py::handle dtype) {
            return to_numpy(Transformer::generate_square_subsequent_mask(
                sz,
                parse_float_dtype(dtype, "Transformer.generate_square_subsequent_mask", "dtype")));
          },
          py::arg("sz"), py::arg("dtype") = py::none())
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
  def_train_eval<Transformer>(cls);
  def_state_dict<Transformer>(cls, "Transformer.load_state_dict");
}

}  // namespace

void bind_transformer(py::module_& m) {
  bind_encoder_layer(m);
  bind_decoder_layer(m);
  bind_encoder(m);
  bind_decoder(m);
  bind_transformer_model(m);
}

}  // namespace qkv::python
