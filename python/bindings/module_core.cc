// qkv._core.Module: what every compiled nn module has (nn::Module's state
// dict, mode and precision), bound once; the module classes derive from it.
#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "qkv/nn/module.h"

namespace qkv::python {

void bind_module_core(py::module_& m) {
  py::class_<nn::Module>(m, "Module")
      .def("state_dict",
           [](const nn::Module& self) { return state_dict_to_python(self.state_dict()); })
      // Python's parameters(): the module's own memory, not copies.
      .def("_parameter_views",
           [](const nn::Module& self) { return parameter_views(self.state_dict()); })
      .def(
          "load_state_dict",
          [](nn::Module& self, const py::dict& state) {
            const std::string function = std::string(self.type_name()) + ".load_state_dict";
            self.load_state_dict(state_dict_from_python(state, function.c_str()));
          },
          py::arg("state_dict"))
      .def(
          "train", [](nn::Module& self, bool mode) { self.train(mode); }, py::arg("mode") = true)
      .def("eval", [](nn::Module& self) { self.eval(); })
      .def_property_readonly("training", &nn::Module::is_training)
      .def(
          "set_precision",
          [](nn::Module& self, const std::string& precision) {
            self.set_precision(parse_precision(precision));
          },
          py::arg("precision"))
      .def(
          "record_input_ranges", [](nn::Module& self, bool on) { self.record_input_ranges(on); },
          py::arg("on") = true)
      .def_property_readonly("precision", [](const nn::Module& self) {
        return std::string(precision_name(self.precision()));
      });
}

}  // namespace qkv::python
