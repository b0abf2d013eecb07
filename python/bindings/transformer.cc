// The compiled half of qkv.nn's Transformer blocks (python/qkv/nn/transformer.py
// gives them torch's signatures, key order and docstrings): the encoder and
// decoder layers, their stacks and nn.Transformer.
#include "qkv/nn/transformer.h"

#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"

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

Tensor mask_arg(py::handle obj, const char* function, const char* name) {
  return to_optional_tensor(obj, function, name, Accept::kFloatOrBool);
}

Tensor sequence_arg(py::handle obj, const char* function, const char* name) {
  return to_tensor(obj, function, name, Accept::kFloat);
}

TransformerLayerOptions layer_options(const char* module, int64_t d_model, int64_t nhead,
                                      int64_t dim_feedforward, double dropout,
                                      const std::string& activation, double layer_norm_eps,
                                      bool batch_first, bool norm_first, bool bias,
                                      py::handle dtype) {
  return {.d_model = d_model,
          .nhead = nhead,
          .dim_feedforward = dim_feedforward,
          .dropout = dropout,
          .activation = activation_from_string(activation),
          .layer_norm_eps = layer_norm_eps,
          .batch_first = batch_first,
          .norm_first = norm_first,
          .bias = bias,
          .dtype = parse_float_dtype(dtype, module, "dtype")};
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
  cls.def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                      const std::string& activation, double layer_norm_eps, bool batch_first,
                      bool norm_first, bool bias, py::handle dtype, Generator* generator) {
            return TransformerEncoderLayer(
                layer_options("TransformerEncoderLayer", d_model, nhead, dim_feedforward, dropout,
                              activation, layer_norm_eps, batch_first, norm_first, bias, dtype),
                generator);
          }),
          py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048,
          py::arg("dropout") = 0.1, py::arg("activation") = "relu",
          py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("bias") = true, py::arg("dtype") = py::none(),
          py::arg("generator") = py::none())
      .def(
          "forward",
          [](TransformerEncoderLayer& self, py::handle src, py::handle src_mask,
             py::handle src_key_padding_mask, bool is_causal) {
            const Tensor x = sequence_arg(src, kForward, "src");
            const nn::TransformerEncoderLayerForward args{
                .src_mask = mask_arg(src_mask, kForward, "src_mask"),
                .src_key_padding_mask =
                    mask_arg(src_key_padding_mask, kForward, "src_key_padding_mask"),
                .is_causal = is_causal};
            return to_numpy(without_gil_unless(draws_random(self.is_training(), self.options()),
                                               [&] { return self.forward(x, args); }));
          },
          py::arg("src"), py::arg("src_mask") = py::none(),
          py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = false)
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
  cls.def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                      const std::string& activation, double layer_norm_eps, bool batch_first,
                      bool norm_first, bool bias, py::handle dtype, Generator* generator) {
            return TransformerDecoderLayer(
                layer_options("TransformerDecoderLayer", d_model, nhead, dim_feedforward, dropout,
                              activation, layer_norm_eps, batch_first, norm_first, bias, dtype),
                generator);
          }),
          py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048,
          py::arg("dropout") = 0.1, py::arg("activation") = "relu",
          py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("bias") = true, py::arg("dtype") = py::none(),
          py::arg("generator") = py::none())
      .def(
          "forward",
          [](TransformerDecoderLayer& self, py::handle tgt, py::handle memory, py::handle tgt_mask,
             py::handle memory_mask, py::handle tgt_key_padding_mask,
             py::handle memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
            const Tensor x = sequence_arg(tgt, kForward, "tgt");
            const Tensor mem = sequence_arg(memory, kForward, "memory");
            const nn::TransformerDecoderLayerForward args{
                .tgt_mask = mask_arg(tgt_mask, kForward, "tgt_mask"),
                .memory_mask = mask_arg(memory_mask, kForward, "memory_mask"),
                .tgt_key_padding_mask =
                    mask_arg(tgt_key_padding_mask, kForward, "tgt_key_padding_mask"),
                .memory_key_padding_mask =
                    mask_arg(memory_key_padding_mask, kForward, "memory_key_padding_mask"),
                .tgt_is_causal = tgt_is_causal,
                .memory_is_causal = memory_is_causal};
            return to_numpy(without_gil_unless(draws_random(self.is_training(), self.options()),
                                               [&] { return self.forward(x, mem, args); }));
          },
          py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
          py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
          py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = false,
          py::arg("memory_is_causal") = false)
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
          [](TransformerEncoder& self, py::handle src, py::handle mask,
             py::handle src_key_padding_mask, std::optional<bool> is_causal) {
            const Tensor x = sequence_arg(src, kForward, "src");
            const nn::TransformerEncoderForward args{
                .mask = mask_arg(mask, kForward, "mask"),
                .src_key_padding_mask =
                    mask_arg(src_key_padding_mask, kForward, "src_key_padding_mask"),
                .is_causal = is_causal};
            const bool random = draws_random(self.is_training(), self.layers().front().options());
            return to_numpy(without_gil_unless(random, [&] { return self.forward(x, args); }));
          },
          py::arg("src"), py::arg("mask") = py::none(),
          py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = py::none());
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
          [](TransformerDecoder& self, py::handle tgt, py::handle memory, py::handle tgt_mask,
             py::handle memory_mask, py::handle tgt_key_padding_mask,
             py::handle memory_key_padding_mask, std::optional<bool> tgt_is_causal,
             bool memory_is_causal) {
            const Tensor x = sequence_arg(tgt, kForward, "tgt");
            const Tensor mem = sequence_arg(memory, kForward, "memory");
            const nn::TransformerDecoderForward args{
                .tgt_mask = mask_arg(tgt_mask, kForward, "tgt_mask"),
                .memory_mask = mask_arg(memory_mask, kForward, "memory_mask"),
                .tgt_key_padding_mask =
                    mask_arg(tgt_key_padding_mask, kForward, "tgt_key_padding_mask"),
                .memory_key_padding_mask =
                    mask_arg(memory_key_padding_mask, kForward, "memory_key_padding_mask"),
                .tgt_is_causal = tgt_is_causal,
                .memory_is_causal = memory_is_causal};
            const bool random = draws_random(self.is_training(), self.layers().front().options());
            return to_numpy(without_gil_unless(random, [&] { return self.forward(x, mem, args); }));
          },
          py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
          py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
          py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = py::none(),
          py::arg("memory_is_causal") = false);
  def_stack_parts<TransformerDecoder>(cls, "TransformerDecoder");
  def_train_eval<TransformerDecoder>(cls);
  def_state_dict<TransformerDecoder>(cls, "TransformerDecoder.load_state_dict");
}

