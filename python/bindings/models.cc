// qkv.models.BertModel and qkv.SentenceEncoder's compiled half (the Python
// classes in python/qkv/bert.py and python/qkv/sentence_encoder.py give the
// documented signatures).
#include <pybind11/numpy.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
#include "qkv/io/hf_cache.h"
#include "qkv/models/bert.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/sentence_encoder.h"

namespace qkv::python {

namespace {

using models::BertConfig;
using models::BertModel;
using models::SentenceEncoder;

// A [B, L] (or [L]: B = 1) integer or bool array as row-major int64 values.
struct IntMatrix {
  std::vector<int64_t> values;
  int64_t rows = 0, cols = 0;
};

IntMatrix int_matrix(py::handle obj, const char* function, const char* name) {
  const std::string what = std::string(function) + "(): argument '" + name + "'";
  py::array array = py::array::ensure(obj);
  if (!array) throw py::type_error(what + " must be an array or a sequence of ints");
  const char kind = array.dtype().kind();
  if (array.size() > 0 && kind != 'i' && kind != 'u' && kind != 'b')
    throw py::type_error(what + " must hold integers, got dtype " +
                         std::string(py::str(array.dtype())));
  if (array.ndim() != 1 && array.ndim() != 2)
    throw py::value_error(what + " must be [L] or [B, L], got " + std::to_string(array.ndim()) +
                          " dims");
  const auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  IntMatrix m;
  m.rows = array.ndim() == 2 ? array.shape(0) : 1;
  m.cols = array.ndim() == 2 ? array.shape(1) : array.shape(0);
  m.values.assign(ints.data(), ints.data() + ints.size());
  return m;
}

// A Python callable(done) as SentenceEncoder::Progress, called with the GIL
// taken (encode runs without it); None: no callback.
SentenceEncoder::Progress progress_callback(py::object callback) {
  if (callback.is_none()) return {};
  // The std::function may outlive the call's GIL: hold the callable in a
  // shared_ptr whose deleter takes the GIL to drop the reference.
  auto held = std::shared_ptr<py::object>(new py::object(std::move(callback)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  return [held](int64_t done) {
    py::gil_scoped_acquire gil;
    (*held)(done);
  };
}

py::dict config_dict(const BertConfig& c) {
  py::dict d;
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["num_hidden_layers"] = c.num_hidden_layers;
  d["num_attention_heads"] = c.num_attention_heads;
  d["intermediate_size"] = c.intermediate_size;
  d["max_position_embeddings"] = c.max_position_embeddings;
  d["type_vocab_size"] = c.type_vocab_size;
  d["layer_norm_eps"] = c.layer_norm_eps;
  d["hidden_act"] = models::bert_activation_name(c.hidden_act);
  return d;
}

}  // namespace

void bind_models(py::module_& m) {
  py::class_<BertModel> bert(m, "BertModel");
  bert.def(py::init([](const std::string& config_json, Generator* generator) {
             return BertModel(BertConfig::from_json(config_json, "config"), generator);
           }),
           py::arg("config_json"), py::arg("generator"))
      .def_static(
          "from_pretrained",
          [](const std::string& model_dir) {
            py::gil_scoped_release release;
            return BertModel::from_pretrained(model_dir);
          },
          py::arg("model_dir"))
      .def("config", [](const BertModel& self) { return config_dict(self.config()); })
      .def(
          "forward",
          [](const BertModel& self, py::handle input_ids, py::handle attention_mask,
             py::handle token_type_ids) {
            const char* fn = "BertModel.forward";
            const IntMatrix ids = int_matrix(input_ids, fn, "input_ids");
            IntMatrix mask, types;
            for (auto [obj, out, name] : {std::tuple{attention_mask, &mask, "attention_mask"},
                                          std::tuple{token_type_ids, &types, "token_type_ids"}}) {
              if (obj.is_none()) continue;
              *out = int_matrix(obj, fn, name);
              if (out->rows != ids.rows || out->cols != ids.cols)
                throw py::value_error(
                    std::string(fn) + "(): " + name + " must have the shape of " + "input_ids [" +
                    std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "], got [" +
                    std::to_string(out->rows) + ", " + std::to_string(out->cols) + "]");
            }
            Tensor hidden;
            {
              py::gil_scoped_release release;
              hidden = self.forward(ids.values, mask.values, ids.rows, types.values);
            }
            return to_numpy(hidden);
          },
          py::arg("input_ids"), py::arg("attention_mask"), py::arg("token_type_ids"))
      .def("num_parameters", &BertModel::num_parameters);
  def_state_dict<BertModel>(bert, "BertModel.load_state_dict");

  py::class_<SentenceEncoder>(m, "SentenceEncoder")
      .def(py::init([](const std::string& model_dir, const std::string& precision) {
             const Precision p = parse_precision(precision);
             py::gil_scoped_release release;
             return SentenceEncoder(model_dir, p);
           }),
           py::arg("model_dir"), py::arg("precision"))
      .def_property_readonly(
          "precision",
          [](const SentenceEncoder& self) { return std::string(precision_name(self.precision())); })
      .def(
          "encode",
          [](const SentenceEncoder& self, const std::vector<std::string>& texts, int64_t batch_size,
             py::object progress) {
            const SentenceEncoder::Progress report = progress_callback(progress);
            Tensor out;
            {
              py::gil_scoped_release release;
              out = self.encode(texts, batch_size, report);
            }
            return to_numpy(out);
          },
          py::arg("texts"), py::arg("batch_size"), py::arg("progress") = py::none())
      .def(
          "token_embeddings",
          [](const SentenceEncoder& self, const std::vector<std::string>& texts, int64_t batch_size,
             py::object progress) {
            const SentenceEncoder::Progress report = progress_callback(progress);
            std::vector<Tensor> out;
            {
              py::gil_scoped_release release;
              out = self.token_embeddings(texts, batch_size, report);
            }
            py::list arrays;
            for (const Tensor& t : out) arrays.append(to_numpy(t));
            return arrays;
          },
          py::arg("texts"), py::arg("batch_size"), py::arg("progress") = py::none())
      .def(
          "calibrate",
          [](SentenceEncoder& self, const std::vector<std::string>& texts) {
            py::gil_scoped_release release;
            self.calibrate(texts);
          },
          py::arg("texts"))
      .def(
          "forward_features",
          [](const SentenceEncoder& self, py::handle input_ids, py::handle attention_mask) {
            const char* fn = "SentenceEncoder.__call__";
            const IntMatrix ids = int_matrix(input_ids, fn, "input_ids");
            const IntMatrix mask = int_matrix(attention_mask, fn, "attention_mask");
            if (mask.rows != ids.rows || mask.cols != ids.cols)
              throw py::value_error(
                  std::string(fn) + "(): attention_mask must have input_ids' " + "shape [" +
                  std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "], got [" +
                  std::to_string(mask.rows) + ", " + std::to_string(mask.cols) + "]");
            SentenceEncoder::Features out;
            {
              py::gil_scoped_release release;
              out = self.forward_features(ids.values, mask.values, ids.rows);
            }
            return py::make_tuple(to_numpy(out.token_embeddings), to_numpy(out.sentence_embedding));
          },
          py::arg("input_ids"), py::arg("attention_mask"))
      .def("token_ids", &SentenceEncoder::token_ids, py::arg("text"))
      .def_property_readonly("dimension", &SentenceEncoder::dimension)
      .def_property("max_seq_length", &SentenceEncoder::max_seq_length,
                    &SentenceEncoder::set_max_seq_length)
      .def_property_readonly("pooling",
                             [](const SentenceEncoder& self) {
                               return std::string(models::pooling_name(self.pooling()));
                             })
      .def_property_readonly("normalize", &SentenceEncoder::normalize);

  // The Hugging Face cache lookup the CLI uses (python/qkv/_hf_cache.py words
  // its errors): the cache directory, the ids tried, the snapshot or None.
  m.def("hub_cache_dir", [] { return io::hub_cache_dir().string(); });
  m.def("hub_ids_for", &io::hub_ids_for, py::arg("model"));
  m.def(
      "find_cached_model",
      [](const std::string& model, const std::string& revision) -> py::object {
        const auto found = io::find_cached_model(model, revision);
        return found ? py::cast(found->string()) : py::none();
      },
      py::arg("model"), py::arg("revision") = "main");

  // qkv.models.load_gguf's compiled half: (DecoderModel, BpeTokenizer, info dict).
  m.def(
      "load_gguf",
      [](const std::string& path, bool exact, int64_t max_seq_len, const std::string& kv_cache) {
        const nn::KVCacheStorage storage = nn::parse_kv_cache_storage(kv_cache);
        models::GgufModel g = [&] {
          py::gil_scoped_release release;
          return models::load_gguf_model(
              path, {.exact = exact, .max_seq_len = max_seq_len, .kv_cache = storage});
        }();
        py::dict info;
        info["architecture"] = g.architecture;
        info["name"] = g.name;
        info["exact"] = g.exact;
        info["kv_cache"] = std::string(nn::kv_cache_storage_name(g.model.kv_cache_storage()));
        info["chat_template"] =
            g.chat_template_source ? py::cast(*g.chat_template_source) : py::none();
        info["end_of_turn"] = g.end_of_turn() ? py::cast(*g.end_of_turn()) : py::none();
        return py::make_tuple(std::move(g.model), std::move(g.tokenizer), info);
      },
      py::arg("path"), py::arg("exact"), py::arg("max_seq_len"), py::arg("kv_cache"));
}

}  // namespace qkv::python
