// qkv.explore's compiled half: viz::AttentionExplorer and its maps (the Python
// classes in python/qkv/explore.py give the documented signatures).
#include "qkv/viz/explore.h"

#include <string>

#include "bindings.h"
#include "convert.h"

namespace qkv::python {

void bind_explore(py::module_& m) {
  py::class_<viz::AttentionMaps>(m, "AttentionMaps")
      .def_readonly("model", &viz::AttentionMaps::model)
      .def_readonly("architecture", &viz::AttentionMaps::architecture)
      .def_readonly("text", &viz::AttentionMaps::text)
      .def_readonly("text_b", &viz::AttentionMaps::text_b)
      .def_readonly("ids", &viz::AttentionMaps::ids)
      .def_readonly("tokens", &viz::AttentionMaps::tokens)
      .def_readonly("segments", &viz::AttentionMaps::segments)
      .def_readonly("scales", &viz::AttentionMaps::scales)
      .def_property_readonly("weights",
                             [](const viz::AttentionMaps& self) { return to_numpy(self.weights); })
      .def_property_readonly("scores",
                             [](const viz::AttentionMaps& self) { return to_numpy(self.scores); })
      .def_property_readonly("allowed",
                             [](const viz::AttentionMaps& self) { return to_numpy(self.allowed); })
      .def_property_readonly("values",
                             [](const viz::AttentionMaps& self) { return to_numpy(self.values); })
      .def("json", &viz::explore_json)
      .def(
          "html",
          [](const viz::AttentionMaps& self, const std::string& live_endpoint) {
            return viz::explore_html(self, {.live_endpoint = live_endpoint});
          },
          py::arg("live_endpoint") = "");

  py::class_<viz::AttentionExplorer>(m, "AttentionExplorer")
      .def(py::init([](const std::string& model) {
             py::gil_scoped_release release;
             return viz::AttentionExplorer(model);
           }),
           py::arg("model"))
      .def_property_readonly("name", &viz::AttentionExplorer::name)
      .def_property_readonly("causal", &viz::AttentionExplorer::causal)
      .def(
          "explore",
          [](viz::AttentionExplorer& self, const std::string& text, const std::string& text_b,
             int64_t max_weights, int64_t pad_to) {
            py::gil_scoped_release release;
            return self.explore(text,
                                {.text_b = text_b, .max_weights = max_weights, .pad_to = pad_to});
          },
          py::arg("text"), py::arg("text_b"), py::arg("max_weights"), py::arg("pad_to"));
}

}  // namespace qkv::python
