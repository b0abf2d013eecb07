// qkv.text: the WordPiece and BPE tokenizers (GGUF's "gpt2" and "llama"), Jinja chat
// templates. python/qkv/text.py gives it its Python face (keyword arguments, None for absent
// tokens, BatchEncoding).
#include <pybind11/numpy.h>

#include <cstring>
#include <optional>

#include "bindings.h"
#include "qkv/io/gguf.h"
#include "qkv/models/gguf_model.h"
#include "qkv/text/bpe_tokenizer.h"
#include "qkv/text/chat_template.h"
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

  using text::BpeStreamDecoder;
  using text::BpeTokenizer;
  using text::BpeVocabulary;
  using text::ChatMessage;
  using text::ChatTemplate;

  py::class_<BpeTokenizer>(m, "BpeTokenizer")
      .def(py::init([](std::string model, std::vector<std::string> tokens,
                       std::vector<std::string> merges, std::vector<float> scores,
                       std::vector<int32_t> token_types, std::string pre_tokenizer,
                       bool add_space_prefix, std::optional<int32_t> bos,
                       std::optional<int32_t> eos, std::optional<int32_t> unk,
                       std::optional<int32_t> pad, bool add_bos, bool add_eos) {
             BpeVocabulary v;
             v.model = std::move(model);
             v.tokens = std::move(tokens);
             v.merges = std::move(merges);
             v.scores = std::move(scores);
             v.token_types = std::move(token_types);
             v.pre_tokenizer = std::move(pre_tokenizer);
             v.add_space_prefix = add_space_prefix;
             v.bos = bos;
             v.eos = eos;
             v.unk = unk;
             v.pad = pad;
             v.add_bos = add_bos;
             v.add_eos = add_eos;
             py::gil_scoped_release release;
             return BpeTokenizer(std::move(v));
           }),
           py::arg("model"), py::arg("tokens"), py::arg("merges"), py::arg("scores"),
           py::arg("token_types"), py::arg("pre_tokenizer"), py::arg("add_space_prefix"),
           py::arg("bos"), py::arg("eos"), py::arg("unk"), py::arg("pad"), py::arg("add_bos"),
           py::arg("add_eos"))
      // The tokenizer of a GGUF file's tokenizer.ggml.* metadata (no weights read).
      .def_static(
          "from_gguf",
          [](const std::string& path) {
            py::gil_scoped_release release;
            return models::gguf_bpe_tokenizer(io::GgufFile(path));
          },
          py::arg("path"))
      .def("encode", &BpeTokenizer::encode, py::arg("text"), py::arg("add_special"),
           py::arg("parse_special"), py::call_guard<py::gil_scoped_release>())
      .def(
          "decode",
          [](const BpeTokenizer& self, const std::vector<int32_t>& ids, bool skip_special) {
            py::gil_scoped_release release;
            return self.decode(ids, skip_special);
          },
          py::arg("ids"), py::arg("skip_special"))
      .def("pre_tokenize", &BpeTokenizer::pre_tokenize, py::arg("text"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "token_to_piece",
          [](const BpeTokenizer& self, int32_t id) {
            const std::string_view piece = self.token_to_piece(id);
            return py::bytes(piece.data(), piece.size());
          },
          py::arg("id"))
      .def("token", &BpeTokenizer::token, py::arg("id"))
      .def("id_of", &BpeTokenizer::id_of, py::arg("token"))
      .def("token_type", [](const BpeTokenizer& self,
                            int32_t id) { return static_cast<int32_t>(self.token_type(id)); })
      .def("size", &BpeTokenizer::size)
      .def("bos", &BpeTokenizer::bos)
      .def("eos", &BpeTokenizer::eos)
      .def("unk", &BpeTokenizer::unk)
      .def("pad", &BpeTokenizer::pad)
      .def("pre_tokenizer", [](const BpeTokenizer& self) { return self.pre_tokenizer(); })
      .def("model", [](const BpeTokenizer& self) { return self.model(); })
      .def_static(
          "bytes_to_unicode",
          [](const py::bytes& b) { return BpeTokenizer::bytes_to_unicode(std::string(b)); },
          py::arg("data"));

  // Holds the tokenizer alive as long as the decoder.
  py::class_<BpeStreamDecoder>(m, "BpeStreamDecoder")
      .def(py::init<const BpeTokenizer&, bool>(), py::arg("tokenizer"), py::arg("skip_special"),
           py::keep_alive<1, 2>())
      .def("push", &BpeStreamDecoder::push, py::arg("id"))
      .def("finish", &BpeStreamDecoder::finish);

  // Rendering runs without the GIL: a template's work is bounded (chat_template.h).
  py::class_<ChatTemplate>(m, "ChatTemplate")
      .def_static(
          "from_jinja",
          [](std::string_view source, std::string bos, std::string eos) {
            return ChatTemplate::from_jinja(source, {std::move(bos), std::move(eos)});
          },
          py::arg("source"), py::arg("bos_token") = "", py::arg("eos_token") = "")
      .def_static(
          "builtin",
          [](std::string_view name, std::string bos, std::string eos) {
            return ChatTemplate::builtin(name, {std::move(bos), std::move(eos)});
          },
          py::arg("name"), py::arg("bos_token") = "", py::arg("eos_token") = "")
      .def_static("builtin_names", &ChatTemplate::builtin_names)
      .def("render_json", &ChatTemplate::render_json, py::arg("variables_json"),
           py::call_guard<py::gil_scoped_release>())
      .def("source", &ChatTemplate::source)
      .def(
          "apply",
          [](const ChatTemplate& self,
             const std::vector<std::pair<std::string, std::string>>& messages,
             bool add_generation_prompt) {
            std::vector<ChatMessage> chat;
            chat.reserve(messages.size());
            for (const auto& [role, content] : messages) chat.push_back({role, content});
            py::gil_scoped_release release;
            return self.apply(chat, add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt"));
}

}  // namespace qkv::python
