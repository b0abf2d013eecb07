// models::gguf_bpe_tokenizer: tokenizer.ggml.* -> text::BpeTokenizer.
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

}  // namespace

text::BpeTokenizer gguf_bpe_tokenizer(const io::GgufFile& f) {
  const std::string& model = f.string("tokenizer.ggml.model");
  QKV_CHECK(model == "gpt2", "GGUF file '", f.source(), "': tokenizer.ggml.model is \"", model,
            "\"; only \"gpt2\" (byte-level BPE) is supported");
  text::BpeVocabulary v;
  v.tokens = f.strings("tokenizer.ggml.tokens");
  v.merges = f.strings("tokenizer.ggml.merges");
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
  // A missing pre-tokenizer is read as transformers reads it (GPT-2's regex).
  // llama.cpp warns and runs its own "default" instead (punctuation runs, the
  // GPT-2 regex, digit runs, then groups of three digits): the two differ.
  v.pre_tokenizer = f.find_string("tokenizer.ggml.pre").value_or("gpt2");
  v.bos = token_id(f, "tokenizer.ggml.bos_token_id");
  v.eos = token_id(f, "tokenizer.ggml.eos_token_id");
  v.unk = token_id(f, "tokenizer.ggml.unknown_token_id");
  v.pad = token_id(f, "tokenizer.ggml.padding_token_id");
  v.add_bos = f.find_boolean("tokenizer.ggml.add_bos_token").value_or(false);
  v.add_eos = f.find_boolean("tokenizer.ggml.add_eos_token").value_or(false);
  try {
    return text::BpeTokenizer(std::move(v));
  } catch (const Error& e) {
    throw Error(e.kind(),
                detail::concat("GGUF file '", f.source(), "': tokenizer.ggml.*: ", e.what()));
  }
}

}  // namespace qkv::models
