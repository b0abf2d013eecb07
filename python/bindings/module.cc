// qkv._core: the compiled half of the Python package `qkv`.
//
// The Python modules under python/qkv give these functions torch's names,
// signatures and docstrings; _core itself is not a public API.
#include <exception>

#include "bindings.h"
#include "qkv/error.h"

PYBIND11_MODULE(_core, m) {
  namespace py = pybind11;
  m.doc() = "Compiled core of qkv; use the public modules qkv and qkv.nn instead.";

  // qkv::Error carries the Python exception type it should become.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const qkv::Error& e) {
      switch (e.kind()) {
        case qkv::ErrorKind::kType:
          PyErr_SetString(PyExc_TypeError, e.what());
          return;
        case qkv::ErrorKind::kIO:
          // OSError(errno, message) is the subclass for errno: FileNotFoundError
          // for ENOENT, PermissionError for EACCES, ...
          if (e.os_error() != 0) {
            PyObject* args = Py_BuildValue("(is)", e.os_error(), e.what());
            if (args) {
              PyErr_SetObject(PyExc_OSError, args);
              Py_DECREF(args);
              return;
            }
            PyErr_Clear();  // the message is not UTF-8: raise it as plain OSError
          }
          PyErr_SetString(PyExc_OSError, e.what());
          return;
        case qkv::ErrorKind::kValue:
          PyErr_SetString(PyExc_ValueError, e.what());
          return;
        case qkv::ErrorKind::kMemory:
          PyErr_SetString(PyExc_MemoryError, e.what());
          return;
        case qkv::ErrorKind::kInterrupted:
          qkv::python::raise_interrupt_exception();
          return;
      }
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  qkv::python::bind_generator(m);
  qkv::python::bind_module_core(m);
  qkv::python::bind_functional(m);
  qkv::python::bind_masks(m);
  qkv::python::bind_multihead_attention(m);
  qkv::python::bind_introspection(m);
  qkv::python::bind_decoder_model(m);
  qkv::python::bind_runtime(m);
  qkv::python::bind_layers(m);
  qkv::python::bind_transformer(m);
  qkv::python::bind_positional(m);
  qkv::python::bind_optim(m);
  qkv::python::bind_models(m);
  qkv::python::bind_text(m);
  qkv::python::bind_gguf_blocks(m);
  qkv::python::bind_explore(m);
  qkv::python::bind_module_backward(m);
}
