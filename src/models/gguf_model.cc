// models::load_gguf_model: a llama GGUF file -> nn::DecoderModel (fast or exact),
// tokenizer and chat template. Everything is checked against the file before the
// model is built.
#include "qkv/models/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/gguf_llama_keys.h"
#include "qkv/error.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/rms_norm.h"
#include "qkv/nn/skip_weight_init.h"
#include "qkv/quantized_linear.h"

namespace qkv::models {

namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A metadata integer that must be in [lo, hi].
int64_t bounded(const io::GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = f.integer(key);
  QKV_CHECK(v >= lo && v <= hi, "GGUF file '", f.source(), "': ", key, " is ", v,
            ", expected a value in [", lo, ", ", hi, "]");
  return v;
}

bool is_kept_quantized(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::kQ4_0:
    case io::GgmlType::kQ4_1:
    case io::GgmlType::kQ5_0:
    case io::GgmlType::kQ5_1:
    case io::GgmlType::kQ8_0:
    case io::GgmlType::kQ4_K:
    case io::GgmlType::kQ5_K:
    case io::GgmlType::kQ6_K:
    case io::GgmlType::kIQ4_NL:
      return true;
    default:
      return false;
  }
}

// One weight to give the model: the GGUF tensor and the shape the model expects.
struct WeightPlan {
  std::string gguf_name;
  Shape shape;
};

// The tensor `p.gguf_name`, checked for shape and a type load() or the quantized kernels take.
const io::GgufTensorInfo& checked_tensor(const io::GgufFile& f, const WeightPlan& p) {
  const io::GgufTensorInfo& t = f.tensor(p.gguf_name);  // names the missing tensor
  QKV_CHECK(t.shape() == p.shape, "GGUF file '", f.source(), "': tensor \"", p.gguf_name,
            "\" has shape ", shape_text(t.shape()), " (ggml dims reversed), expected ",
            shape_text(p.shape));
  const bool plain =
      t.type == io::GgmlType::kF32 || t.type == io::GgmlType::kF16 || t.type == io::GgmlType::kBF16;
  QKV_CHECK_TYPE(plain || is_kept_quantized(t.type), "GGUF file '", f.source(), "': tensor \"",
                 p.gguf_name, "\" is ", io::ggml_type_name(t.type),
                 "; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, "
                 "Q6_K, IQ4_NL");
  return t;
}

// float32 of any supported type (dequantized when quantized).
Tensor load_float(const io::GgufFile& f, const io::GgufTensorInfo& t) { return f.load(t.name); }

// The blocks of `t` in place in the file's mapping.
QuantizedWeight quantized_in_place(const io::GgufFile& f, const io::GgufTensorInfo& t) {
  const Shape s = t.shape();  // [out, in]
  return QuantizedWeight(quant_format_from_ggml_type(static_cast<uint32_t>(t.type)), s[0], s[1],
                         t.data.data(), static_cast<int64_t>(t.data.size()), f.storage());
}

