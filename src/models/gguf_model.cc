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
    case io::GgmlType::kQ8_0:
    case io::GgmlType::kQ4_K:
    case io::GgmlType::kQ6_K:
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
                 "; supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K");
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

// qkv module name -> GGUF tensor of one llama block.
std::vector<std::pair<std::string, std::string>> block_tensors(int64_t i) {
  const std::string b = "blk." + std::to_string(i) + ".";
  const std::string l = "layers." + std::to_string(i) + ".";
  return {{l + "attention_norm", b + "attn_norm.weight"},
          {l + "attention.q_proj", b + "attn_q.weight"},
          {l + "attention.k_proj", b + "attn_k.weight"},
          {l + "attention.v_proj", b + "attn_v.weight"},
          {l + "attention.o_proj", b + "attn_output.weight"},
          {l + "ffn_norm", b + "ffn_norm.weight"},
          {l + "feed_forward.w1", b + "ffn_gate.weight"},
          {l + "feed_forward.w2", b + "ffn_down.weight"},
          {l + "feed_forward.w3", b + "ffn_up.weight"}};
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
                ", but llama.block_count is ", num_layers, " (blocks 0 to ", num_layers - 1,
                "): the metadata and the tensors disagree; qkv uses every tensor of a file "
                "or refuses it");
    QKV_CHECK(false, "GGUF file '", f.source(), "': tensor \"", t.name,
              "\" is not one a llama model uses (token_embd, output_norm, output, rope_freqs "
              "and, per block, attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, "
              "ffn_gate, ffn_up, ffn_down weights); it may carry math qkv does not do, so the "
              "file is refused rather than loaded without it");
  }
}

}  // namespace

nn::DecoderModelConfig gguf_decoder_config(const io::GgufFile& f, int64_t max_seq_len) {
  QKV_CHECK(max_seq_len > 0, "gguf_decoder_config: max_seq_len must be > 0, got ", max_seq_len);
  const std::string& arch = f.string("general.architecture");
  QKV_CHECK(arch == "llama", "GGUF file '", f.source(), "': general.architecture is \"", arch,
            "\"; only \"llama\" is supported");
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
  QKV_CHECK(c.d_model % c.num_heads == 0 && c.num_heads % c.num_kv_heads == 0, "GGUF file '",
            f.source(), "': ", p, "embedding_length (", c.d_model, "), ", p,
            "attention.head_count (", c.num_heads, ") and ", p, "attention.head_count_kv (",
            c.num_kv_heads, ") do not divide: heads must divide the width and kv heads the heads");
  const int64_t head_dim = c.d_model / c.num_heads;
  c.rope_base = f.find_number(p + "rope.freq_base").value_or(10000.0);
  QKV_CHECK(c.rope_base > 1.0 && c.rope_base < 1e12, "GGUF file '", f.source(), "': ", p,
            "rope.freq_base is ", c.rope_base, ", expected a value in (1, 1e12)");
  c.norm_eps = f.number(p + "attention.layer_norm_rms_epsilon");
  QKV_CHECK(c.norm_eps >= 0.0 && c.norm_eps < 1.0, "GGUF file '", f.source(), "': ", p,
            "attention.layer_norm_rms_epsilon is ", c.norm_eps, ", expected a value in [0, 1)");
  const int64_t context = bounded(f, p + "context_length", 1, INT64_MAX);
  c.max_seq_len = std::min(context, max_seq_len);
  detail::check_llama_keys(f, p, head_dim, c.max_seq_len);
  c.rope_freq_factors = rope_freq_factors(f, head_dim);
  c.vocab_size = static_cast<int64_t>(f.strings("tokenizer.ggml.tokens").size());
  QKV_CHECK(c.vocab_size > 0, "GGUF file '", f.source(), "': tokenizer.ggml.tokens is empty");
  if (f.has(p + "vocab_size"))
    QKV_CHECK(f.integer(p + "vocab_size") == c.vocab_size, "GGUF file '", f.source(), "': ", p,
              "vocab_size is ", f.integer(p + "vocab_size"), " but tokenizer.ggml.tokens has ",
              c.vocab_size, " tokens");
  c.positions = nn::PositionKind::kRope;
  c.rope_style = nn::RopeStyle::kInterleaved;  // q/k rows as GGUF stores them (see the header)
  c.norm = nn::NormKind::kRMSNorm;
  c.ffn = nn::FeedForwardKind::kSwiGLU;
  c.tie_embeddings = !f.has_tensor("output.weight");
  c.bias = false;
  c.dtype = DType::kFloat32;
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
  if (const auto id = tokenizer.id_of("<|im_end|>")) return id;
  return tokenizer.eos();
}

GgufModel load_gguf_model(const io::GgufFile& f, const GgufModelOptions& options) {
  const nn::DecoderModelConfig c = gguf_decoder_config(f, options.max_seq_len);
  text::BpeTokenizer tokenizer = gguf_bpe_tokenizer(f);

  // Every weight, checked before anything is built: qkv module name -> plan.
  const int64_t D = c.d_model, kv = c.num_kv_heads * (c.d_model / c.num_heads);
  std::map<std::string, WeightPlan> plans;
  plans["tok_embeddings"] = {"token_embd.weight", {c.vocab_size, D}};
  plans["norm"] = {"output_norm.weight", {D}};
  if (!c.tie_embeddings) plans["<output>"] = {"output.weight", {c.vocab_size, D}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::map<std::string, Shape> shapes = {{"attn_norm.weight", {D}},
                                                 {"attn_q.weight", {D, D}},
                                                 {"attn_k.weight", {kv, D}},
                                                 {"attn_v.weight", {kv, D}},
                                                 {"attn_output.weight", {D, D}},
                                                 {"ffn_norm.weight", {D}},
                                                 {"ffn_gate.weight", {c.ffn_hidden, D}},
                                                 {"ffn_down.weight", {D, c.ffn_hidden}},
                                                 {"ffn_up.weight", {c.ffn_hidden, D}}};
    for (const auto& [module, tensor] : block_tensors(i))
      plans[module] = {tensor, shapes.at(tensor.substr(tensor.find('.', 4) + 1))};
  }
  for (const auto& [module, plan] : plans) checked_tensor(f, plan);
  std::set<std::string> used;
  for (const auto& [module, plan] : plans) used.insert(plan.gguf_name);
  if (!c.rope_freq_factors.empty()) used.insert("rope_freqs.weight");
  check_every_tensor_used(f, used, c.num_layers);

  // Norms are 1-D F32 in practice; anything 1-D goes through load().
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

  nn::DecoderModel model = [&] {
    nn::SkipWeightInit skip;  // no random weights: every one comes from the file
    return nn::DecoderModel(c);
  }();
  model.eval();
  model.set_kv_cache_storage(options.kv_cache);
  size_t given = 0;
  for (auto& [name, module] : model.named_modules()) {
    const auto it = plans.find(name);
    if (it == plans.end()) continue;
    give(*module, it->second);
    ++given;
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
