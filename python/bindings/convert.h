// Conversion between Python arrays and qkv::Tensor.
//
// Inputs may be numpy arrays, CPU torch tensors or anything numpy.asarray
// accepts. They are wrapped without copying whenever the layout allows it
// (any non-negative strides that are whole elements, which covers transposed
// and sliced views); the Tensor keeps the Python object alive through its
// owner. Outputs are numpy arrays that share the Tensor's buffer and keep it
// alive through a capsule.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "qkv/tensor.h"

namespace qkv::python {

namespace py = pybind11;

// The dtypes an argument accepts.
enum class Accept { kFloat, kBool, kFloatOrBool };

// `function` and `name` name the call and the argument in error messages:
// "scaled_dot_product_attention(): argument 'query' must be ...".
Tensor to_tensor(py::handle obj, const char* function, const char* name, Accept accept);
// As to_tensor, with None giving an undefined Tensor.
Tensor to_optional_tensor(py::handle obj, const char* function, const char* name, Accept accept);

// A numpy array over the tensor's elements (made contiguous first if needed).
// (bfloat16 comes out as its uint16 bit patterns: numpy has no bfloat16.)
py::array to_numpy(const Tensor& t);
// None for an undefined Tensor.
py::object to_numpy_or_none(const Tensor& t);
// to_numpy, except that a bfloat16 result (it came from torch.bfloat16
// inputs) goes back as a torch.bfloat16 tensor over the same memory; None
// for an undefined Tensor.
py::object to_python_or_none(const Tensor& t);
// to_python_or_none keeping the tensor's strides instead of copying it
// contiguous: for results qkv laid out like the caller's inputs
// (SdpaLayout::kLikeInputs), which torch.from_numpy then takes as they are.
// (Strides must be non-negative with distinct elements, else it copies.)
py::object to_python_keeping_strides(const Tensor& t);

// Scalar arguments taken as handles, so that a wrong type names the argument
// instead of pybind11 listing the whole signature (and printing the arrays).
// A number (int, float, numpy or 0-d torch scalar):
double number_argument(py::handle x, const char* function, const char* name);
// None, or a number:
std::optional<double> optional_number_argument(py::handle x, const char* function,
                                               const char* name);
// None, or an integer (an integral float too, as int() takes it):
std::optional<int64_t> optional_integer_argument(py::handle x, const char* function,
                                                 const char* name);
// A str:
std::string string_argument(py::handle x, const char* function, const char* name);

// "float32" / "float64" (also numpy or torch dtypes, via str()) -> DType.
DType parse_float_dtype(py::handle dtype, const char* function, const char* name);

}  // namespace qkv::python