// qkv module name (a ".bias" suffix: the module's bias) -> the GGUF tensor and its shape, of
// block i, as llama.cpp's converter names them for the config's family.
std::vector<std::pair<std::string, WeightPlan>> block_tensors(const nn::DecoderModelConfig& c,
                                                              int64_t i) {
  const std::string b = "blk." + std::to_string(i) + ".";
  const std::string l = "layers." + std::to_string(i) + ".";
  const int64_t D = c.d_model, E = c.head_dim > 0 ? c.head_dim : D / c.num_heads;
  const int64_t q = c.num_heads * E, kv = c.num_kv_heads * E, F = c.ffn_hidden;
  std::vector<std::pair<std::string, WeightPlan>> t = {
      {l + "attention_norm", {b + "attn_norm.weight", {D}}},
      {l + "attention.q_proj", {b + "attn_q.weight", {q, D}}},
      {l + "attention.k_proj", {b + "attn_k.weight", {kv, D}}},
      {l + "attention.v_proj", {b + "attn_v.weight", {kv, D}}},
      {l + "attention.o_proj", {b + "attn_output.weight", {D, q}}},
      {l + "ffn_norm", {b + "ffn_norm.weight", {D}}},
      {l + "feed_forward.w1", {b + "ffn_gate.weight", {F, D}}},
      {l + "feed_forward.w2", {b + "ffn_down.weight", {D, F}}},
      {l + "feed_forward.w3", {b + "ffn_up.weight", {F, D}}}};
  if (c.qkv_bias) {
    t.push_back({l + "attention.q_proj.bias", {b + "attn_q.bias", {q}}});
    t.push_back({l + "attention.k_proj.bias", {b + "attn_k.bias", {kv}}});
    t.push_back({l + "attention.v_proj.bias", {b + "attn_v.bias", {kv}}});
  }
  if (c.qk_norm) {
    t.push_back({l + "attention.q_norm", {b + "attn_q_norm.weight", {E}}});
    t.push_back({l + "attention.k_norm", {b + "attn_k_norm.weight", {E}}});
  }
  if (c.post_norms) {
    t.push_back({l + "post_attention_norm", {b + "post_attention_norm.weight", {D}}});
    t.push_back({l + "post_ffn_norm", {b + "post_ffw_norm.weight", {D}}});
  }
  return t;
}

// Llama 3's RoPE frequency factors (rope_freqs.weight, written by llama.cpp's converter for
// rope_type "llama3"): llama.cpp divides frequency i by factor i. Empty without the tensor.
std::vector<double> rope_freq_factors(const io::GgufFile& f, int64_t head_dim) {
  constexpr const char* kName = "rope_freqs.weight";
  if (!f.has_tensor(kName)) return {};
  const io::GgufTensorInfo& t = f.tensor(kName);
  QKV_CHECK(t.shape() == Shape{head_dim / 2}, "GGUF file '", f.source(), "': tensor \"", kName,
            "\" has shape ", shape_text(t.shape()), ", expected [", head_dim / 2,
            "] (one factor per rotated pair of a head of ", head_dim, ")");
  QKV_CHECK_TYPE(
      t.type == io::GgmlType::kF32 || t.type == io::GgmlType::kF16 || t.type == io::GgmlType::kBF16,
      "GGUF file '", f.source(), "': tensor \"", kName, "\" is ", io::ggml_type_name(t.type),
      "; supported: F32, F16, BF16");
  const Tensor factors = f.load(kName);  // float32
  std::vector<double> out(factors.data<float>(), factors.data<float>() + factors.numel());
  for (size_t i = 0; i < out.size(); ++i)
    QKV_CHECK(std::isfinite(out[i]) && out[i] > 0.0, "GGUF file '", f.source(), "': tensor \"",
              kName, "\" holds ", out[i], " at ", i,
              "; a factor divides a RoPE frequency and must be finite and > 0");
  return out;
}

// Throws naming the first tensor of the file (in file order) that is not in `used`: a tensor
// the model would not read may carry math it does not do (a bias, a norm), or the metadata
// may understate the blocks (block_count 29 of 30), so the file is refused.
void check_every_tensor_used(const io::GgufFile& f, const std::set<std::string>& used,
                             int64_t num_layers) {
  for (const io::GgufTensorInfo& t : f.tensors()) {
    if (used.contains(t.name)) continue;
    int64_t block = -1;
    if (t.name.starts_with("blk.")) {
      const size_t dot = t.name.find('.', 4);
      const std::string digits = t.name.substr(4, dot == std::string::npos ? dot : dot - 4);
      if (!digits.empty() && digits.size() < 10 &&
          digits.find_first_not_of("0123456789") == std::string::npos)
        block = std::stoll(digits);
    }
    if (block >= num_layers)
      QKV_CHECK(false, "GGUF file '", f.source(), "': tensor \"", t.name, "\" is in block ", block,
                ", but ", f.string("general.architecture"), ".block_count is ", num_layers,
                " (blocks 0 to ", num_layers - 1,
                "): the metadata and the tensors disagree; qkv uses every tensor of a file "
                "or refuses it");
    QKV_CHECK(false, "GGUF file '", f.source(), "': tensor \"", t.name, "\" is not one a ",
              f.string("general.architecture"),
              " model uses (token_embd, output_norm, output, rope_freqs and, per block, "
              "attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, "
              "ffn_down weights; qwen2: attn_q/k/v biases; qwen3: attn_q_norm, attn_k_norm; "
              "gemma3: those and post_attention_norm, post_ffw_norm); it may carry math qkv "
              "does not do, so the file is refused rather than loaded without it");
  }
}

}  // namespace

