// qkv.nn.MultiheadAttention's compiled half (the Python class in
// python/qkv/nn/multihead_attention.py parses devices and dtypes and gives
// torch's signatures).
#include "qkv/nn/multihead_attention.h"

#include <map>
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "module_calls.h"
#include "module_common.h"
#include "options.h"

namespace qkv::python {

namespace {

using qkv::nn::MultiheadAttention;

// (embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim,
//  vdim, batch_first, dtype, generator), as the Python class's signature.
MultiheadAttention mha_init(Options& a) {
  nn::MultiheadAttentionOptions o;
  o.embed_dim = a.integer("embed_dim");
  o.num_heads = a.integer("num_heads");
  o.dropout = a.number("dropout");
  o.bias = a.flag("bias");
  o.add_bias_kv = a.flag("add_bias_kv");
  o.add_zero_attn = a.flag("add_zero_attn");
  // torch treats kdim/vdim None as embed_dim; qkv's options use 0 for that.
  const auto dim = [&a](const char* name) -> int64_t {
    const std::optional<int64_t> value = a.optional_integer(name);
    if (value && *value <= 0)
      throw py::value_error(std::string("MultiheadAttention(): ") + name +
                            " must be positive, got " + std::to_string(*value));
    return value.value_or(0);
  };
  o.kdim = dim("kdim");
  o.vdim = dim("vdim");
  o.batch_first = a.flag("batch_first");
  o.dtype = a.dtype("dtype");
  return MultiheadAttention(o, a.generator("generator"));
}

}  // namespace

void bind_multihead_attention(py::module_& m) {
  py::class_<MultiheadAttention, nn::Module> cls(m, "MultiheadAttention");
  cls.def(init_from_tuple("MultiheadAttention", mha_init), py::arg("args"))
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
  def_set_generator(cls);
  def_forward<MultiheadAttentionCall>(cls, "MultiheadAttention.forward");
}

}  // namespace qkv::python
