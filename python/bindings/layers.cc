// The compiled half of qkv.nn's building blocks (python/qkv/nn/layers.py
// gives them torch's signatures): Linear, LayerNorm, RMSNorm, Embedding.
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "options.h"
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

// The read-only views and state_dict methods LayerNorm and RMSNorm share.
template <class Norm, class PyClass>
void def_norm(PyClass& cls, const char* module) {
  const std::string forward = std::string(module) + ".forward";
  cls.def(
         "forward",
         [forward](const Norm& self, py::handle input) {
           return forward_float(self, input, forward.c_str());
         },
         py::arg("input"))
      .def_property_readonly(
          "normalized_shape",
          [](const Norm& s) { return std::vector<int64_t>(s.options().normalized_shape); })
      .def_property_readonly("eps", [](const Norm& s) { return s.options().eps; })
      .def_property_readonly("elementwise_affine",
                             [](const Norm& s) { return s.options().elementwise_affine; })
      .def_property_readonly("dtype", [](const Norm& s) { return dtype_of(s.options().dtype); });
}

// Each constructor takes one tuple of its arguments, in the order of the
// Python class's signature (python/qkv/nn/layers.py owns names and defaults).
void bind_linear(py::module_& m) {
  py::class_<Linear, nn::Module> cls(m, "Linear");
  cls.def(init_from_tuple("Linear",
                          [](Options& a) {
                            const nn::LinearOptions o{.in_features = a.integer("in_features"),
                                                      .out_features = a.integer("out_features"),
                                                      .bias = a.flag("bias"),
                                                      .dtype = a.dtype("dtype")};
                            return Linear(o, a.generator("generator"));
                          }),
          py::arg("args"))
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
}

// normalized_shape: a list of ints (the Python class turns an int into one).
Shape shape_field(Options& a) {
  return Shape(a.next("normalized_shape").cast<std::vector<int64_t>>());
}

void bind_layer_norm(py::module_& m) {
  py::class_<LayerNorm, nn::Module> cls(m, "LayerNorm");
  cls.def(init_from_tuple("LayerNorm",
                          [](Options& a) {
                            return LayerNorm({.normalized_shape = shape_field(a),
                                              .eps = a.number("eps"),
                                              .elementwise_affine = a.flag("elementwise_affine"),
                                              .bias = a.flag("bias"),
                                              .dtype = a.dtype("dtype")});
                          }),
          py::arg("args"))
      .def_property_readonly("has_bias", [](const LayerNorm& s) { return s.options().bias; });
  def_norm<LayerNorm>(cls, "LayerNorm");
}

void bind_rms_norm(py::module_& m) {
  py::class_<RMSNorm, nn::Module> cls(m, "RMSNorm");
  cls.def(init_from_tuple("RMSNorm",
                          [](Options& a) {
                            return RMSNorm({.normalized_shape = shape_field(a),
                                            .eps = a.optional_number("eps"),
                                            .elementwise_affine = a.flag("elementwise_affine"),
                                            .dtype = a.dtype("dtype")});
                          }),
          py::arg("args"));
  def_norm<RMSNorm>(cls, "RMSNorm");
}

void bind_embedding(py::module_& m) {
  py::class_<Embedding, nn::Module> cls(m, "Embedding");
  cls.def(init_from_tuple("Embedding",
                          [](Options& a) {
                            const nn::EmbeddingOptions o{
                                .num_embeddings = a.integer("num_embeddings"),
                                .embedding_dim = a.integer("embedding_dim"),
                                .padding_idx = a.optional_integer("padding_idx"),
                                .dtype = a.dtype("dtype")};
                            return Embedding(o, a.generator("generator"));
                          }),
          py::arg("args"))
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
}

}  // namespace

void bind_layers(py::module_& m) {
  bind_linear(m);
  bind_layer_norm(m);
  bind_rms_norm(m);
  bind_embedding(m);
}

}  // namespace qkv::python
