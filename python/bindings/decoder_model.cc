// qkv.DecoderModel and qkv.DecoderSession's compiled half (the Python classes
// in python/qkv/models.py parse the config and give the documented signatures).
#include "qkv/nn/decoder_model.h"

#include <pybind11/numpy.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "options.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/sampling.h"

namespace qkv::python {

namespace {

using nn::DecoderModel;
using nn::DecoderSession;

// Token ids from a Python int sequence or integer array of 1 or 2 dims:
// -> (row-major ids, batch size)
std::pair<std::vector<int64_t>, int64_t> token_ids(py::handle obj, const char* function) {
  // numpy would hold a Python int past int64 as uint64, or the whole list as
  // float64 or object: name such an id as the caller wrote it.
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    int64_t index = 0;
    auto check = [&](py::handle item) {
      if (!PyLong_Check(item.ptr())) return;
      int overflow = 0;
      PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
      if (overflow != 0)
        throw py::value_error(std::string(function) + ": ids[" + std::to_string(index) + "] = " +
                              std::string(py::str(item)) + " is not a token id (outside int64)");
    };
    for (py::handle row : obj) {
      if (py::isinstance<py::list>(row) || py::isinstance<py::tuple>(row))
        for (py::handle item : row) check(item), ++index;
      else
        check(row), ++index;
    }
  }
  py::array array = py::array::ensure(obj);
  if (!array) throw py::type_error(std::string(function) + ": ids must be a sequence of ints");
  if (array.size() > 0 && !py::isinstance<py::array_t<int64_t>>(array) &&
      array.dtype().kind() != 'i' && array.dtype().kind() != 'u')
    throw py::type_error(std::string(function) + ": ids must be integers, got dtype " +
                         std::string(py::str(array.dtype())));
  if (array.ndim() != 1 && array.ndim() != 2)
    throw py::value_error(std::string(function) + ": ids must be [T] or [B, T], got " +
                          std::to_string(array.ndim()) + " dims");
  // forcecast would wrap uint64 ids past 2^63 - 1 to negative numbers: name them as given.
  if (array.dtype().kind() == 'u' && array.itemsize() == 8) {
    const auto big =
        py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(array);
    for (py::ssize_t i = 0; i < big.size(); ++i)
      if (big.data()[i] > static_cast<uint64_t>(INT64_MAX))
        throw py::value_error(std::string(function) + ": ids[" + std::to_string(i) + "] = " +
                              std::to_string(big.data()[i]) + " is not a token id (outside int64)");
  }
  const auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  const int64_t batch = array.ndim() == 2 ? array.shape(0) : 1;
  return {std::vector<int64_t>(ints.data(), ints.data() + ints.size()), batch};
}

// (max_new_tokens, temperature, top_k, top_p, seed, stop_token or None), as
// python/qkv/models.py's _generation_args passes them (range-checked there).
nn::GenerationOptions generation_options(py::handle args, const char* function) {
  Options a(args, function);
  nn::GenerationOptions o;
  o.max_new_tokens = a.integer("max_new_tokens");
  o.sampling.temperature = a.number("temperature");
  o.sampling.top_k = a.integer("top_k");
  o.sampling.top_p = a.number("top_p");
  o.seed = a.next("seed").cast<uint64_t>();
  o.stop_token = a.optional_integer("stop_token");
  a.done();
  check_sampling_options(o.sampling);
  return o;
}

// A copy of session logits [B, vocab] (the session reuses its buffer).
py::array logits_copy(const Tensor& logits) { return to_numpy(logits.clone()); }

// prefill and step: `run` feeds the session without the GIL; -> its new logits.
template <class Run>
py::array logits_after(DecoderSession& session, Run&& run) {
  {
    py::gil_scoped_release release;
    run();
  }
  return logits_copy(session.logits());
}

}  // namespace

void bind_decoder_model(py::module_& m) {
  // The C++ reader's checks of a config (JSON depth, numbers, fields, sizes).
  m.def("check_decoder_config_json",
        [](const std::string& config_json) { models::decoder_config_from_json(config_json); });
  py::class_<DecoderModel, nn::Module>(m, "DecoderModel")
      .def(py::init([](const std::string& config_json, Generator* generator) {
             return DecoderModel(models::decoder_config_from_json(config_json), generator);
           }),
           py::arg("config_json"), py::arg("generator"))
      .def("config_json",
           [](const DecoderModel& self) { return models::decoder_config_to_json(self.config()); })
      .def(
          "forward",
          [](DecoderModel& self, py::handle ids) {
            const auto [flat, batch] = token_ids(ids, "DecoderModel.forward");
            Tensor logits;
            {
              py::gil_scoped_release release;
              logits = self.forward(flat, batch);
            }
            return to_numpy(logits);
          },
          py::arg("ids"))
      .def(
          "save",
          [](const DecoderModel& self, const std::string& path,
             const std::map<std::string, std::string>& metadata) {
            models::save_decoder_model(self, path, metadata);
          },
          py::arg("path"), py::arg("metadata"))
      .def_static(
          "load",
          [](const std::string& path) {
            io::SafetensorsMetadata metadata;
            DecoderModel model = models::load_decoder_model(path, &metadata);
            return py::make_tuple(std::move(model), metadata);
          },
          py::arg("path"))
      .def("num_parameters", &DecoderModel::num_parameters)
      .def(
          "generate",
          [](DecoderModel& self, py::handle prompt, py::handle options) {
            const auto [ids, batch] = token_ids(prompt, "DecoderModel.generate");
            if (batch != 1)
              throw py::value_error("DecoderModel.generate: the prompt must be one sequence [T]");
            const nn::GenerationOptions o = generation_options(options, "DecoderModel.generate");
            py::gil_scoped_release release;
            return nn::generate(self, ids, o);
          },
          py::arg("prompt"), py::arg("options"));

  py::class_<DecoderSession>(m, "DecoderSession")
      .def(py::init<DecoderModel&, int64_t, int64_t>(), py::arg("model"), py::arg("batch_size"),
           py::arg("max_len"), py::keep_alive<1, 2>())
      .def(
          "prefill",
          [](DecoderSession& self, py::handle ids) {
            const auto [flat, batch] = token_ids(ids, "DecoderSession.prefill");
            if (batch != self.batch_size() && !(batch == 1 && self.batch_size() == 1))
              throw py::value_error("DecoderSession.prefill: ids must be [B, T] with B = " +
                                    std::to_string(self.batch_size()));
            return logits_after(self, [&] { self.prefill(flat); });
          },
          py::arg("ids"))
      .def(
          "step",
          [](DecoderSession& self, py::handle tokens) {
            const auto [flat, batch] = token_ids(tokens, "DecoderSession.step");
            return logits_after(self, [&] { self.step(flat); });
          },
          py::arg("tokens"))
      .def(
          "decode",
          [](DecoderSession& self, py::handle options) {
            const nn::GenerationOptions o = generation_options(options, "DecoderSession.decode");
            py::gil_scoped_release release;
            return self.decode(o);
          },
          py::arg("options"))
      .def("reset", &DecoderSession::reset)
      .def_property_readonly("length", &DecoderSession::length)
      .def_property_readonly("max_len", &DecoderSession::max_len)
      .def_property_readonly("batch_size", &DecoderSession::batch_size);
}

}  // namespace qkv::python
