// Functional attention: scaled_dot_product_attention, simple_attention,
// ScoreFunction + attention, linear and matmul.
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "qkv/attention.h"
#include "qkv/linear.h"

namespace qkv::python {

namespace {

CausalMask parse_causal(const std::string& causal, const char* function) {
  if (causal == "none") return CausalMask::kNone;
  if (causal == "top_left") return CausalMask::kTopLeft;
  if (causal == "bottom_right") return CausalMask::kBottomRight;
  throw py::value_error(std::string(function) +
                        "(): argument 'causal' must be None, 'top_left' or 'bottom_right', got '" +
                        causal + "'");
}

// Returns (output, weights or None, dropout_mask or None).
py::tuple sdpa(py::handle query, py::handle key, py::handle value, py::handle attn_mask,
               double dropout_p, const std::string& causal, std::optional<double> scale,
               bool enable_gqa, bool need_weights, py::handle dropout_mask,
               bool return_dropout_mask, Generator* generator, const std::string& function) {
  const char* fn = function.c_str();
  const Tensor q = to_tensor(query, fn, "query", Accept::kFloat);
  const Tensor k = to_tensor(key, fn, "key", Accept::kFloat);
  const Tensor v = to_tensor(value, fn, "value", Accept::kFloat);
  SdpaOptions options;
  options.attn_mask = to_optional_tensor(attn_mask, fn, "attn_mask", Accept::kFloatOrBool);
  options.dropout_p = dropout_p;
  options.causal = parse_causal(causal, fn);
  options.scale = scale;
  options.enable_gqa = enable_gqa;
  options.need_weights = need_weights;
  options.return_dropout_mask = return_dropout_mask;
  options.dropout_mask = to_optional_tensor(dropout_mask, fn, "dropout_mask", Accept::kBool);
  options.generator = generator;

  SdpaResult result;
  {
    // The default generator is shared state: keep the GIL while drawing from it.
    std::optional<py::gil_scoped_release> release;
    if (dropout_p == 0.0 || generator != nullptr || options.dropout_mask.defined())
      release.emplace();
    result = scaled_dot_product_attention(q, k, v, options);
  }
  // A dropout mask passed in may come back as the caller's own buffer: hand out a copy.
  if (result.dropout_mask.defined() && options.dropout_mask.defined() &&
      result.dropout_mask.shares_storage_with(options.dropout_mask))
    result.dropout_mask = result.dropout_mask.clone();
  return py::make_tuple(to_numpy(result.output), to_numpy_or_none(result.weights),
                        to_numpy_or_none(result.dropout_mask));
}

const char* kind_name(ScoreFunction::Kind kind) {
  switch (kind) {
    case ScoreFunction::Kind::kDot:
      return "dot";
    case ScoreFunction::Kind::kScaledDot:
      return "scaled_dot";
    case ScoreFunction::Kind::kAdditive:
      return "additive";
    case ScoreFunction::Kind::kBilinear:
      return "bilinear";
  }
  return "";
}

}  // namespace

void bind_functional(py::module_& m) {
  m.def("scaled_dot_product_attention", &sdpa, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0, py::arg("causal") = "none",
        py::arg("scale") = py::none(), py::arg("enable_gqa") = false,
        py::arg("need_weights") = false, py::arg("dropout_mask") = py::none(),
        py::arg("return_dropout_mask") = false, py::arg("generator") = py::none(),
        py::arg("function") = "scaled_dot_product_attention");

  m.def(
      "simple_attention",
      [](py::handle query, py::handle keys, py::handle values) {
        const char* fn = "simple_attention";
        const Tensor q = to_tensor(query, fn, "query", Accept::kFloat);
        const Tensor k = to_tensor(keys, fn, "keys", Accept::kFloat);
        const Tensor v = to_tensor(values, fn, "values", Accept::kFloat);
        AttentionResult r;
        {
          py::gil_scoped_release release;
          r = simple_attention(q, k, v);
        }
        return py::make_tuple(to_numpy(r.output), to_numpy(r.weights));
      },
      py::arg("query"), py::arg("keys"), py::arg("values"));

  // Parameters are copied in, so later changes to the caller's arrays do not leak in.
  py::class_<ScoreFunction>(m, "ScoreFunction")
      .def_static("dot", &ScoreFunction::dot)
      .def_static("scaled_dot", &ScoreFunction::scaled_dot)
      .def_static(
          "additive",
          [](py::handle w_q, py::handle w_k, py::handle v) {
            const char* fn = "ScoreFunction.additive";
            return ScoreFunction::additive(to_tensor(w_q, fn, "w_q", Accept::kFloat).clone(),
                                           to_tensor(w_k, fn, "w_k", Accept::kFloat).clone(),
                                           to_tensor(v, fn, "v", Accept::kFloat).clone());
          },
          py::arg("w_q"), py::arg("w_k"), py::arg("v"))
      .def_static(
          "bilinear",
          [](py::handle w) {
            return ScoreFunction::bilinear(
                to_tensor(w, "ScoreFunction.bilinear", "w", Accept::kFloat).clone());
          },
          py::arg("w"))
      .def_property_readonly("kind", [](const ScoreFunction& s) { return kind_name(s.kind()); })
      .def(
          "scores",
          [](const ScoreFunction& s, py::handle q, py::handle k) {
            const char* fn = "ScoreFunction.scores";
            const Tensor qt = to_tensor(q, fn, "q", Accept::kFloat);
            const Tensor kt = to_tensor(k, fn, "k", Accept::kFloat);
            Tensor out;
            {
              py::gil_scoped_release release;
              out = s.scores(qt, kt);
            }
            return to_numpy(out);
          },
          py::arg("q"), py::arg("k"))
      .def("__repr__", [](const ScoreFunction& s) {
        return std::string("qkv.ScoreFunction.") + kind_name(s.kind()) + "(...)";
      });

  m.def(
      "attention",
      [](py::handle q, py::handle k, py::handle v, const ScoreFunction& score, py::handle mask) {
        const char* fn = "attention";
        const Tensor qt = to_tensor(q, fn, "q", Accept::kFloat);
        const Tensor kt = to_tensor(k, fn, "k", Accept::kFloat);
        const Tensor vt = to_tensor(v, fn, "v", Accept::kFloat);
        const Tensor mt = to_optional_tensor(mask, fn, "mask", Accept::kFloatOrBool);
        AttentionResult r;
        {
          py::gil_scoped_release release;
          r = attention(qt, kt, vt, score, mt);
        }
        return py::make_tuple(to_numpy(r.output), to_numpy(r.weights));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("score"), py::arg("mask") = py::none());

  m.def(
      "linear",
      [](py::handle input, py::handle weight, py::handle bias) {
        const char* fn = "linear";
        const Tensor x = to_tensor(input, fn, "input", Accept::kFloat);
        const Tensor w = to_tensor(weight, fn, "weight", Accept::kFloat);
        const Tensor b = to_optional_tensor(bias, fn, "bias", Accept::kFloat);
        Tensor y;
        {
          py::gil_scoped_release release;
          y = linear(x, w, b);
        }
        return to_numpy(y);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());

  m.def(
      "matmul",
      [](py::handle input, py::handle other) {
        const char* fn = "matmul";
        const Tensor a = to_tensor(input, fn, "input", Accept::kFloat);
        const Tensor b = to_tensor(other, fn, "other", Accept::kFloat);
        Tensor y;
        {
          py::gil_scoped_release release;
          y = matmul(a, b);
        }
        return to_numpy(y);
      },
      py::arg("input"), py::arg("other"));
}

}  // namespace qkv::python
