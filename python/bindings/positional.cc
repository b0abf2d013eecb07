// The compiled half of qkv.nn.positional (python/qkv/nn/positional.py): the
// positional encodings of tutorial §3.4 — sinusoidal and learned tables,
// RoPE in both conventions, ALiBi and T5's bucketed relative position bias.
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "options.h"
#include "qkv/nn/positional_encoding.h"

namespace qkv::python {

namespace {

using nn::Alibi;
using nn::LearnedPositionalEncoding;
using nn::RelativePositionBias;
using nn::RopeStyle;
using nn::RotaryEmbedding;
using nn::SinusoidalPositionalEncoding;

RopeStyle parse_style(const std::string& style) {
  if (style == "half_split") return RopeStyle::kHalfSplit;
  if (style == "interleaved") return RopeStyle::kInterleaved;
  throw py::value_error(
      "RotaryEmbedding(): argument 'style' must be 'half_split' or "
      "'interleaved', got '" +
      style + "'");
}

py::array_t<double> doubles(const std::vector<double>& values) {
  py::array_t<double> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

// The options of both absolute encodings, in the order of the Python
// classes' signatures: (d_model, max_len, dropout, batch_first, dtype).
template <class EncodingOptions>
EncodingOptions absolute_options(Options& a) {
  EncodingOptions o;
  o.d_model = a.integer("d_model");
  o.max_len = a.integer("max_len");
  o.dropout = a.number("dropout");
  o.batch_first = a.flag("batch_first");
  o.dtype = a.dtype("dtype");
  return o;
}

// forward(x, offset) and the train/eval/state_dict methods of the two
// absolute encodings, which share their interface.
template <class Encoding, class PyClass>
void def_absolute_encoding(PyClass& cls, const char* module) {
  const std::string function = std::string(module) + ".forward";
  cls.def(
         "forward",
         [function](const Encoding& self, py::handle input, int64_t offset) {
           const Tensor x = to_tensor(input, function.c_str(), "input", Accept::kFloat);
           const bool random = self.is_training() && self.options().dropout > 0.0;
           return to_numpy(without_gil_unless(random, [&] { return self.forward(x, offset); }));
         },
         py::arg("input"), py::arg("offset"))
      .def_property_readonly("d_model", [](const Encoding& s) { return s.options().d_model; })
      .def_property_readonly("max_len", [](const Encoding& s) { return s.options().max_len; })
      .def_property_readonly("dropout", [](const Encoding& s) { return s.options().dropout; })
      .def_property_readonly("batch_first",
                             [](const Encoding& s) { return s.options().batch_first; })
      .def_property_readonly(
          "dtype", [](const Encoding& s) { return std::string(dtype_name(s.options().dtype)); });
  def_set_generator(cls);
}

void bind_absolute(py::module_& m) {
  m.def(
      "sinusoidal_encoding",
      [](int64_t length, int64_t d_model, int64_t offset, py::handle dtype) {
        return to_numpy(nn::sinusoidal_encoding(
            length, d_model, offset, parse_float_dtype(dtype, "sinusoidal_encoding", "dtype")));
      },
      py::arg("length"), py::arg("d_model"), py::arg("offset"), py::arg("dtype"));

  py::class_<SinusoidalPositionalEncoding, nn::Module> sin(m, "SinusoidalPositionalEncoding");
  sin.def(init_from_tuple("SinusoidalPositionalEncoding",
                          [](Options& a) {
                            return SinusoidalPositionalEncoding(
                                absolute_options<nn::SinusoidalPositionalEncodingOptions>(a));
                          }),
          py::arg("args"))
      .def_property_readonly("table", [](const SinusoidalPositionalEncoding& s) {
        return to_numpy(s.table().clone());
      });
  def_absolute_encoding<SinusoidalPositionalEncoding>(sin, "SinusoidalPositionalEncoding");

  py::class_<LearnedPositionalEncoding, nn::Module> learned(m, "LearnedPositionalEncoding");
  learned.def(init_from_tuple("LearnedPositionalEncoding",
                              [](Options& a) {
                                const auto o =
                                    absolute_options<nn::LearnedPositionalEncodingOptions>(a);
                                return LearnedPositionalEncoding(o, a.generator("generator"));
                              }),
              py::arg("args"));
  def_absolute_encoding<LearnedPositionalEncoding>(learned, "LearnedPositionalEncoding");
}

void bind_rotary(py::module_& m) {
  constexpr const char* kForward = "RotaryEmbedding.forward";
  py::class_<RotaryEmbedding, nn::Module>(m, "RotaryEmbedding")
      .def(init_from_tuple("RotaryEmbedding",
                           [](Options& a) {
                             return RotaryEmbedding({.head_dim = a.integer("head_dim"),
                                                     .base = a.number("base"),
                                                     .style = parse_style(a.string("style"))});
                           }),
           py::arg("args"))
      .def(
          "forward",
          [](const RotaryEmbedding& self, py::handle input, int64_t offset) {
            const Tensor x = to_tensor(input, kForward, "input", Accept::kFloat);
            return to_numpy(without_gil_unless(false, [&] { return self.forward(x, offset); }));
          },
          py::arg("input"), py::arg("offset"))
      .def(
          "forward_qk",
          [](const RotaryEmbedding& self, py::handle query, py::handle key, int64_t offset) {
            const Tensor q =
                to_tensor(query, "RotaryEmbedding.forward_qk", "query", Accept::kFloat);
            const Tensor k = to_tensor(key, "RotaryEmbedding.forward_qk", "key", Accept::kFloat);
            const auto [q2, k2] =
                without_gil_unless(false, [&] { return self.forward(q, k, offset); });
            return py::make_tuple(to_numpy(q2), to_numpy(k2));
          },
          py::arg("query"), py::arg("key"), py::arg("offset"))
      .def("inverse_frequencies",
           [](const RotaryEmbedding& self) { return doubles(self.inverse_frequencies()); })
      .def_property_readonly("head_dim",
                             [](const RotaryEmbedding& s) { return s.options().head_dim; })
      .def_property_readonly("base", [](const RotaryEmbedding& s) { return s.options().base; })
      .def_property_readonly("style", [](const RotaryEmbedding& s) {
        return std::string(s.options().style == RopeStyle::kHalfSplit ? "half_split"
                                                                      : "interleaved");
      });
}

void bind_score_biases(py::module_& m) {
  m.def(
      "alibi_slopes", [](int64_t num_heads) { return doubles(nn::alibi_slopes(num_heads)); },
      py::arg("num_heads"));

  py::class_<Alibi, nn::Module>(m, "Alibi")
      .def(init_from_tuple("Alibi",
                           [](Options& a) {
                             return Alibi({.num_heads = a.integer("num_heads"),
                                           .causal = a.flag("causal"),
                                           .dtype = a.dtype("dtype")});
                           }),
           py::arg("args"))
      .def(
          "forward",
          [](const Alibi& self, int64_t L, int64_t S) { return to_numpy(self.forward(L, S)); },
          py::arg("L"), py::arg("S"))
      .def_property_readonly("slopes", [](const Alibi& s) { return doubles(s.slopes()); })
      .def_property_readonly("num_heads", [](const Alibi& s) { return s.options().num_heads; })
      .def_property_readonly("causal", [](const Alibi& s) { return s.options().causal; });

  // Elementwise over an int64 array (the Python side wraps scalars).
  m.def(
      "relative_position_bucket",
      [](const py::array_t<int64_t, py::array::c_style>& relative_position, bool bidirectional,
         int64_t num_buckets, int64_t max_distance) {
        py::array_t<int64_t> out(std::vector<py::ssize_t>(
            relative_position.shape(), relative_position.shape() + relative_position.ndim()));
        const int64_t* in = relative_position.data();
        int64_t* dst = out.mutable_data();
        for (py::ssize_t i = 0; i < relative_position.size(); ++i)
          dst[i] = nn::relative_position_bucket(in[i], bidirectional, num_buckets, max_distance);
        return out;
      },
      py::arg("relative_position"), py::arg("bidirectional"), py::arg("num_buckets"),
      py::arg("max_distance"));

  py::class_<RelativePositionBias, nn::Module> bias(m, "RelativePositionBias");
  bias.def(init_from_tuple("RelativePositionBias",
                           [](Options& a) {
                             const nn::RelativePositionBiasOptions o{
                                 .num_heads = a.integer("num_heads"),
                                 .num_buckets = a.integer("num_buckets"),
                                 .max_distance = a.integer("max_distance"),
                                 .bidirectional = a.flag("bidirectional"),
                                 .dtype = a.dtype("dtype")};
                             return RelativePositionBias(o, a.generator("generator"));
                           }),
           py::arg("args"))
      .def(
          "forward",
          [](const RelativePositionBias& self, int64_t L, int64_t S) {
            return to_numpy(self.forward(L, S));
          },
          py::arg("L"), py::arg("S"))
      .def_property_readonly("num_heads",
                             [](const RelativePositionBias& s) { return s.options().num_heads; })
      .def_property_readonly("num_buckets",
                             [](const RelativePositionBias& s) { return s.options().num_buckets; })
      .def_property_readonly("max_distance",
                             [](const RelativePositionBias& s) { return s.options().max_distance; })
      .def_property_readonly(
          "bidirectional", [](const RelativePositionBias& s) { return s.options().bidirectional; });
}

}  // namespace

void bind_positional(py::module_& m) {
  bind_absolute(m);
  bind_rotary(m);
  bind_score_biases(m);
}

}  // namespace qkv::python
