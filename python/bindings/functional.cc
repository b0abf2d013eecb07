// Functional attention: scaled_dot_product_attention (forward, and forward
// with a handle for the backward), simple_attention, ScoreFunction +
// attention, linear and matmul.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "options.h"
#include "qkv/attention.h"
#include "qkv/linear.h"
#include "tensor/enum_names.h"

namespace qkv::python {

namespace {

// The causal mask from torch's is_causal and qkv's causal (None, a bool,
// "top_left" or "bottom_right"); passing both is an error.
CausalMask parse_causal(bool is_causal, py::handle causal, const char* function) {
  const bool unset =
      causal.is_none() || (py::isinstance<py::bool_>(causal) && !causal.cast<bool>());
  if (unset) return is_causal ? CausalMask::kTopLeft : CausalMask::kNone;
  const std::string shown = py::repr(causal);
  if (is_causal)
    throw py::value_error(std::string(function) +
                          "(): pass either is_causal=True or causal=" + shown + ", not both");
  if (py::isinstance<py::bool_>(causal)) return CausalMask::kTopLeft;  // causal=True
  if (py::isinstance<py::str>(causal)) {
    const std::string name = causal.cast<std::string>();
    if (name == "top_left") return CausalMask::kTopLeft;
    if (name == "bottom_right") return CausalMask::kBottomRight;
  }
  throw py::value_error(std::string(function) +
                        "(): argument 'causal' must be None, 'top_left' or 'bottom_right', got " +
                        shown);
}

// torch's CausalBias (torch.nn.attention.bias.causal_upper_left/_lower_right)
// stands for a causal mask; its storage holds nothing. As attn_mask it becomes
// qkv's causal alignment: upper left = "top_left", lower right = "bottom_right".
bool is_causal_bias(py::handle mask) {
  if (mask.is_none() || std::string_view(Py_TYPE(mask.ptr())->tp_name) != "CausalBias")
    return false;
  return std::string(py::str(py::type::of(mask).attr("__module__"))).starts_with("torch.");
}

CausalMask causal_from_bias(py::handle bias, CausalMask causal, const Tensor& q, const Tensor& k,
                            const char* fn) {
  const std::string prefix = std::string(fn) + "(): attn_mask is a torch CausalBias";
  if (causal != CausalMask::kNone)
    throw py::value_error(prefix + "; do not also pass is_causal or causal");
  const int64_t L = q.dim() >= 2 ? q.size(-2) : -1, S = k.dim() >= 2 ? k.size(-2) : -1;
  const auto seq_len_q = bias.attr("seq_len_q").cast<int64_t>();
  const auto seq_len_kv = bias.attr("seq_len_kv").cast<int64_t>();
  if (seq_len_q != L || seq_len_kv != S)
    throw py::value_error(prefix + " for " + std::to_string(seq_len_q) + " queries and " +
                          std::to_string(seq_len_kv) + " keys, but the query has " +
                          std::to_string(L) + " and the key " + std::to_string(S));
  const std::string variant = py::str(bias.attr("variant").attr("name"));
  if (variant == "UPPER_LEFT") return CausalMask::kTopLeft;
  if (variant == "LOWER_RIGHT") return CausalMask::kBottomRight;
  throw py::value_error(prefix + " of variant " + variant +
                        ", which qkv does not know (UPPER_LEFT and LOWER_RIGHT it does)");
}

// None or one ALiBi slope per query head, anything numpy reads as a 1-D array.
std::vector<double> parse_alibi_slopes(py::handle slopes, const char* function) {
  if (slopes.is_none()) return {};
  using Slopes = py::array_t<double, py::array::c_style | py::array::forcecast>;
  const Slopes array = py::module_::import("numpy").attr("asarray")(slopes, "float64");
  if (array.ndim() != 1)
    throw py::value_error(std::string(function) +
                          "(): argument 'alibi_slopes' must be 1-D (one slope per query head), "
                          "got shape " +
                          std::string(py::str(array.attr("shape"))));
  return std::vector<double>(array.data(), array.data() + array.size());
}

SdpaBackend parse_backend(const std::string& backend, const char* function) {
  if (backend == "auto") return SdpaBackend::kAuto;
  if (backend == "reference") return SdpaBackend::kReference;
  if (backend == "fused") return SdpaBackend::kFused;
  throw py::value_error(std::string(function) +
                        "(): argument 'backend' must be 'auto', 'reference' or 'fused', got '" +
                        backend + "'");
}

// "float32", "bfloat16", "int8" (or "fp32", "bf16"), as qkv::parse_precision.
Precision parse_precision_argument(const std::string& precision, const char* function) {
  try {
    return parse_precision(precision);
  } catch (const Error&) {
    throw py::value_error(
        std::string(function) +
        "(): argument 'precision' must be 'float32', 'bfloat16' or 'int8', got '" + precision +
        "'");
  }
}

// The inputs and options of one SDPA call, converted from Python.
struct SdpaCall {
  Tensor q, k, v;
  SdpaOptions options;
};

// Reads scaled_dot_product_attention's arguments from the tuple that
// python/qkv/nn/functional.py passes, in the order of its signature.
SdpaCall parse_call(Options& args, bool need_weights) {
  const char* fn = args.function();
  SdpaCall call;
  SdpaOptions& options = call.options;
  call.q = args.tensor("query", Accept::kFloat);
  call.k = args.tensor("key", Accept::kFloat);
  call.v = args.tensor("value", Accept::kFloat);
  const py::handle attn_mask = args.next("attn_mask");
  options.dropout_p = args.number("dropout_p");
  const bool is_causal = args.flag("is_causal");
  options.scale = args.optional_number("scale");
  options.enable_gqa = args.flag("enable_gqa");
  options.causal = parse_causal(is_causal, args.next("causal"), fn);
  if (is_causal_bias(attn_mask)) {
    options.causal = causal_from_bias(attn_mask, options.causal, call.q, call.k, fn);
  } else {
    options.attn_mask = to_optional_tensor(attn_mask, fn, "attn_mask", Accept::kFloatOrBool);
  }
  options.dropout_mask = args.optional_tensor("dropout_mask", Accept::kBool);
  options.return_dropout_mask = args.flag("return_dropout_mask");
  options.generator = args.generator("generator");
  options.window_left = args.optional_integer("window_left").value_or(-1);
  options.window_right = args.optional_integer("window_right").value_or(-1);
  options.alibi_slopes = parse_alibi_slopes(args.next("alibi_slopes"), fn);
  options.softcap = args.optional_number("softcap").value_or(0.0);
  options.backend = parse_backend(args.string("backend"), fn);
  options.precision = parse_precision_argument(args.string("precision"), fn);
  args.done();
  options.need_weights = need_weights;
  return call;
}

SdpaResult run_forward(const SdpaCall& call) {
  const SdpaOptions& options = call.options;
  // The default generator is shared state: keep the GIL while drawing from it.
  std::optional<py::gil_scoped_release> release;
  if (options.dropout_p == 0.0 || options.generator != nullptr || options.dropout_mask.defined())
    release.emplace();
  return scaled_dot_product_attention(call.q, call.k, call.v, options);
}

// A dropout mask passed in may come back as the caller's own buffer: hand out a copy.
py::object exported_keep_mask(const SdpaResult& result, const SdpaOptions& options) {
  if (result.dropout_mask.defined() && options.dropout_mask.defined() &&
      result.dropout_mask.shares_storage_with(options.dropout_mask))
    return to_numpy(result.dropout_mask.clone());
  return to_numpy_or_none(result.dropout_mask);
}

// The backward reads these buffers again: a read-only array makes an in-place
// change an error instead of wrong gradients.
py::array read_only(py::array a) {
  a.attr("flags").attr("writeable") = false;
  return a;
}

// What the backward of one forward call needs: its inputs, options and result
// (output, log-sum-exp, dropout seed). The inputs are held, not copied: the
// caller must not change them in place before calling the backward.
struct SdpaBackward {
  SdpaCall call;
  SdpaResult forward;

