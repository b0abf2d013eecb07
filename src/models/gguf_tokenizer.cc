// models::gguf_bpe_tokenizer: tokenizer.ggml.* -> text::BpeTokenizer, the
// vocabulary transformers' GGUF loader builds (integrations/gguf/
// gguf_tokenizer_mapping.py), so that the ids are the same.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "qkv/error.h"
#include "qkv/models/gguf_model.h"

namespace qkv::models {

namespace {

// An optional token id key, which must fit in int32 (the tokenizer checks the vocabulary range).
std::optional<int32_t> token_id(const io::GgufFile& f, const std::string& key) {
  const std::optional<int64_t> v = f.find_integer(key);
  if (!v) return std::nullopt;
  QKV_CHECK(*v >= 0 && *v <= std::numeric_limits<int32_t>::max(), "GGUF file '", f.source(),
            "': ", key, " is ", *v, ", not a token id");
  return static_cast<int32_t>(*v);
}

// A boolean key that changes the ids when true and is not supported.
void refuse_if_true(const io::GgufFile& f, const std::string& key, const char* why) {
  QKV_CHECK(!f.find_boolean(key).value_or(false), "GGUF file '", f.source(), "': ", key,
            " is true (", why, "); not supported");
}

// SentencePiece-style ("llama") fields: scores, the space prefix, and what
// qkv does not do refused by name.
void read_sentencepiece(const io::GgufFile& f, text::BpeVocabulary& v) {
  for (const char* key : {"tokenizer.ggml.merges", "tokenizer.ggml.precompiled_charsmap"})
    QKV_CHECK(!f.has(key), "GGUF file '", f.source(), "': ", key,
              " is present; a \"llama\" tokenizer with it is not supported");
  refuse_if_true(f, "tokenizer.ggml.remove_extra_whitespaces", "whitespace runs collapsed");
  refuse_if_true(f, "tokenizer.ggml.add_sep_token", "a separator token appended");
  v.pre_tokenizer = f.find_string("tokenizer.ggml.pre").value_or("default");
  QKV_CHECK(v.pre_tokenizer == "default", "GGUF file '", f.source(), "': tokenizer.ggml.pre is \"",
            v.pre_tokenizer, "\"; a \"llama\" tokenizer supports only \"default\"");
  const std::vector<double> scores = f.numbers("tokenizer.ggml.scores");
  v.scores.assign(scores.begin(), scores.end());
  // Both llama.cpp and transformers prefix a space and add bos unless the file says otherwise.
  v.add_space_prefix = f.find_boolean("tokenizer.ggml.add_space_prefix").value_or(true);
  v.add_bos = true;

  // Gemma, as transformers' gemma_tokenizer reads it: tokens of spaces are
  // stored as spaces ("  ") and spelled "▁▁" in the text, so they are
  // respelled (and then are plain tokens, not user-defined ones matched
  // whole); and the merge order is the order of the tokens in the file, not
  // their scores (the file's scores mostly fall with the id, but not
  // everywhere: special tokens -1000, byte tokens 0).
  const std::string architecture = f.find_string("general.architecture").value_or("");
  if (architecture == "gemma" || architecture == "gemma2" || architecture == "gemma3") {
    for (size_t id = 0; id < v.tokens.size(); ++id) {
      std::string& token = v.tokens[id];
      const bool spaces =
          !token.empty() && token.find(' ') != std::string::npos &&
          std::all_of(token.begin(), token.end(), [](char c) {
            return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
          });
      if (!spaces) continue;
      std::string respelled;
      for (size_t k = 0; k < token.size(); ++k) respelled += "\u2581";
      token = std::move(respelled);
      if (id < v.token_types.size() &&
          v.token_types[id] == static_cast<int32_t>(text::BpeTokenType::kUserDefined))
        v.token_types[id] = static_cast<int32_t>(text::BpeTokenType::kNormal);
    }
    for (size_t id = 0; id < v.scores.size(); ++id) v.scores[id] = -static_cast<float>(id);
  }
}

}  // namespace

text::BpeTokenizer gguf_bpe_tokenizer(const io::GgufFile& f) {
  const std::string& model = f.string("tokenizer.ggml.model");
  QKV_CHECK(model == "gpt2" || model == "llama", "GGUF file '", f.source(),
            "': tokenizer.ggml.model is \"", model,
            "\"; expected \"gpt2\" (byte-level BPE) or \"llama\" (SentencePiece-style BPE)");
  text::BpeVocabulary v;
  v.model = model;
  v.tokens = f.strings("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = f.integers("tokenizer.ggml.token_type");
    v.token_types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      QKV_CHECK(types[i] >= 0 && types[i] <= 6, "GGUF file '", f.source(),
                "': tokenizer.ggml.token_type[", i, "] is ", types[i],
                ", expected a type in [0, 6]");
      v.token_types.push_back(static_cast<int32_t>(types[i]));
    }
  }
  if (model == "gpt2") {
    v.merges = f.strings("tokenizer.ggml.merges");
    // A missing pre-tokenizer is read as transformers reads it (GPT-2's regex).
    // llama.cpp warns and runs its own "default" instead (punctuation runs, the
    // GPT-2 regex, digit runs, then groups of three digits): the two differ.
    v.pre_tokenizer = f.find_string("tokenizer.ggml.pre").value_or("gpt2");
  } else {
    read_sentencepiece(f, v);
  }
  v.bos = token_id(f, "tokenizer.ggml.bos_token_id");
  v.eos = token_id(f, "tokenizer.ggml.eos_token_id");
  v.unk = token_id(f, "tokenizer.ggml.unknown_token_id");
  v.pad = token_id(f, "tokenizer.ggml.padding_token_id");
  v.add_bos = f.find_boolean("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  v.add_eos = f.find_boolean("tokenizer.ggml.add_eos_token").value_or(false);
  try {
    return text::BpeTokenizer(std::move(v));
  } catch (const Error& e) {
    throw Error(e.kind(),
                detail::concat("GGUF file '", f.source(), "': tokenizer.ggml.*: ", e.what()));
  }
}

}  // namespace qkv::models
