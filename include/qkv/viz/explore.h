// The attention explorer: every head of every layer of a model qkv runs, drawn
// in one self-contained web page (bertviz's head and model views, and the
// tutorial's §2–§3 worked through for one query token).
//
//   viz::AttentionExplorer explorer("models/all-MiniLM-L6-v2");   // or a .gguf file
//   viz::AttentionMaps maps = explorer.explore("The cat sat on the mat.");
//   maps.weights;                                   // [layers, H, L, L]
//   io::write_atomic("attention.html", viz::explore_html(maps));  // opens from file://
//
// The weights are qkv's own: each layer's attention runs again through
// scaled_dot_product_attention with need_weights (the fused kernel rebuilds
// the probabilities from its log-sum-exp), on the heads q, k, v and the
// options (masks, causal, windows, GQA) that the layer's record kept. They
// equal transformers' eager `output_attentions=True` (python/tests/test_explore.py).
//
// Masked positions (padding, causal, outside a sliding window) are those to
// which the kernel itself gives no weight when every score is 0: they are
// drawn as masked, not as weights of 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/tensor.h"

namespace qkv::viz {

// What one attention layer computed with: SDPA's inputs and options, as the
// modules' records keep them (nn::MultiheadAttentionRecord,
// nn::GroupedQueryAttentionRecord).
// q: [B, H, L, E]  k: [B, Hkv, S, E]  v: [B, Hkv, S, Ev]
struct AttentionInputs {
  Tensor q, k, v;
  SdpaOptions sdpa;
};

// The attention of one text through every layer and head of a model.
struct AttentionMaps {
  std::string model;                // shown on the page (a file or directory name)
  std::string architecture;         // "bert", "llama", ...
  std::string text, text_b;         // the input (text_b: the second text, or "")
  std::vector<int64_t> ids;         // [S] the token ids the model read
  std::vector<std::string> tokens;  // [S] as the tokenizer spells them
  std::vector<int> segments;        // [S] 0: a token of text, 1: of text_b
  std::vector<double> scales;       // [layers] the factor of q·k (1/√E by default)
  Tensor weights;                   // [layers, H, L, S] float32: softmax weights, 0 where masked
  Tensor scores;                    // [layers, H, L, S] float32: q·k, before scaling and masks
  Tensor allowed;                   // [layers, H, L, S] bool: true where query i may read key j
  Tensor values;                    // [layers, Hkv, S, Ev] float32: what the weights average

  int64_t layers() const { return weights.size(0); }
  int64_t heads() const { return weights.size(1); }
  int64_t kv_heads() const { return values.size(1); }
  int64_t length() const { return weights.size(2); }
};

// The maps of batch row `row` from each layer's inputs (`layers` in order):
// weights by scaled_dot_product_attention(need_weights = true, no dropout),
// masks by the same call with q = 0, scores q·k in float64. Tokens, segments
// and names are left to the caller.
AttentionMaps attention_maps(std::span<const AttentionInputs> layers, int64_t row = 0);

struct ExploreOptions {
  std::string text_b;  // a second text: a sentence pair for BERT, appended for a decoder
  // At most this many weights (tokens² × layers × heads): a page beyond some
  // million numbers is too large for a browser. > 0.
  int64_t max_weights = 1'000'000;
  // Encoders: pad the tokens with [PAD] to this length (masked keys); 0: no padding.
  int64_t pad_to = 0;
};

// A model to explore: a BERT / sentence-transformers directory (config.json,
// model.safetensors, tokenizer.json) or a GGUF file (loaded exact: float32
// weights, as transformers loads it).
class AttentionExplorer {
 public:
  explicit AttentionExplorer(const std::filesystem::path& model);
  ~AttentionExplorer();
  AttentionExplorer(AttentionExplorer&&) noexcept;
  AttentionExplorer& operator=(AttentionExplorer&&) noexcept;

  // The tokens of the text (and options.text_b) through the model. An Error
  // names the limit when the input is too long or the maps too large.
  AttentionMaps explore(const std::string& text, const ExploreOptions& options = {});

  const std::string& name() const;  // the model's name on the page
  bool causal() const;              // a decoder (causal self-attention)

  struct Model;  // the loaded model and its tokenizer (explore_models.cc)

 private:
  std::unique_ptr<Model> model_;
};

// The maps as the page's JSON: names, tokens and segments; weights, scores,
// scales and values as nested arrays of float32 numbers (shortest decimals
// that read back exactly); masks as strings of '0'/'1' per query row, shared
// by index. What a server's endpoint would return for the page to draw.
std::string explore_json(const AttentionMaps& maps);

struct PageOptions {
  // When set, the page shows a text box and asks this endpoint (POST
  // {"text", "text_b"} -> explore_json) for the maps of what the user types:
  // `qkv serve`'s live page. Empty: a static page.
  std::string live_endpoint;
};

// One self-contained HTML page (inline CSS and JavaScript, the data as JSON;
// no network): the head view, the model view and the tutorial view.
std::string explore_html(const AttentionMaps& maps, const PageOptions& options = {});

}  // namespace qkv::viz
