// qkv._core._tensor_info: how an input array is seen by the library, for the
// zero-copy tests in python/tests/test_inputs.py. Not a public API.
#include <cstdint>

#include "bindings.h"
#include "convert.h"

namespace qkv::python {

void bind_introspection(py::module_& m) {
  m.def(
      "_tensor_info",
      [](py::handle obj) {
        const Tensor t = to_tensor(obj, "_tensor_info", "array", Accept::kFloatOrBool);
        py::dict info;
        info["data"] = reinterpret_cast<std::uintptr_t>(t.raw_data());
        info["shape"] = py::tuple(py::cast(std::vector<int64_t>(t.shape())));
        info["strides"] = py::tuple(py::cast(std::vector<int64_t>(t.strides())));  // in elements
        info["dtype"] = dtype_name(t.dtype());
        return info;
      },
      py::arg("array"));
}

}  // namespace qkv::python
