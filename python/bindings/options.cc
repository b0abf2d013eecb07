// Options: the fields of one call's options tuple (options.h).
#include "options.h"

namespace qkv::python {

namespace {

[[noreturn]] void internal_error(const char* function, const std::string& what) {
  throw std::logic_error(std::string(function) + "(): qkv's Python layer and its bindings " +
                         "disagree about the arguments: " + what);
}

}  // namespace

Options::Options(py::handle options, const char* function) : tuple_(options), function_(function) {
  if (!PyTuple_Check(options.ptr()))
    internal_error(function, "expected a tuple, got " +
                                 std::string(py::str(py::type::of(options).attr("__name__"))));
}

py::handle Options::next(const char* name) {
  if (index_ >= static_cast<size_t>(PyTuple_GET_SIZE(tuple_.ptr())))
    internal_error(function_, "no field " + std::to_string(index_) + " ('" + name + "')");
  return PyTuple_GET_ITEM(tuple_.ptr(), static_cast<Py_ssize_t>(index_++));
}

Tensor Options::tensor(const char* name, Accept accept) {
  return to_tensor(next(name), function_, name, accept);
}

Tensor Options::optional_tensor(const char* name, Accept accept) {
  return to_optional_tensor(next(name), function_, name, accept);
}

double Options::number(const char* name) { return number_argument(next(name), function_, name); }

std::optional<double> Options::optional_number(const char* name) {
  return optional_number_argument(next(name), function_, name);
}

int64_t Options::integer(const char* name) {
  const py::handle x = next(name);
  if (x.is_none())
    throw py::type_error(std::string(function_) + "(): argument '" + name +
                         "' must be an integer, got NoneType");
  return *optional_integer_argument(x, function_, name);
}

std::optional<int64_t> Options::optional_integer(const char* name) {
  return optional_integer_argument(next(name), function_, name);
}

bool Options::flag(const char* name) {
  const py::handle x = next(name);
  if (x.ptr() == Py_True) return true;
  if (x.ptr() == Py_False || x.is_none()) return false;
  const int truth = PyObject_IsTrue(x.ptr());
  if (truth < 0) {  // e.g. an array of several elements
    PyErr_Clear();
    throw py::type_error(std::string(function_) + "(): argument '" + name +
                         "' must be a bool, got " +
                         std::string(py::str(py::type::of(x).attr("__name__"))));
  }
  return truth != 0;
}

std::optional<bool> Options::optional_flag(const char* name) {
  const py::handle x = next(name);
  if (x.is_none()) return std::nullopt;
  --index_;
  return flag(name);
}

std::string Options::string(const char* name) {
  return string_argument(next(name), function_, name);
}

DType Options::dtype(const char* name) { return parse_float_dtype(next(name), function_, name); }

// Taken as a handle: pybind11 would first try None as a Generator* without
// conversion and look for a foreign type through an AttributeError raised and
// cleared, ~15 % of a small call.
Generator* Options::generator(const char* name) {
  const py::handle x = next(name);
  if (x.is_none()) return nullptr;
  if (!py::isinstance<Generator>(x))
    throw py::type_error(std::string(function_) + "(): argument '" + name +
                         "' must be a qkv.Generator or None, got " +
                         std::string(py::str(py::type::of(x).attr("__name__"))));
  return x.cast<Generator*>();
}

void Options::done() const {
  const auto size = static_cast<size_t>(PyTuple_GET_SIZE(tuple_.ptr()));
  if (index_ != size)
    internal_error(function_,
                   "read " + std::to_string(index_) + " of " + std::to_string(size) + " fields");
}

}  // namespace qkv::python
