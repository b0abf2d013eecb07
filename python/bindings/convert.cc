#include "convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "ops/checks.h"
#include "tensor/enum_names.h"

namespace qkv::python {

namespace {

const char* accepted(Accept accept) {
  constexpr detail::EnumName<Accept> kNames[] = {
      {Accept::kFloat, "float32 or float64"},
      {Accept::kBool, "bool"},
      {Accept::kFloatOrBool, "bool, float32 or float64"}};
  return detail::name_of(kNames, accept, "");
}

bool allows(Accept accept, DType dtype) {
  if (dtype == DType::kBool) return accept != Accept::kFloat;
  return accept != Accept::kBool;
}

std::string prefix(const char* function, const char* name) {
  return std::string(function) + "(): argument '" + name + "'";
}

[[noreturn]] void wrong_dtype(const char* function, const char* name, Accept accept,
                              const std::string& got) {
  throw py::type_error(prefix(function, name) + " must have dtype " + accepted(accept) + ", got " +
                       got);
}

// numpy's byte order '<' means native on this machine.
constexpr bool kLittleEndian = std::endian::native == std::endian::little;

// Only look for torch if the user already imported it: importing it here would
// cost a second or more.
bool is_torch_tensor(py::handle obj) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;
  py::object torch = modules["torch"];
  return py::hasattr(torch, "Tensor") && py::isinstance(obj, torch.attr("Tensor"));
}

[[noreturn]] void throw_nested(const char* function, const char* name) {
  throw py::type_error(prefix(function, name) +
                       " is a nested tensor; pad it to a plain tensor (with a mask) first");
}

// A torch.Tensor whose storage is its value: torch.Tensor itself or a
// parameter/buffer. Any other subclass (CausalBias, a fake or wrapper tensor)
// may mean something its storage does not hold: refused by name, never read
// as plain memory. (The types are looked up once; torch stays loaded.)
void check_plain_tensor(py::handle tensor, const char* function, const char* name) {
  static const std::vector<PyTypeObject*> plain = [] {
    py::object torch = py::module_::import("sys").attr("modules")["torch"];
    py::object nn = torch.attr("nn");
    std::vector<PyTypeObject*> types = {
        reinterpret_cast<PyTypeObject*>(torch.attr("Tensor").ptr()),
        reinterpret_cast<PyTypeObject*>(nn.attr("Parameter").ptr())};
    if (py::hasattr(nn, "Buffer"))
      types.push_back(reinterpret_cast<PyTypeObject*>(nn.attr("Buffer").ptr()));
    return types;
  }();
  for (PyTypeObject* type : plain)
    if (Py_TYPE(tensor.ptr()) == type) return;
  if (tensor.attr("is_nested").cast<bool>()) throw_nested(function, name);
  const py::handle type = py::type::of(tensor);
  const std::string type_name = std::string(py::str(type.attr("__module__"))) + "." +
                                std::string(py::str(type.attr("__qualname__")));
  std::string hint;
  if (std::string(py::str(type.attr("__name__"))) == "CausalBias")
    hint = " (scaled_dot_product_attention takes it as attn_mask and applies its causal mask)";
  throw py::type_error(prefix(function, name) + " is a " + type_name +
                       ", a torch.Tensor subclass; qkv reads plain torch.Tensor values only" +
                       hint);
}

// tensor.numpy(), or a TypeError that says why a nested or sparse tensor has no such view.
py::array torch_numpy(py::handle tensor, const char* function, const char* name) {
  try {
    return tensor.attr("detach")().attr("resolve_neg")().attr("numpy")();
  } catch (py::error_already_set&) {
    if (tensor.attr("is_nested").cast<bool>()) throw_nested(function, name);
    if (!py::str(tensor.attr("layout")).equal(py::str("torch.strided")))
      throw py::type_error(prefix(function, name) + " has layout " +
                           std::string(py::str(tensor.attr("layout"))) +
                           "; qkv reads dense tensors: call .to_dense() first");
    throw;
  }
}

// A numpy array sharing the CPU tensor's memory and strides. A bfloat16
// tensor (numpy has no such dtype) comes as its int16 bit patterns, with
// *bfloat16 set.
py::array torch_to_numpy(py::handle tensor, const char* function, const char* name, Accept accept,
                         bool* bfloat16) {
  check_plain_tensor(tensor, function, name);
  const std::string device = py::str(tensor.attr("device").attr("type"));
  if (device != "cpu")
    throw py::value_error(prefix(function, name) + " must be a CPU tensor, got a tensor on " +
                          std::string(py::str(tensor.attr("device"))));
  const std::string dtype = py::str(tensor.attr("dtype"));
  *bfloat16 = dtype == "torch.bfloat16" && accept != Accept::kBool;
  if (*bfloat16) {
    py::object torch = py::module_::import("sys").attr("modules")["torch"];
    return tensor.attr("detach")().attr("view")(torch.attr("int16")).attr("numpy")();
  }
  const bool ok = (dtype == "torch.float32" && allows(accept, DType::kFloat32)) ||
                  (dtype == "torch.float64" && allows(accept, DType::kFloat64)) ||
                  (dtype == "torch.bool" && allows(accept, DType::kBool));
  if (!ok) wrong_dtype(function, name, accept, dtype);
  // detach: numpy() refuses tensors that require grad; resolve_neg: and lazily negated views.
  return torch_numpy(tensor, function, name);
}

DType numpy_dtype(const py::array& array, const char* function, const char* name, Accept accept) {
  const py::dtype dt = array.dtype();
  DType dtype;
  if (dt.kind() == 'f' && dt.itemsize() == 4) {
    dtype = DType::kFloat32;
  } else if (dt.kind() == 'f' && dt.itemsize() == 8) {
    dtype = DType::kFloat64;
  } else if (dt.kind() == 'b') {
    dtype = DType::kBool;
  } else {
    wrong_dtype(function, name, accept, std::string(py::str(dt)));
  }
  if (!allows(accept, dtype)) wrong_dtype(function, name, accept, std::string(py::str(dt)));
  return dtype;
}

// Element strides, or false when the byte strides cannot be expressed as
// non-negative whole elements (then the caller copies).
bool element_strides(const py::array& array, Strides& strides) {
  const auto itemsize = static_cast<py::ssize_t>(array.itemsize());
  strides.assign(static_cast<size_t>(array.ndim()), 0);
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    if (array.shape(d) <= 1) continue;  // the stride of a size-1 dim is never used
    const py::ssize_t s = array.strides(d);
    if (s < 0 || s % itemsize != 0) return false;
    strides[static_cast<size_t>(d)] = s / itemsize;
  }
  return true;
}

}  // namespace