  // Returns (grad_query, grad_key, grad_value, grad_attn_mask or None).
  py::tuple operator()(py::handle grad_output) const {
    const char* fn = "scaled_dot_product_attention_backward";
    const Tensor go = to_tensor(grad_output, fn, "grad_output", Accept::kFloat);
    SdpaGradients grads;
    {
      py::gil_scoped_release release;
      grads =
          scaled_dot_product_attention_backward(go, call.q, call.k, call.v, forward, call.options);
    }
    return py::make_tuple(to_python_or_none(grads.query), to_python_or_none(grads.key),
                          to_python_or_none(grads.value), to_python_or_none(grads.attn_mask));
  }
};

// scaled_dot_product_attention (kWithGrad false) returns (output, weights or
// None, dropout_mask or None, kernel name); its _with_grad twin returns
// (output, weights or None, dropout_mask or None, SdpaBackward). `args` is
// the tuple of all the Python function's arguments (see parse_call);
// `function` names it in errors.
template <bool kWithGrad>
py::tuple sdpa_entry(py::handle args, bool need_weights, py::str function) {
  // The name stays alive in the caller's frame; PyUnicode_AsUTF8 does not copy.
  Options options(args, PyUnicode_AsUTF8(function.ptr()));
  SdpaCall call = parse_call(options, need_weights);
  if constexpr (!kWithGrad) {
    const SdpaResult result = run_forward(call);
    return py::make_tuple(to_python_or_none(result.output), to_python_or_none(result.weights),
                          exported_keep_mask(result, call.options), result.kernel);
  } else {
    SdpaBackward backward;
    backward.call = std::move(call);
    backward.forward = run_forward(backward.call);
    // The backward replays dropout from the saved seed (or the given mask), so
    // it needs no generator, and the weights are not part of what it keeps.
    backward.call.options.generator = nullptr;
    backward.call.options.need_weights = false;
    py::object weights = to_python_or_none(backward.forward.weights);
    py::object keep = exported_keep_mask(backward.forward, backward.call.options);
    backward.forward.weights = Tensor();
    backward.forward.dropout_mask = Tensor();
    // A bfloat16 output is a torch tensor, which has no read-only flag.
    py::object output = backward.forward.output.dtype() == DType::kBFloat16
                            ? to_python_or_none(backward.forward.output)
                            : read_only(to_numpy(backward.forward.output));
    return py::make_tuple(output, weights, keep, std::move(backward));
  }
}

// qkv.torch's custom ops (python/qkv/torch.py): a forward that returns what
// the backward needs, and that backward as a separate call, so that torch
// (autograd, torch.compile) holds the saved tensors instead of a handle.
// `args` is the tuple of scaled_dot_product_attention's arguments (see
// parse_call). Dropout comes from the qkv.Generator in it: the op passes a
// fresh Generator(seed) to both calls, and the backward replays the
// forward's one draw from it (the kernel's dropout seed).

// `layout`: "contiguous", or "like_inputs" for the output, and the backward's
// gradients, laid out like the query (each like its input) and exported with
// those strides (SdpaLayout::kLikeInputs).
SdpaLayout parse_layout(const std::string& layout, const char* function) {
  if (layout == "contiguous") return SdpaLayout::kContiguous;
  if (layout == "like_inputs") return SdpaLayout::kLikeInputs;
  throw py::value_error(std::string(function) +
                        "(): argument 'layout' must be 'contiguous' or 'like_inputs', got '" +
                        layout + "'");
}

// A result for Python in the layout it was computed in.
py::object export_laid_out(const Tensor& t, SdpaLayout layout) {
  return layout == SdpaLayout::kContiguous ? to_python_or_none(t) : to_python_keeping_strides(t);
}

// -> (output, logsumexp [..., H, L] float64, keep mask or None, kernel name)
py::tuple sdpa_op_forward(py::handle args, py::str function, const std::string& layout) {
  Options options(args, PyUnicode_AsUTF8(function.ptr()));
  SdpaCall call = parse_call(options, /*need_weights=*/false);
  call.options.layout = parse_layout(layout, options.function());
  const SdpaResult result = run_forward(call);
  return py::make_tuple(export_laid_out(result.output, call.options.layout),
                        to_numpy(result.logsumexp), exported_keep_mask(result, call.options),
                        result.kernel);
}

// grad_output, output and logsumexp as the forward gave them (output and
// grad_output in the query's dtype, logsumexp float64 [..., H, L]).
// -> (grad_query, grad_key, grad_value, grad_attn_mask or None)
py::tuple sdpa_op_backward(py::handle grad_output, py::handle output, py::handle logsumexp,
                           py::handle args, py::str function, const std::string& layout,
                           bool attn_mask_requires_grad) {
  Options options(args, PyUnicode_AsUTF8(function.ptr()));
  const char* fn = options.function();
  SdpaCall call = parse_call(options, /*need_weights=*/false);
  call.options.layout = parse_layout(layout, fn);
  const Tensor go = to_tensor(grad_output, fn, "grad_output", Accept::kFloat);
  SdpaResult forward;
  forward.output = to_tensor(output, fn, "output", Accept::kFloat);
  forward.logsumexp = to_tensor(logsumexp, fn, "logsumexp", Accept::kFloat);
  if (forward.output.dtype() != call.q.dtype())
    throw py::type_error(std::string(fn) + "(): argument 'output' must have the query's dtype " +
                         dtype_name(call.q.dtype()) + ", got " +
                         dtype_name(forward.output.dtype()));
  Shape lse_shape = forward.output.shape();
  if (!lse_shape.empty()) lse_shape.pop_back();
  if (forward.logsumexp.dtype() != DType::kFloat64 || forward.logsumexp.shape() != lse_shape)
    throw py::value_error(std::string(fn) + "(): argument 'logsumexp' must be float64 of shape " +
                          shape_str(lse_shape) + " (the output's without its last dim), got " +
                          dtype_name(forward.logsumexp.dtype()) + " " +
                          shape_str(forward.logsumexp.shape()));
  SdpaOptions& o = call.options;
  if (o.dropout_p > 0.0 && !o.dropout_mask.defined()) {
    if (o.generator == nullptr)
      throw py::value_error(std::string(fn) +
                            "(): dropout_p > 0 needs the qkv.Generator the forward was given "
                            "(a fresh one with the same seed) to replay its dropout");
    forward.dropout_seed = o.generator->next_u64();  // the forward's one draw
  }
  o.generator = nullptr;
  o.return_dropout_mask = false;
  o.attn_mask_requires_grad = attn_mask_requires_grad;
  SdpaGradients grads;
  {
    py::gil_scoped_release release;
    grads = scaled_dot_product_attention_backward(go, call.q, call.k, call.v, forward, o);
  }
  return py::make_tuple(export_laid_out(grads.query, o.layout),
                        export_laid_out(grads.key, o.layout),
                        export_laid_out(grads.value, o.layout), to_python_or_none(grads.attn_mask));
}

// Each kind by the name of its ScoreFunction constructor.
const char* kind_name(ScoreFunction::Kind kind) {
  constexpr detail::EnumName<ScoreFunction::Kind> kNames[] = {
      {ScoreFunction::Kind::kDot, "dot"},
      {ScoreFunction::Kind::kScaledDot, "scaled_dot"},
      {ScoreFunction::Kind::kAdditive, "additive"},
      {ScoreFunction::Kind::kBilinear, "bilinear"}};
  return detail::name_of(kNames, kind, "");
}

// A computation's result for Python: numpy arrays.
py::object computation_result(const Tensor& t) { return to_numpy(t); }
py::object computation_result(const AttentionResult& r) {
  return py::make_tuple(to_numpy(r.output), to_numpy(r.weights));
}

// The Python function `name`(args) of one tuple: `read(Options&)` reads its
// fields and returns the computation, which runs without the GIL (it draws
// nothing).
template <class Read>
void def_computation(py::module_& m, const char* name, Read read) {
  m.def(
      name,
      [name, read](py::handle args) {
        Options a(args, name);
        const auto compute = read(a);
        a.done();
        return computation_result(without_gil_unless(false, compute));
      },
      py::arg("args"));
}

}  // namespace

void bind_functional(py::module_& m) {
  m.def("scaled_dot_product_attention", &sdpa_entry<false>, py::arg("args"),
        py::arg("need_weights"), py::arg("function"));
  m.def("scaled_dot_product_attention_with_grad", &sdpa_entry<true>, py::arg("args"),
        py::arg("need_weights"), py::arg("function"));

  m.def("scaled_dot_product_attention_op", &sdpa_op_forward, py::arg("args"), py::arg("function"),
        py::arg("layout") = "contiguous");
  m.def("scaled_dot_product_attention_op_backward", &sdpa_op_backward, py::arg("grad_output"),
        py::arg("output"), py::arg("logsumexp"), py::arg("args"), py::arg("function"),
        py::arg("layout") = "contiguous", py::arg("attn_mask_requires_grad") = true);

  py::class_<SdpaBackward>(m, "SdpaBackward")
      .def("__call__", &SdpaBackward::operator(), py::arg("grad_output"))
      .def_property_readonly("kernel", [](const SdpaBackward& b) { return b.forward.kernel; })
      .def_property_readonly("logsumexp", [](const SdpaBackward& b) {
        return read_only(to_numpy(b.forward.logsumexp));
      });

  def_computation(m, "simple_attention", [](Options& a) {
    const Tensor q = a.tensor("query", Accept::kFloat);
    const Tensor k = a.tensor("keys", Accept::kFloat);
    const Tensor v = a.tensor("values", Accept::kFloat);
    return [q, k, v] { return simple_attention(q, k, v); };
  });

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

  def_computation(m, "attention", [](Options& a) {
    const Tensor q = a.tensor("q", Accept::kFloat);
    const Tensor k = a.tensor("k", Accept::kFloat);
    const Tensor v = a.tensor("v", Accept::kFloat);
    const py::handle score = a.next("score");
    if (!py::isinstance<ScoreFunction>(score))
      throw py::type_error("attention(): argument 'score' must be a qkv.ScoreFunction, got " +
                           std::string(py::str(py::type::of(score).attr("__name__"))));
    const Tensor mask = a.optional_tensor("mask", Accept::kFloatOrBool);
    return [q, k, v, &s = score.cast<const ScoreFunction&>(), mask] {
      return attention(q, k, v, s, mask);
    };
  });

  def_computation(m, "linear", [](Options& a) {
    const Tensor input = a.tensor("input", Accept::kFloat);
    const Tensor weight = a.tensor("weight", Accept::kFloat);
    const Tensor bias = a.optional_tensor("bias", Accept::kFloat);
    return [input, weight, bias] { return linear(input, weight, bias); };
  });

  def_computation(m, "matmul", [](Options& a) {
    const Tensor input = a.tensor("input", Accept::kFloat);
    const Tensor other = a.tensor("other", Accept::kFloat);
    return [input, other] { return matmul(input, other); };
  });
}

}  // namespace qkv::python
