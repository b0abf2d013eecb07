// qkv.Generator, qkv.manual_seed and the default generator.
#include "qkv/generator.h"

#include "bindings.h"

namespace qkv::python {

void bind_generator(py::module_& m) {
  py::class_<Generator>(m, "Generator",
                        "A seeded random stream (xoshiro256**); the same seed gives the same "
                        "numbers on every machine.")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def(
          "manual_seed",
          [](Generator& gen, uint64_t seed) -> Generator& {
            gen.manual_seed(seed);
            return gen;
          },
          py::arg("seed"), py::return_value_policy::reference_internal,
          "Restarts the stream from `seed`; returns this generator.")
      .def("next_u64", &Generator::next_u64, "The next raw 64-bit number.")
      .def("uniform", &Generator::uniform, "Uniform in [0, 1) with 53 random bits.")
      .def("normal", &Generator::normal, "Standard normal.");

  // The process-wide generator lives as long as the process: Python only borrows it.
  m.def(
      "default_generator", []() -> Generator& { return default_generator(); },
      py::return_value_policy::reference);
  m.def(
      "manual_seed",
      [](uint64_t seed) -> Generator& {
        manual_seed(seed);
        return default_generator();
      },
      py::arg("seed"), py::return_value_policy::reference);
}

}  // namespace qkv::python
