// A tiny llama GGUF file (D = 32, 2 heads of 16, 1 KV head, SwiGLU 64, 8 tokens, ChatML
// template), whole or with one thing wrong, for tests/test_gguf_model.cc and
// tests/test_cli_gguf.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.h"

namespace qkv_test {

constexpr uint32_t kTypeF32 = 0, kTypeQ8_0 = 8, kTypeF64 = 28;

// A tiny llama: D = 32, 2 heads of 16, 1 KV head, SwiGLU 64, 8 tokens.
struct TinySpec {
  std::string architecture = "llama";
  std::string tokenizer_model = "gpt2";
  std::string drop_key;        // leave this metadata key out
  std::string drop_tensor;     // leave this tensor out
  std::string reshape_tensor;  // give this tensor a wrong first dim
  std::string f64_tensor;      // store this tensor as F64
  bool quantized = true;       // 2-D weights as Q8_0, else F32
  bool untied = false;         // an output.weight of its own
  int64_t layers = 2;
  // Called after the keys, and after the tensors, above: more of either for a test.
  std::function<void(GgufWriter&)> more_keys;
  std::function<void(GgufWriter&)> more_tensors;
};

constexpr int64_t kD = 32, kHidden = 64, kKv = 16, kVocab = 8;

inline std::string f32_data(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += le(dist(rng));
  return out;
}

// Q8_0 rows: fp16 scale 2^-6 (0x2400), int8 values in [-100, 100].
inline std::string q8_0_data(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-100, 100);
  std::string out;
  for (int64_t b = 0; b < n / 32; ++b) {
    out += le<uint16_t>(0x2400);
    for (int i = 0; i < 32; ++i) out += static_cast<char>(static_cast<int8_t>(dist(rng)));
  }
  return out;
}

inline std::vector<std::byte> tiny_llama(const TinySpec& s = {}) {
  GgufWriter w;
  auto key = [&](const std::string& k) { return k != s.drop_key; };
  if (key("general.architecture")) w.str("general.architecture", s.architecture);
  w.str("general.name", "tiny");
  const std::string a = s.architecture + ".";
  if (key("llama.block_count")) w.u32(a + "block_count", static_cast<uint32_t>(s.layers));
  if (key("llama.embedding_length")) w.u32(a + "embedding_length", kD);
  if (key("llama.feed_forward_length")) w.u32(a + "feed_forward_length", kHidden);
  if (key("llama.attention.head_count")) w.u32(a + "attention.head_count", 2);
  if (key("llama.attention.head_count_kv")) w.u32(a + "attention.head_count_kv", 1);
  if (key("llama.rope.freq_base")) w.f32(a + "rope.freq_base", 10000.0f);
  if (key("llama.attention.layer_norm_rms_epsilon"))
    w.f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (key("llama.context_length")) w.u32(a + "context_length", 64);
  if (key("tokenizer.ggml.model")) w.str("tokenizer.ggml.model", s.tokenizer_model);
  if (key("tokenizer.ggml.tokens"))
    w.strings("tokenizer.ggml.tokens",
              {"a", "b", "c", "d", "e", "ab", "<|im_start|>", "<|im_end|>"});
  if (key("tokenizer.ggml.merges")) w.strings("tokenizer.ggml.merges", {"a b"});
  w.numbers<int32_t>("tokenizer.ggml.token_type", qkv_test::kI32, {1, 1, 1, 1, 1, 1, 3, 3});
  w.u32("tokenizer.ggml.eos_token_id", 7);
  if (key("tokenizer.chat_template"))
    w.str("tokenizer.chat_template",
          "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}");
  if (s.more_keys) s.more_keys(w);

  std::mt19937 rng(7);
  auto add = [&](const std::string& name, std::vector<uint64_t> dims, bool matrix) {
    if (name == s.drop_tensor) return;
    if (name == s.reshape_tensor) dims.back() += 1;
    const int64_t n = static_cast<int64_t>(dims[0] * (dims.size() > 1 ? dims[1] : 1));
    if (name == s.f64_tensor) {
      std::string data;
      for (int64_t i = 0; i < n; ++i) data += le(1.0);
      return void(w.tensor(name, dims, kTypeF64, data));
    }
    if (!matrix) {
      std::normal_distribution<float> near_one(1.0f, 0.1f);
      std::string data;
      for (int64_t i = 0; i < n; ++i) data += le(near_one(rng));
      return void(w.tensor(name, dims, kTypeF32, data));
    }
    if (s.quantized) return void(w.tensor(name, dims, kTypeQ8_0, q8_0_data(n, rng)));
    w.tensor(name, dims, kTypeF32, f32_data(n, rng, 0.3f));
  };
  add("token_embd.weight", {kD, kVocab}, true);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {kD}, false);
    add(b + "attn_q.weight", {kD, kD}, true);
    add(b + "attn_k.weight", {kD, kKv}, true);
    add(b + "attn_v.weight", {kD, kKv}, true);
    add(b + "attn_output.weight", {kD, kD}, true);
    add(b + "ffn_norm.weight", {kD}, false);
    add(b + "ffn_gate.weight", {kD, kHidden}, true);
    add(b + "ffn_up.weight", {kD, kHidden}, true);
    add(b + "ffn_down.weight", {kHidden, kD}, true);
  }
  add("output_norm.weight", {kD}, false);
  if (s.untied) add("output.weight", {kD, kVocab}, true);
  if (s.more_tensors) s.more_tensors(w);
  return w.bytes();
}

}  // namespace qkv_test
