// qkv.text: the WordPiece tokenizer. python/qkv/text.py gives it its
// Python face (keyword arguments, None for absent tokens, BatchEncoding).
#include <pybind11/numpy.h>

#include <cstring>

#include "bindings.h"
#include "qkv/text/wordpiece_tokenizer.h"

namespace qkv::python {

namespace {

using text::EncodedBatch;
using text::WordPieceOptions;
using text::WordPieceTokenizer;

// [batch, length] int64 array holding a copy of `values`.
py::array_t<int64_t> to_array(const std::vector<int64_t>& values, int64_t batch, int64_t length) {
  py::array_t<int64_t> array({batch, length});
  if (!values.empty())
    std::memcpy(array.mutable_data(), values.data(), values.size() * sizeof(int64_t));
  return array;
}

}  // namespace

void bind_text(py::module_& m) {
  py::class_<WordPieceOptions>(m, "WordPieceOptions")
      .def(py::init<>())
      .def_readwrite("lowercase", &WordPieceOptions::lowercase)
      .def_readwrite("strip_accents", &WordPieceOptions::strip_accents)
      .def_readwrite("split_chinese_chars", &WordPieceOptions::split_chinese_chars)
      .def_readwrite("clean_text", &WordPieceOptions::clean_text)
      .def_readwrite("unk_token", &WordPieceOptions::unk_token)
      .def_readwrite("cls_token", &WordPieceOptions::cls_token)
      .def_readwrite("sep_token", &WordPieceOptions::sep_token)
      .def_readwrite("pad_token", &WordPieceOptions::pad_token)
      .def_readwrite("special_tokens", &WordPieceOptions::special_tokens)
      .def_readwrite("continuing_prefix", &WordPieceOptions::continuing_prefix)
      .def_readwrite("max_input_chars_per_word", &WordPieceOptions::max_input_chars_per_word)
      .def_readwrite("max_length", &WordPieceOptions::max_length)
      .def_readwrite("truncate_left", &WordPieceOptions::truncate_left)
      .def_readwrite("pad_to_length", &WordPieceOptions::pad_to_length)
      .def_readwrite("pad_to_multiple_of", &WordPieceOptions::pad_to_multiple_of)
      .def_readwrite("pad_left", &WordPieceOptions::pad_left);

  // Text arguments are std::string_view: str (UTF-8) or bytes (any bytes;
  // invalid UTF-8 becomes U+FFFD). The work runs without the GIL.
  py::class_<WordPieceTokenizer>(m, "WordPieceTokenizer")
      .def_static(
          "from_json", [](const std::string& path) { return WordPieceTokenizer::from_json(path); },
          py::arg("path"))
      .def_static(
          "from_vocab",
          [](const std::string& path, const WordPieceOptions& options) {
            return WordPieceTokenizer::from_vocab(path, options);
          },
          py::arg("path"), py::arg("options"))
      .def("basic_tokenize", &WordPieceTokenizer::basic_tokenize, py::arg("text"),
           py::call_guard<py::gil_scoped_release>())
      .def("tokenize", &WordPieceTokenizer::tokenize, py::arg("text"),
           py::call_guard<py::gil_scoped_release>())
      .def("encode", &WordPieceTokenizer::encode, py::arg("text"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "encode_batch",
          [](const WordPieceTokenizer& self, const std::vector<std::string>& texts) {
            EncodedBatch batch;
            {
              py::gil_scoped_release release;
              batch = self.encode_batch(texts);
            }
            return py::make_tuple(to_array(batch.ids, batch.batch, batch.length),
                                  to_array(batch.attention_mask, batch.batch, batch.length));
          },
          py::arg("texts"))
      .def("set_max_length", &WordPieceTokenizer::set_max_length, py::arg("max_length"))
      .def("set_padding", &WordPieceTokenizer::set_padding, py::arg("pad_to_length"),
           py::arg("pad_to_multiple_of"))
      .def("token_to_id", &WordPieceTokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", &WordPieceTokenizer::id_to_token, py::arg("id"))
      .def("vocab_size", &WordPieceTokenizer::vocab_size)
      .def("options", &WordPieceTokenizer::options);
}

}  // namespace qkv::python
