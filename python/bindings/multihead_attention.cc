// qkv.nn.MultiheadAttention's compiled half (the Python class in
// python/qkv/nn/multihead_attention.py parses devices and dtypes and gives
// torch's signatures).
#include "qkv/nn/multihead_attention.h"

#include <map>
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"

namespace qkv::python {

namespace {

using qkv::nn::MultiheadAttention;

constexpr const char* kForward = "MultiheadAttention.forward";

}  // namespace

void bind_multihead_attention(py::module_& m) {
  py::class_<MultiheadAttention>(m, "MultiheadAttention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                       bool add_bias_kv, bool add_zero_attn, std::optional<int64_t> kdim,
                       std::optional<int64_t> vdim, bool batch_first, py::handle dtype,
                       Generator* generator) {
             nn::MultiheadAttentionOptions o;
             o.embed_dim = embed_dim;
             o.num_heads = num_heads;
             o.dropout = dropout;
             o.bias = bias;
             o.add_bias_kv = add_bias_kv;
             o.add_zero_attn = add_zero_attn;
             // torch treats kdim/vdim None as embed_dim; qkv's options use 0 for that.
             o.kdim = kdim.value_or(0);
             o.vdim = vdim.value_or(0);
             if (kdim && *kdim <= 0)
               throw py::value_error("MultiheadAttention(): kdim must be positive, got " +
                                     std::to_string(*kdim));
             if (vdim && *vdim <= 0)
               throw py::value_error("MultiheadAttention(): vdim must be positive, got " +
                                     std::to_string(*vdim));
             o.batch_first = batch_first;
             o.dtype = parse_float_dtype(dtype, "MultiheadAttention", "dtype");
             return MultiheadAttention(o, generator);
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0,
           py::arg("bias") = true, py::arg("add_bias_kv") = false, py::arg("add_zero_attn") = false,
           py::arg("kdim") = py::none(), py::arg("vdim") = py::none(),
           py::arg("batch_first") = false, py::arg("dtype") = py::none(),
           py::arg("generator") = py::none())
      .def(
          "forward",
          [](MultiheadAttention& self, py::handle query, py::handle key, py::handle value,
             py::handle key_padding_mask, bool need_weights, py::handle attn_mask,
             bool average_attn_weights, bool is_causal) {
            const Tensor q = to_tensor(query, kForward, "query", Accept::kFloat);
            const Tensor k = to_tensor(key, kForward, "key", Accept::kFloat);
            const Tensor v = to_tensor(value, kForward, "value", Accept::kFloat);
            nn::MultiheadAttentionForward args;
            args.key_padding_mask = to_optional_tensor(key_padding_mask, kForward,
                                                       "key_padding_mask", Accept::kFloatOrBool);
            args.need_weights = need_weights;
            args.attn_mask =
                to_optional_tensor(attn_mask, kForward, "attn_mask", Accept::kFloatOrBool);
            args.average_attn_weights = average_attn_weights;
            args.is_causal = is_causal;
            nn::MultiheadAttentionOutput out;
            {
              // Dropout may draw from the shared default generator: keep the GIL then.
              std::optional<py::gil_scoped_release> release;
              if (!self.is_training() || self.options().dropout == 0.0) release.emplace();
              out = self.forward(q, k, v, args);
            }
            return py::make_tuple(to_numpy(out.output), to_numpy_or_none(out.weights));
          },
          py::arg("query"), py::arg("key"), py::arg("value"),
          py::arg("key_padding_mask") = py::none(), py::arg("need_weights") = true,
          py::arg("attn_mask") = py::none(), py::arg("average_attn_weights") = true,
          py::arg("is_causal") = false)
      .def("train", &MultiheadAttention::train, py::arg("mode") = true)
      .def("eval", &MultiheadAttention::eval)
      .def_property_readonly("training", &MultiheadAttention::is_training)
      // Copies, so that changing a returned array never changes the module behind its back.
      .def("state_dict",
           [](const MultiheadAttention& self) { return state_dict_to_python(self.state_dict()); })
      .def(
          "load_state_dict",
          [](MultiheadAttention& self, const py::dict& state) {
            self.load_state_dict(
                state_dict_from_python(state, "MultiheadAttention.load_state_dict"));
          },
          py::arg("state_dict"))
      .def("set_generator", &MultiheadAttention::set_generator, py::arg("generator"),
           py::keep_alive<1, 2>())
      .def_property_readonly("embed_dim",
                             [](const MultiheadAttention& s) { return s.options().embed_dim; })
      .def_property_readonly("num_heads",
                             [](const MultiheadAttention& s) { return s.options().num_heads; })
      .def_property_readonly("head_dim", &MultiheadAttention::head_dim)
      .def_property_readonly("dropout",
                             [](const MultiheadAttention& s) { return s.options().dropout; })
      .def_property_readonly("bias", [](const MultiheadAttention& s) { return s.options().bias; })
      .def_property_readonly("add_bias_kv",
                             [](const MultiheadAttention& s) { return s.options().add_bias_kv; })
      .def_property_readonly("add_zero_attn",
                             [](const MultiheadAttention& s) { return s.options().add_zero_attn; })
      .def_property_readonly("kdim", [](const MultiheadAttention& s) { return s.options().kdim; })
      .def_property_readonly("vdim", [](const MultiheadAttention& s) { return s.options().vdim; })
      .def_property_readonly("batch_first",
                             [](const MultiheadAttention& s) { return s.options().batch_first; })
      .def_property_readonly(
          "dtype",
          [](const MultiheadAttention& s) { return std::string(dtype_name(s.options().dtype)); })
      .def_property_readonly("packed_in_proj", &MultiheadAttention::packed_in_proj);
}

}  // namespace qkv::python
