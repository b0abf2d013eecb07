// What the bindings of qkv's nn modules share: state_dict conversion and the
// methods every module has (train, eval, training, state_dict,
// load_state_dict, set_generator). The Python classes in python/qkv/nn add
// torch's argument parsing, key order and strict=False on top.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "qkv/generator.h"
#include "qkv/nn/module.h"
#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::python {

// name -> numpy array, in the order of `state` (an nn::StateDict: torch's).
// Copies, so that changing a returned array never changes the module behind
// its back.
template <class State>
py::dict state_dict_to_python(const State& state) {
  py::dict out;
  for (const auto& [name, t] : state) out[name.c_str()] = to_numpy(t.clone());
  return out;
}

// [(name, array)] in the order of `state`, each array over the parameter's
// own memory (no copy): writing into it, as an optimizer does, changes the
// model. The array keeps the memory alive, even past the model.
template <class State>
py::list parameter_views(const State& state) {
  py::list out;
  for (const auto& [name, t] : state) {
    if (!t.is_contiguous())  // to_numpy would copy: the view would not be live
      throw py::value_error("parameters(): parameter '" + name + "' is not contiguous");
    out.append(py::make_tuple(name, to_numpy(t)));
  }
  return out;
}

// A mapping name -> numpy array or CPU torch tensor, read without copying;
// `function` names the call in errors ("Linear.load_state_dict").
inline std::map<std::string, Tensor> state_dict_from_python(const py::dict& state,
                                                            const char* function) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [key, value] : state) {
    const std::string name = py::str(key);
    const std::string what = "state_dict['" + name + "']";
    tensors[name] = to_tensor(value, function, what.c_str(), Accept::kFloat);
  }
  return tensors;
}

// state_dict(), _parameter_views() and load_state_dict(dict) for a model that is not an
// nn::Module (BertModel); the modules get theirs from qkv._core.Module.
template <class Model, class PyClass>
void def_state_dict(PyClass& cls, std::string load_name) {
  cls.def("state_dict", [](const Model& self) { return state_dict_to_python(self.state_dict()); })
      .def("_parameter_views", [](const Model& self) { return parameter_views(self.state_dict()); })
      .def(
          "load_state_dict",
          [load_name](Model& self, const py::dict& state) {
            self.load_state_dict(state_dict_from_python(state, load_name.c_str()));
          },
          py::arg("state_dict"));
}

// set_generator(gen), for the modules that draw dropout.
template <class PyClass>
void def_set_generator(PyClass& cls) {
  // The module keeps a raw pointer: keep the Generator alive as long as the module.
  cls.def(
      "set_generator", [](nn::Module& self, Generator* gen) { self.set_generator(gen); },
      py::arg("generator"), py::keep_alive<1, 2>());
}

// Runs `forward` with the GIL released unless dropout may draw from the shared
// default generator (training mode with p > 0).
template <class F>
auto without_gil_unless(bool draws_random, F&& forward) {
  std::optional<py::gil_scoped_release> release;
  if (!draws_random) release.emplace();
  return forward();
}

// A trainable module's parameters as the optimizers see them: values and
// gradient buffers shared with the module (no copies), so that
// qkv.optim.AdamW(module) updates the module itself from what its backward
// accumulated. Python gets it from module._impl._parameter_list().
struct ModuleParameters {
  std::vector<nn::Parameter> params;
};

}  // namespace qkv::python