nn::DecoderModelConfig gguf_decoder_config(const io::GgufFile& f, int64_t max_seq_len) {
  QKV_CHECK(max_seq_len > 0, "gguf_decoder_config: max_seq_len must be > 0, got ", max_seq_len);
  const std::string& arch = f.string("general.architecture");
  QKV_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma3",
            "GGUF file '", f.source(), "': general.architecture is \"", arch,
            "\"; supported: \"llama\", \"qwen2\", \"qwen3\", \"gemma3\"");
  const bool gemma = arch == "gemma3";
  const std::string p = arch + ".";
  constexpr int64_t kMaxDim = int64_t{1} << 24;  // far above any real model, keeps products sane
  nn::DecoderModelConfig c;
  c.num_layers = bounded(f, p + "block_count", 1, 4096);
  c.d_model = bounded(f, p + "embedding_length", 1, kMaxDim);
  c.ffn_hidden = bounded(f, p + "feed_forward_length", 1, kMaxDim);
  c.num_heads = bounded(f, p + "attention.head_count", 1, c.d_model);
  c.num_kv_heads = f.has(p + "attention.head_count_kv")
                       ? bounded(f, p + "attention.head_count_kv", 1, c.num_heads)
                       : c.num_heads;
  // A head dim of its own (Gemma 3, Qwen3), or the width split among the heads (for
  // llama and qwen2, attention.key_length must then agree: check_llama_keys).
  if ((gemma || arch == "qwen3") && f.has(p + "attention.key_length"))
    c.head_dim = bounded(f, p + "attention.key_length", 2, 4096);
  QKV_CHECK((c.head_dim > 0 || c.d_model % c.num_heads == 0) && c.num_heads % c.num_kv_heads == 0,
            "GGUF file '", f.source(), "': ", p, "embedding_length (", c.d_model, "), ", p,
            "attention.head_count (", c.num_heads, ") and ", p, "attention.head_count_kv (",
            c.num_kv_heads,
            ") do not divide: heads must divide the width (unless attention.key_length gives the "
            "head dim) and kv heads the heads");
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.d_model / c.num_heads;
  c.rope_base = f.find_number(p + "rope.freq_base").value_or(10000.0);
  QKV_CHECK(c.rope_base > 1.0 && c.rope_base < 1e12, "GGUF file '", f.source(), "': ", p,
            "rope.freq_base is ", c.rope_base, ", expected a value in (1, 1e12)");
  c.norm_eps = f.number(p + "attention.layer_norm_rms_epsilon");
  QKV_CHECK(c.norm_eps >= 0.0 && c.norm_eps < 1.0, "GGUF file '", f.source(), "': ", p,
            "attention.layer_norm_rms_epsilon is ", c.norm_eps, ", expected a value in [0, 1)");
  const int64_t context = bounded(f, p + "context_length", 1, INT64_MAX);
  c.max_seq_len = std::min(context, max_seq_len);
  std::set<std::string_view> also_read;
  if (gemma)
    also_read = {"attention.sliding_window", "rope.freq_base_swa", "final_logit_softcapping"};
  detail::check_llama_keys(f, p, head_dim, c.max_seq_len, also_read);
  c.rope_freq_factors = rope_freq_factors(f, head_dim);
  c.vocab_size = static_cast<int64_t>(f.strings("tokenizer.ggml.tokens").size());
  QKV_CHECK(c.vocab_size > 0, "GGUF file '", f.source(), "': tokenizer.ggml.tokens is empty");
  if (f.has(p + "vocab_size"))
    QKV_CHECK(f.integer(p + "vocab_size") == c.vocab_size, "GGUF file '", f.source(), "': ", p,
              "vocab_size is ", f.integer(p + "vocab_size"), " but tokenizer.ggml.tokens has ",
              c.vocab_size, " tokens");
  c.positions = nn::PositionKind::kRope;
  // llama: q/k rows as GGUF stores them, permuted for adjacent pairs (see the header); the
  // others are converted unpermuted for llama.cpp's NEOX rotation, transformers' half split.
  c.rope_style = arch == "llama" ? nn::RopeStyle::kInterleaved : nn::RopeStyle::kHalfSplit;
  c.norm = nn::NormKind::kRMSNorm;
  c.ffn = nn::FeedForwardKind::kSwiGLU;
  c.tie_embeddings = !f.has_tensor("output.weight");
  c.bias = false;
  c.dtype = DType::kFloat32;
  // q/k/v biases: Qwen2 always; llama.cpp reads them in a llama file too when present.
  c.qkv_bias = arch == "qwen2" || f.has_tensor("blk.0.attn_q.bias");
  c.qk_norm = arch == "qwen3" || gemma;
  if (gemma) {
    // llama.cpp's gemma3 graph and transformers' Gemma3TextModel. The norm weights are
    // stored with Gemma's 1 + w already folded in by the converter (transformers subtracts
    // the 1 again on loading), so they are plain RMSNorm weights here.
    c.post_norms = true;
    c.ffn = nn::FeedForwardKind::kGeGLU;
    c.embedding_scale = std::sqrt(static_cast<double>(c.d_model));
    // Queries scale by 1/√head_dim, except in the 27B model (62 blocks), whose
    // query_pre_attn_scalar is width / heads: llama.cpp's rule, as the file holds no
    // query_pre_attn_scalar (the other checkpoints' equals their head_dim).
    if (c.num_layers == 62)
      c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.d_model / c.num_heads));
    const int64_t window = bounded(f, p + "attention.sliding_window", 1, INT64_MAX);
    // Five local layers, then a global one: layer i is local unless (i + 1) % 6 == 0
    // (transformers' sliding_window_pattern 6; llama.cpp's set_swa_pattern(6)).
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.sliding_windows.push_back((i + 1) % 6 != 0 ? window : 0);
    c.sliding_rope_base = f.find_number(p + "rope.freq_base_swa").value_or(10000.0);
    QKV_CHECK(c.sliding_rope_base > 1.0 && c.sliding_rope_base < 1e12, "GGUF file '", f.source(),
              "': ", p, "rope.freq_base_swa is ", c.sliding_rope_base,
              ", expected a value in (1, 1e12)");
    if (f.has(p + "final_logit_softcapping")) {
      c.final_logit_softcap = f.number(p + "final_logit_softcapping");
      QKV_CHECK(std::isfinite(c.final_logit_softcap) && c.final_logit_softcap >= 0.0, "GGUF file '",
                f.source(), "': ", p, "final_logit_softcapping is ", c.final_logit_softcap,
                ", expected a finite value >= 0 (0: none)");
    }
  }
  return c;
}

