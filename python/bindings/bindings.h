// The parts of the extension module qkv._core, one per source file.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional, std::vector arguments

namespace qkv::python {

namespace py = pybind11;

void bind_generator(py::module_& m);            // generator.cc
void bind_module_core(py::module_& m);          // module_core.cc (before the modules)
void bind_functional(py::module_& m);           // functional.cc
void bind_masks(py::module_& m);                // masks.cc
void bind_multihead_attention(py::module_& m);  // multihead_attention.cc
void bind_introspection(py::module_& m);        // introspection.cc
void bind_decoder_model(py::module_& m);        // decoder_model.cc
void bind_runtime(py::module_& m);              // runtime.cc
void bind_layers(py::module_& m);               // layers.cc
void bind_transformer(py::module_& m);          // transformer.cc
void bind_positional(py::module_& m);           // positional.cc
void bind_optim(py::module_& m);                // optim.cc
void bind_models(py::module_& m);               // models.cc
void bind_text(py::module_& m);                 // text.cc
void bind_gguf_blocks(py::module_& m);          // gguf_blocks.cc
void bind_explore(py::module_& m);              // explore.cc
void bind_module_backward(py::module_& m);      // module_backward.cc (after the modules)

// Raises, as the current Python error, what Python's signal handlers raised
// while a call was interrupted (runtime.cc); KeyboardInterrupt if nothing was kept.
void raise_interrupt_exception();

}  // namespace qkv::python