Tensor to_tensor(py::handle obj, const char* function, const char* name, Accept accept) {
  if (obj.is_none())
    throw py::type_error(prefix(function, name) + " must be an array or tensor, got None");
  py::array array;
  bool bfloat16 = false;
  if (py::isinstance<py::array>(obj)) {
    array = py::reinterpret_borrow<py::array>(obj);
  } else if (is_torch_tensor(obj)) {
    array = torch_to_numpy(obj, function, name, accept, &bfloat16);
  } else {
    try {
      array = py::module_::import("numpy").attr("asarray")(obj);
    } catch (py::error_already_set& e) {
      throw py::type_error(prefix(function, name) + " must be an array or tensor, got " +
                           std::string(py::str(py::type::of(obj).attr("__name__"))));
    }
  }
  const DType dtype = bfloat16 ? DType::kBFloat16 : numpy_dtype(array, function, name, accept);

  Strides strides;
  // Byte order '=' (native), '|' (not applicable) or '<' / '>' (native or not).
  const char order = array.dtype().byteorder();
  const bool native = order == '=' || order == '|' || order == (kLittleEndian ? '<' : '>');
  if (!native || !element_strides(array, strides)) {
    array = py::module_::import("numpy").attr("ascontiguousarray")(
        array, array.dtype().attr("newbyteorder")("="));
    element_strides(array, strides);
  }
  Shape shape(array.shape(), array.shape() + array.ndim());

  // The Tensor owns a reference to the array, dropped with the GIL held.
  auto* keep = new py::object(array);
  std::shared_ptr<void> owner(keep, [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  return Tensor::from_blob(const_cast<void*>(array.data()), shape, strides, dtype,
                           std::move(owner));
}

Tensor to_optional_tensor(py::handle obj, const char* function, const char* name, Accept accept) {
  if (obj.is_none()) return Tensor();
  return to_tensor(obj, function, name, accept);
}

namespace {

// Whether numpy can take t's strides as they are: non-negative, and every
// element its own memory (no expanded dims).
bool strides_exportable(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) < 0) return false;
  return elements_distinct(t);
}

// A numpy array over `holder`'s elements with its strides; the array owns it.
py::array array_owning(Tensor* holder) {
  py::capsule base(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  py::dtype dtype;
  switch (holder->dtype()) {
    case DType::kFloat32:
      dtype = py::dtype::of<float>();
      break;
    case DType::kFloat64:
      dtype = py::dtype::of<double>();
      break;
    case DType::kBool:
      dtype = py::dtype::of<bool>();
      break;
    case DType::kBFloat16:  // the bit patterns (to_python_or_none views them as torch.bfloat16)
      dtype = py::dtype::of<uint16_t>();
      break;
  }
  const auto itemsize = static_cast<py::ssize_t>(dtype_size(holder->dtype()));
  std::vector<py::ssize_t> shape(holder->shape().begin(), holder->shape().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : holder->strides()) strides.push_back(static_cast<py::ssize_t>(s) * itemsize);
  return py::array(dtype, shape, strides, holder->raw_data(), base);
}

// bfloat16 bit patterns as the torch.bfloat16 tensor they stand for (torch is
// imported: bfloat16 inputs can only have come from it); other arrays as they are.
py::object bits_as_python(py::array bits, DType dtype) {
  if (dtype != DType::kBFloat16) return bits;
  py::object torch = py::module_::import("sys").attr("modules")["torch"];
  return torch.attr("from_numpy")(bits).attr("view")(torch.attr("bfloat16"));
}

}  // namespace

py::array to_numpy(const Tensor& t) { return array_owning(new Tensor(t.contiguous())); }

py::object to_numpy_or_none(const Tensor& t) {
  if (!t.defined()) return py::none();
  return to_numpy(t);
}

py::object to_python_or_none(const Tensor& t) {
  if (!t.defined()) return py::none();
  return bits_as_python(to_numpy(t), t.dtype());
}

py::object to_python_keeping_strides(const Tensor& t) {
  if (!t.defined()) return py::none();
  if (!strides_exportable(t)) return to_python_or_none(t);
  return bits_as_python(array_owning(new Tensor(t)), t.dtype());
}

namespace {

[[noreturn]] void wrong_type(py::handle x, const char* function, const char* name,
                             const char* expected) {
  throw py::type_error(prefix(function, name) + " must be " + expected + ", got " +
                       std::string(py::str(py::type::of(x).attr("__name__"))));
}

}  // namespace

double number_argument(py::handle x, const char* function, const char* name) {
  const double value = PyFloat_AsDouble(x.ptr());
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    wrong_type(x, function, name, "a number");
  }
  return value;
}

