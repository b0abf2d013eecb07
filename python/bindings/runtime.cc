// qkv.runtime: threads, instruction sets, the measured FP32 peak and the
// buffer cache.
#include "qkv/runtime.h"

#include "bindings.h"

namespace qkv::python {

namespace {

// What Python's signal handlers raised during an interrupted call, kept (with
// the GIL held) until the call has unwound to the exception translator.
PyObject* kept_type = nullptr;
PyObject* kept_value = nullptr;
PyObject* kept_traceback = nullptr;

// The interrupt check of runtime.h: runs Python's signal handlers (only the
// main thread does; elsewhere this is a no-op). Ctrl-C's handler raises
// KeyboardInterrupt, which ends the call.
bool python_signal_raised() {
  if (!Py_IsInitialized()) return false;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  Py_XDECREF(kept_type);
  Py_XDECREF(kept_value);
  Py_XDECREF(kept_traceback);
  PyErr_Fetch(&kept_type, &kept_value, &kept_traceback);
  return true;
}

}  // namespace

void raise_interrupt_exception() {
  if (kept_type == nullptr) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    return;
  }
  PyErr_Restore(kept_type, kept_value, kept_traceback);
  kept_type = kept_value = kept_traceback = nullptr;
}

void bind_runtime(py::module_& m) {
  set_interrupt_check(&python_signal_raised);
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("num_threads", &num_threads);
  m.def("kernel_isa", &kernel_isa);
  m.def("linear_kernel_isa",
        [](const std::string& precision) { return linear_kernel_isa(parse_precision(precision)); });
  m.def("supported_isas", &supported_isas);
  m.def("blas_core_name", &blas_core_name);
  // Runs for `seconds` on every thread: let other Python threads go on.
  m.def("measure_fp32_peak_gflops", &measure_fp32_peak_gflops, py::arg("seconds"),
        py::call_guard<py::gil_scoped_release>());
  m.def("set_buffer_cache_limit", &set_buffer_cache_limit, py::arg("bytes"));
  m.def("buffer_cache_limit", &buffer_cache_limit);
  m.def("buffer_cache_bytes", &buffer_cache_bytes);
  m.def("empty_buffer_cache", &empty_buffer_cache);
}

}  // namespace qkv::python
