// The compiled half of qkv.nn's building blocks (python/qkv/nn/layers.py
// gives them torch's signatures): Linear, LayerNorm, RMSNorm, Embedding.
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/rms_norm.h"

namespace qkv::python {

namespace {

using nn::Embedding;
using nn::LayerNorm;
using nn::Linear;
using nn::RMSNorm;

// x -> module.forward(x) without the GIL (none of these draws random numbers).
template <class Module>
py::array forward_float(const Module& self, py::handle input, const char* function) {
  const Tensor x = to_tensor(input, function, "input", Accept::kFloat);
  return to_numpy(without_gil_unless(false, [&] { return self.forward(x); }));
}

std::string dtype_of(DType dtype) { return dtype_name(dtype); }

void bind_linear(py::module_& m) {
  py::class_<Linear> cls(m, "Linear");
  cls.def(py::init([](int64_t in_features, int64_t out_features, bool bias, py::handle dtype,
                      Generator* generator) {
            return Linear({.in_features = in_features,
                           .out_features = out_features,
                           .bias = bias,
                           .dtype = parse_float_dtype(dtype, "Linear", "dtype")},
                          generator);
          }),
          py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true,
          py::arg("dtype") = py::none(), py::arg("generator") = py::none())
      .def(
          "forward",
          [](const Linear& self, py::handle input) {
            return forward_float(self, input, "Linear.forward");
          },
          py::arg("input"))
      .def_property_readonly("in_features", [](const Linear& s) { return s.options().in_features; })
      .def_property_readonly("out_features",
                             [](const Linear& s) { return s.options().out_features; })
      .def_property_readonly("has_bias", [](const Linear& s) { return s.options().bias; })
      .def_property_readonly("dtype", [](const Linear& s) { return dtype_of(s.options().dtype); });
  def_state_dict<Linear>(cls, "Linear.load_state_dict");
}

void bind_layer_norm(py::module_& m) {
  py::class_<LayerNorm> cls(m, "LayerNorm");
  cls.def(py::init([](const std::vector<int64_t>& normalized_shape, double eps,
                      bool elementwise_affine, bool bias, py::handle dtype) {
            return LayerNorm({.normalized_shape = Shape(normalized_shape),
                              .eps = eps,
                              .elementwise_affine = elementwise_affine,
                              .bias = bias,
                              .dtype = parse_float_dtype(dtype, "LayerNorm", "dtype")});
          }),
          py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
          py::arg("bias") = true, py::arg("dtype") = py::none())
      .def(
          "forward",
          [](const LayerNorm& self, py::handle input) {
            return forward_float(self, input, "LayerNorm.forward");
          },
          py::arg("input"))
      .def_property_readonly(
          "normalized_shape",
          [](const LayerNorm& s) { return std::vector<int64_t>(s.options().normalized_shape); })
      .def_property_readonly("eps", [](const LayerNorm& s) { return s.options().eps; })
      .def_property_readonly("elementwise_affine",
                             [](const LayerNorm& s) { return s.options().elementwise_affine; })
      .def_property_readonly("has_bias", [](const LayerNorm& s) { return s.options().bias; })
      .def_property_readonly("dtype",
                             [](const LayerNorm& s) { return dtype_of(s.options().dtype); });
  def_state_dict<LayerNorm>(cls, "LayerNorm.load_state_dict");
}

void bind_rms_norm(py::module_& m) {
  py::class_<RMSNorm> cls(m, "RMSNorm");
  cls.def(py::init([](const std::vector<int64_t>& normalized_shape, std::optional<double> eps,
                      bool elementwise_affine, py::handle dtype) {
            return RMSNorm({.normalized_shape = Shape(normalized_shape),
                            .eps = eps,
                            .elementwise_affine = elementwise_affine,
                            .dtype = parse_float_dtype(dtype, "RMSNorm", "dtype")});
          }),
          py::arg("normalized_shape"), py::arg("eps") = py::none(),
          py::arg("elementwise_affine") = true, py::arg("dtype") = py::none())
      .def(
          "forward",
          [](const RMSNorm& self, py::handle input) {
            return forward_float(self, input, "RMSNorm.forward");
          },
          py::arg("input"))
      .def_property_readonly(
          "normalized_shape",
          [](const RMSNorm& s) { return std::vector<int64_t>(s.options().normalized_shape); })
      .def_property_readonly("eps", [](const RMSNorm& s) { return s.options().eps; })
      .def_property_readonly("elementwise_affine",
                             [](const RMSNorm& s) { return s.options().elementwise_affine; })
      .def_property_readonly("dtype", [](const RMSNorm& s) { return dtype_of(s.options().dtype); });
  def_state_dict<RMSNorm>(cls, "RMSNorm.load_state_dict");
}

void bind_embedding(py::module_& m) {
  py::class_<Embedding> cls(m, "Embedding");
  cls.def(py::init([](int64_t num_embeddings, int64_t embedding_dim,
                      std::optional<int64_t> padding_idx, py::handle dtype, Generator* generator) {
            return Embedding({.num_embeddings = num_embeddings,
                              .embedding_dim = embedding_dim,
                              .padding_idx = padding_idx,
                              .dtype = parse_float_dtype(dtype, "Embedding", "dtype")},
                             generator);
          }),
          py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(),
          py::arg("dtype") = py::none(), py::arg("generator") = py::none())
      // The Python class checks that `ids` holds integers; here they arrive as int64.
      .def(
          "forward",
          [](const Embedding& self, const py::array_t<int64_t, py::array::c_style>& ids) {
            const int64_t* first = ids.data();
            const std::vector<int64_t> flat(first, first + ids.size());
            const Shape shape(ids.shape(), ids.shape() + ids.ndim());
            return to_numpy(without_gil_unless(false, [&] { return self.forward(flat, shape); }));
          },
          py::arg("input"))
      .def_property_readonly("num_embeddings",
                             [](const Embedding& s) { return s.options().num_embeddings; })
      .def_property_readonly("embedding_dim",
                             [](const Embedding& s) { return s.options().embedding_dim; })
      .def_property_readonly("padding_idx",
                             [](const Embedding& s) { return s.options().padding_idx; })
      .def_property_readonly("dtype",
                             [](const Embedding& s) { return dtype_of(s.options().dtype); });
  def_state_dict<Embedding>(cls, "Embedding.load_state_dict");
}

}  // namespace

void bind_layers(py::module_& m) {
  bind_linear(m);
  bind_layer_norm(m);
  bind_rms_norm(m);
  bind_embedding(m);
}

}  // namespace qkv::python
