// The "llama." GGUF keys that change a model's math: each neutral, or refused by name
// (the key names and their meaning follow llama.cpp's llama-arch.cpp and llama-model.cpp).
#include "models/gguf_llama_keys.h"

#include <cmath>
#include <set>
#include <string_view>
#include <type_traits>
#include <variant>

#include "qkv/error.h"

namespace qkv::models::detail {

namespace {

// A value as an error message shows it: `f32 50`, `string "yarn"`, `array`.
std::string value_text(const io::GgufValue& v) {
  const std::string type(io::gguf_value_type_name(static_cast<io::GgufValueType>(v.index())));
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return type + " \"" + (x.size() > 40 ? x.substr(0, 40) + "..." : x) + "\"";
        } else if constexpr (std::is_same_v<T, io::GgufArray>) {
          return type;
        } else if constexpr (std::is_same_v<T, bool>) {
          return type + (x ? " true" : " false");
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return type + " " + std::to_string(static_cast<int>(x));
        } else {
          return type + " " + qkv::detail::concat(x);
        }
      },
      v);
}

// Keys gguf_decoder_config reads itself.
const std::set<std::string_view> kRead = {"context_length",
                                          "embedding_length",
                                          "block_count",
                                          "feed_forward_length",
                                          "attention.head_count",
                                          "attention.head_count_kv",
                                          "attention.layer_norm_rms_epsilon",
                                          "rope.freq_base",
                                          "vocab_size"};

// Keys that change nothing without what qkv refuses anyway: YaRN's original context and
// "finetuned" flag, and the old converter's note of the source checkpoint's layout (its
// tensors are stored as every other llama file's).
const std::set<std::string_view> kInformational = {"rope.scaling.original_context_length",
                                                   "rope.scaling.finetuned", "tensor_data_layout"};

}  // namespace

void check_llama_keys(const io::GgufFile& f, const std::string& prefix, int64_t head_dim,
                      int64_t max_seq_len, const std::set<std::string_view>& also_read) {
  const std::string& src = f.source();
  for (const std::string& key : f.keys()) {
    if (!key.starts_with(prefix)) continue;
    const std::string_view name = std::string_view(key).substr(prefix.size());
    if (kRead.contains(name) || kInformational.contains(name) || also_read.contains(name)) continue;

    if (name == "rope.dimension_count" || name == "attention.key_length" ||
        name == "attention.value_length") {
      const int64_t v = f.integer(key);
      QKV_CHECK(v == head_dim, "GGUF file '", src, "': ", key, " is ", v,
                ", but qkv's heads have embedding_length / attention.head_count (or, in gemma3 "
                "and qwen3, attention.key_length) = ",
                head_dim, " dims, all rotated and all attended (", prefix,
                "rope.dimension_count, attention.key_length and value_length must equal it)");
    } else if (name == "rope.scaling.type") {
      const std::string& v = f.string(key);
      QKV_CHECK(v == "none" || v == "linear", "GGUF file '", src, "': ", key, " is \"", v,
                "\", which qkv does not implement; supported: \"none\", or \"linear\" with ",
                prefix,
                "rope.scaling.factor 1 (Llama 3's scaling comes as the tensor "
                "rope_freqs.weight, which is supported)");
    } else if (name == "rope.scaling.factor" || name == "rope.scale_linear") {
      const double v = f.number(key);
      QKV_CHECK(v == 0.0 || v == 1.0, "GGUF file '", src, "': ", key, " is ", v,
                ", but RoPE position scaling is not supported; expected 1 (or 0: none)");
    } else if (name == "rope.scaling.attn_factor") {
      const double v = f.number(key);
      QKV_CHECK(v == 1.0, "GGUF file '", src, "': ", key, " is ", v,
                ", but scaling RoPE's cos and sin is not supported; expected 1");
    } else if (name == "attention.scale") {
      // The file holds an f32: 1/√head_dim rounded to float32 is the default spelled out.
      const double v = f.number(key);
      const double standard = 1.0 / std::sqrt(static_cast<double>(head_dim));
      QKV_CHECK(v == 0.0 || std::abs(v - standard) <= 1e-6 * standard, "GGUF file '", src,
                "': ", key, " is ", v,
                ", but qkv scales attention scores by 1/sqrt(head dim) = ", standard,
                "; expected that or 0 (the default)");
    } else if (name == "expert_count" || name == "expert_used_count") {
      const int64_t v = f.integer(key);
      QKV_CHECK(v == 0, "GGUF file '", src, "': ", key, " is ", v,
                ": mixture-of-experts models are not supported (expected 0)");
    } else if (name == "attention.sliding_window") {
      // Attending to every earlier position is the same as a window of W positions as long
      // as no sequence is longer than W.
      const int64_t v = f.integer(key);
      QKV_CHECK(v == 0 || v >= max_seq_len, "GGUF file '", src, "': ", key, " is ", v,
                ": qkv attends to every earlier position, which equals sliding-window "
                "attention only within ",
                v, " positions, and the model's context is ", max_seq_len,
                "; load it with max_seq_len <= ", v);
    } else {
      QKV_CHECK(false, "GGUF file '", src, "': metadata key \"", key, "\" (",
                value_text(f.value(key)), ") is not supported: qkv's ",
                prefix.substr(0, prefix.size() - 1),
                " has no such feature, and running the model without it could give wrong "
                "outputs, so the file is refused rather than the key ignored");
    }
  }
}

}  // namespace qkv::models::detail