text::ChatTemplate GgufModel::chat_template() const {
  QKV_CHECK(chat_template_source.has_value(), "GGUF model \"", name,
            "\": the file has no tokenizer.chat_template");
  const auto text_of = [&](std::optional<int32_t> id) {
    return id ? tokenizer.token(*id) : std::string();
  };
  return text::ChatTemplate::from_jinja(
      *chat_template_source, {.bos = text_of(tokenizer.bos()), .eos = text_of(tokenizer.eos())});
}

std::optional<int32_t> GgufModel::end_of_turn() const {
  // ChatML (SmolLM2, Qwen), Gemma, Llama 3.
  for (const char* token : {"<|im_end|>", "<end_of_turn>", "<|eot_id|>"})
    if (const auto id = tokenizer.id_of(token)) return id;
  return tokenizer.eos();
}

GgufModel load_gguf_model(const io::GgufFile& f, const GgufModelOptions& options) {
  const nn::DecoderModelConfig c = gguf_decoder_config(f, options.max_seq_len);
  text::BpeTokenizer tokenizer = gguf_bpe_tokenizer(f);

  // Every weight, checked before anything is built: qkv module name -> plan.
  const int64_t D = c.d_model;
  std::map<std::string, WeightPlan> plans;
  plans["tok_embeddings"] = {"token_embd.weight", {c.vocab_size, D}};
  plans["norm"] = {"output_norm.weight", {D}};
  if (!c.tie_embeddings) plans["<output>"] = {"output.weight", {c.vocab_size, D}};
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (auto& [module, plan] : block_tensors(c, i)) plans[module] = std::move(plan);
  for (const auto& [module, plan] : plans) checked_tensor(f, plan);
  std::set<std::string> used;
  for (const auto& [module, plan] : plans) used.insert(plan.gguf_name);
  if (!c.rope_freq_factors.empty()) used.insert("rope_freqs.weight");
  check_every_tensor_used(f, used, c.num_layers);

  // Norms and biases are 1-D F32 in practice; anything 1-D goes through load().
  auto give = [&](nn::Module& m, const WeightPlan& plan) {
    const io::GgufTensorInfo& t = checked_tensor(f, plan);
    const bool quantized = !options.exact && is_kept_quantized(t.type);
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
      if (quantized) return lin->set_quantized_weight(quantized_in_place(f, t));
      return lin->set_weight(load_float(f, t));
    }
    if (auto* emb = dynamic_cast<nn::Embedding*>(&m)) {
      if (quantized) return emb->set_quantized_weight(quantized_in_place(f, t));
      return emb->set_weight(load_float(f, t));
    }
    m.load_state_dict({{"weight", load_float(f, t)}});  // RMSNorm
  };
  auto give_bias = [&](nn::Module& m, const WeightPlan& plan) {
    auto* lin = dynamic_cast<nn::Linear*>(&m);
    QKV_CHECK(lin != nullptr && lin->bias().defined(), "load_gguf_model: internal error: \"",
              plan.gguf_name, "\" has no linear layer with a bias to go to");
    Tensor bias = lin->bias();  // shares the module's storage
    bias.copy_from(load_float(f, checked_tensor(f, plan)));
  };

  nn::DecoderModel model = [&] {
    nn::SkipWeightInit skip;  // no random weights: every one comes from the file
    return nn::DecoderModel(c);
  }();
  model.eval();
  model.set_kv_cache_storage(options.kv_cache);
  size_t given = 0;
  for (auto& [name, module] : model.named_modules()) {
    if (const auto it = plans.find(name); it != plans.end()) {
      give(*module, it->second);
      ++given;
    }
    if (const auto it = plans.find(name + ".bias"); it != plans.end()) {
      give_bias(*module, it->second);
      ++given;
    }
  }
  // Guards the name mapping above against a change in DecoderModel's module names.
  QKV_CHECK(given + (c.tie_embeddings ? 0 : 1) == plans.size(),
            "load_gguf_model: internal error: ", plans.size() - given,
            " weights found no module in nn::DecoderModel");
  if (!c.tie_embeddings) {
    const io::GgufTensorInfo& t = checked_tensor(f, plans.at("<output>"));
    if (!options.exact && is_kept_quantized(t.type))
      model.set_quantized_output_weight(quantized_in_place(f, t));
    else
      model.set_output_weight(load_float(f, t));
  }

  return GgufModel{.architecture = f.string("general.architecture"),
                   .name = f.find_string("general.name").value_or(""),
                   .exact = options.exact,
                   .model = std::move(model),
                   .tokenizer = std::move(tokenizer),
                   .chat_template_source = f.find_string("tokenizer.chat_template")};
}

GgufModel load_gguf_model(const std::filesystem::path& path, const GgufModelOptions& options) {
  const io::GgufFile file(path);
  return load_gguf_model(file, options);
}

}  // namespace qkv::models