void bind_transformer_model(py::module_& m) {
  constexpr const char* kForward = "Transformer.forward";
  py::class_<Transformer> cls(m, "Transformer");
  cls.def(py::init([](int64_t d_model, int64_t nhead, int64_t num_encoder_layers,
                      int64_t num_decoder_layers, int64_t dim_feedforward, double dropout,
                      const std::string& activation, double layer_norm_eps, bool batch_first,
                      bool norm_first, bool bias, py::handle dtype, Generator* generator) {
            return Transformer({.d_model = d_model,
                                .nhead = nhead,
                                .num_encoder_layers = num_encoder_layers,
                                .num_decoder_layers = num_decoder_layers,
                                .dim_feedforward = dim_feedforward,
                                .dropout = dropout,
                                .activation = activation_from_string(activation),
                                .layer_norm_eps = layer_norm_eps,
                                .batch_first = batch_first,
                                .norm_first = norm_first,
                                .bias = bias,
                                .dtype = parse_float_dtype(dtype, "Transformer", "dtype")},
                               generator);
          }),
          py::arg("d_model") = 512, py::arg("nhead") = 8, py::arg("num_encoder_layers") = 6,
          py::arg("num_decoder_layers") = 6, py::arg("dim_feedforward") = 2048,
          py::arg("dropout") = 0.1, py::arg("activation") = "relu",
          py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
          py::arg("norm_first") = false, py::arg("bias") = true, py::arg("dtype") = py::none(),
          py::arg("generator") = py::none())
      .def(
          "forward",
          [](Transformer& self, py::handle src, py::handle tgt, py::handle src_mask,
             py::handle tgt_mask, py::handle memory_mask, py::handle src_key_padding_mask,
             py::handle tgt_key_padding_mask, py::handle memory_key_padding_mask,
             std::optional<bool> src_is_causal, std::optional<bool> tgt_is_causal,
             bool memory_is_causal) {
            const Tensor s = sequence_arg(src, kForward, "src");
            const Tensor t = sequence_arg(tgt, kForward, "tgt");
            const nn::TransformerForward args{
                .src_mask = mask_arg(src_mask, kForward, "src_mask"),
                .tgt_mask = mask_arg(tgt_mask, kForward, "tgt_mask"),
                .memory_mask = mask_arg(memory_mask, kForward, "memory_mask"),
                .src_key_padding_mask =
                    mask_arg(src_key_padding_mask, kForward, "src_key_padding_mask"),
                .tgt_key_padding_mask =
                    mask_arg(tgt_key_padding_mask, kForward, "tgt_key_padding_mask"),
                .memory_key_padding_mask =
                    mask_arg(memory_key_padding_mask, kForward, "memory_key_padding_mask"),
                .src_is_causal = src_is_causal,
                .tgt_is_causal = tgt_is_causal,
                .memory_is_causal = memory_is_causal};
            const bool random = self.is_training() && self.options().dropout > 0.0;
            return to_numpy(without_gil_unless(random, [&] { return self.forward(s, t, args); }));
          },
          py::arg("src"), py::arg("tgt"), py::arg("src_mask") = py::none(),
          py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(),
          py::arg("src_key_padding_mask") = py::none(),
          py::arg("tgt_key_padding_mask") = py::none(),
          py::arg("memory_key_padding_mask") = py::none(), py::arg("src_is_causal") = py::none(),
          py::arg("tgt_is_causal") = py::none(), py::arg("memory_is_causal") = false)
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
