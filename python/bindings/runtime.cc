// qkv.runtime: threads, instruction sets, the measured FP32 peak and the
// buffer cache.
#include "qkv/runtime.h"

#include "bindings.h"

namespace qkv::python {

void bind_runtime(py::module_& m) {
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("num_threads", &num_threads);
  m.def("kernel_isa", &kernel_isa);
  m.def("supported_isas", &supported_isas);
  m.def("blas_core_name", &blas_core_name);
  // Runs for `seconds` on every thread: let other Python threads go on.
  m.def("measure_fp32_peak_gflops", &measure_fp32_peak_gflops, py::arg("seconds") = 0.2,
        py::call_guard<py::gil_scoped_release>());
  m.def("set_buffer_cache_limit", &set_buffer_cache_limit, py::arg("bytes"));
  m.def("buffer_cache_limit", &buffer_cache_limit);
  m.def("buffer_cache_bytes", &buffer_cache_bytes);
  m.def("empty_buffer_cache", &empty_buffer_cache);
}

}  // namespace qkv::python