std::optional<double> optional_number_argument(py::handle x, const char* function,
                                               const char* name) {
  if (x.is_none()) return std::nullopt;
  return number_argument(x, function, name);
}

std::optional<int64_t> optional_integer_argument(py::handle x, const char* function,
                                                 const char* name) {
  if (x.is_none()) return std::nullopt;
  if (PyFloat_Check(x.ptr())) {
    const double value = PyFloat_AsDouble(x.ptr());
    if (!(std::abs(value) < 9.0e18) || std::trunc(value) != value)
      throw py::value_error(prefix(function, name) + " must be an integer, got " +
                            std::string(py::repr(x)));
    return static_cast<int64_t>(value);
  }
  PyObject* index = PyNumber_Index(x.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    wrong_type(x, function, name, "an integer or None");
  }
  const long long value = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(prefix(function, name) + " is out of range, got " +
                          std::string(py::repr(x)));
  }
  return value;
}

std::string string_argument(py::handle x, const char* function, const char* name) {
  if (!py::isinstance<py::str>(x)) wrong_type(x, function, name, "a str");
  return x.cast<std::string>();
}

DType parse_float_dtype(py::handle dtype, const char* function, const char* name) {
  if (dtype.is_none()) return DType::kFloat32;
  const std::string text = py::str(dtype);
  std::string canonical = text;
  if (text.rfind("torch.", 0) == 0) {
    canonical = text.substr(6);
  } else {
    try {
      canonical = py::str(py::module_::import("numpy").attr("dtype")(dtype).attr("name"));
    } catch (py::error_already_set&) {
    }
  }
  if (canonical == "float32") return DType::kFloat32;
  if (canonical == "float64") return DType::kFloat64;
  // Name a numpy dtype as numpy does ("float16"), anything else as it prints.
  throw py::type_error(prefix(function, name) + " must be float32 or float64, got " + canonical);
}

}  // namespace qkv::python
