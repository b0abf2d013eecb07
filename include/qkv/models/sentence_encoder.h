// models::SentenceEncoder — one vector per text, as sentence-transformers
// computes it for a Transformer → Pooling (→ Normalize) model such as
// all-MiniLM-L6-v2:
//
//   ids    = [CLS] word pieces [SEP], truncated to max_seq_length
//   h      = BertModel(ids, mask)                      [n, L, D]
//   pooled = Σ_real h / (number of real tokens)        mean pooling (or CLS, max, mean·√len)
//   out    = pooled / max(‖pooled‖, 1e-12)             when modules.json has Normalize
//
//   models::SentenceEncoder encoder("models/all-MiniLM-L6-v2");
//   Tensor e = encoder.encode({"A cat sits.", "A dog runs."});   // [2, 384]
//   models::SentenceEncoder fast("models/all-MiniLM-L6-v2", Precision::kInt8);
//   double cosine = dot(row 0, row 1);                           // rows have norm 1
//
// Files of the model directory: config.json and model.safetensors (BertModel),
// tokenizer.json (text::WordPieceTokenizer), modules.json (which modules run;
// optional: without it, mean pooling and no normalisation), <pooling
// dir>/config.json (1_Pooling/config.json), and for max_seq_length
// sentence_bert_config.json or tokenizer_config.json (both optional), in the
// layouts of sentence-transformers before and from version 6.
//
// What sentence-transformers would compute otherwise is refused by name, not
// guessed: modules.json without Pooling; sentence_bert_config.json settings
// passed on to transformers (config_kwargs, processor_kwargs, ...) or another
// transformer_task / modality_config; a tokenizer_config.json that disagrees
// with tokenizer.json (transformers 5's BertTokenizer builds its normalizer
// and [CLS]/[SEP] from the former, qkv reads the latter), another
// truncation side, or left padding (it would shift BERT's positions).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qkv/models/bert.h"
#include "qkv/precision.h"
#include "qkv/tensor.h"
#include "qkv/text/wordpiece_tokenizer.h"

namespace qkv::models {

// sentence-transformers' pooling modes (pooling_mode_* in the pooling config).
enum class Pooling {
  kMean,         // mean over real tokens
  kCls,          // the first token's vector
  kMax,          // elementwise max over real tokens
  kMeanSqrtLen,  // sum over real tokens / √(number of real tokens)
};
// sentence-transformers' names: "mean", "cls", "max", "mean_sqrt_len_tokens".
const char* pooling_name(Pooling pooling);

class SentenceEncoder {
 public:
  // Reads the model directory; errors name the file and the problem.
  // precision: the arithmetic of the transformer (precision.h); bfloat16 and
  // int8 convert its weights once, here. int8 first calibrates (calibrate())
  // on built-in text: random whole words of the tokenizer's vocabulary.
  explicit SentenceEncoder(const std::filesystem::path& model_dir,
                           Precision precision = Precision::kFloat32);

  // Called after each batch with the number of texts encoded so far (a
  // progress bar); what it throws ends the call.
  using Progress = std::function<void(int64_t done)>;

  // Embeddings of `texts`, row i for texts[i]: [N, D] float32 ([0, D] for no text).
  // Texts are encoded in batches of `batch_size` texts of similar token counts
  // (sorted by length, so that little padding is computed). An interrupt
  // check (runtime.h: Ctrl-C in Python) is heard while tokenizing, between
  // batches and between the model's layers.
  Tensor encode(const std::vector<std::string>& texts, int64_t batch_size = 32,
                const Progress& progress = {}) const;

  // The last hidden state of every real token, as sentence-transformers'
  // output_value="token_embeddings": element i is [tokens of texts[i], D]
  // ([CLS] … [SEP]), neither pooled nor normalised. Batching as encode().
  std::vector<Tensor> token_embeddings(const std::vector<std::string>& texts,
                                       int64_t batch_size = 32,
                                       const Progress& progress = {}) const;

  // sentence-transformers' forward on tokenized features (calling the model
  // on what tokenize() gives): ids and attention_mask [batch, T] row-major,
  // right padding (each mask row: its real tokens' ones, then zeros; at
  // least one) -> token_embeddings [batch, T, D] (every position's last
  // hidden state, padding included, as sentence-transformers returns it)
  // and sentence_embedding [batch, D] (pooled over the real tokens,
  // normalised when the model says so).
  struct Features {
    Tensor token_embeddings;
    Tensor sentence_embedding;
  };
  Features forward_features(std::span<const int64_t> ids, std::span<const int64_t> attention_mask,
                            int64_t batch) const;

  // int8: smooths the weights (SmoothQuant, nn::Module::record_input_ranges)
  // against the input ranges the float32 model sees on `texts`, replacing the
  // constructor's calibration; a few dozen texts like those to be encoded are
  // enough. Other precisions: notes the ranges for a later int8 model.
  void calibrate(const std::vector<std::string>& texts);

  // Token ids as encode() feeds them to the model: [CLS] … [SEP], at most max_seq_length().
  std::vector<int64_t> token_ids(const std::string& text) const;

  Precision precision() const { return model_.precision(); }
  int64_t dimension() const { return model_.config().hidden_size; }
  int64_t max_seq_length() const { return max_seq_length_; }
  // Longer texts are truncated to `length` tokens from now on; 2 <= length <=
  // max_position_embeddings (else a ValueError naming the bounds).
  void set_max_seq_length(int64_t length);
  Pooling pooling() const { return pooling_; }
  bool normalize() const { return normalize_; }
  // Override what the model directory says (e.g. CLS pooling, or raw vectors
  // of a normalising model); the next encode() uses them.
  void set_pooling(Pooling pooling) { pooling_ = pooling; }
  void set_normalize(bool normalize) { normalize_ = normalize; }
  const BertModel& model() const { return model_; }
  const text::WordPieceTokenizer& tokenizer() const { return tokenizer_; }

 private:
  // Where modules.json puts the transformer and the pooling config (sentence_encoder.cc).
  struct Layout;
  static Layout read_layout(const std::filesystem::path& model_dir);
  SentenceEncoder(const Layout& layout, Precision precision);

  // Tokenizes, sorts and runs `texts` through the model in batches, handing
  // each batch's hidden states to `sink`. hidden: [n, L, D]; lengths: the n
  // real-token counts; rows: the n indices into `texts`.
  using BatchSink = std::function<void(const Tensor& hidden, const std::vector<int64_t>& lengths,
                                       const std::vector<int64_t>& rows)>;
  void run_batches(const std::vector<std::string>& texts, int64_t batch_size,
                   const Progress& progress, const char* function, const BatchSink& sink) const;

  // hidden: [n, L, D]  lengths: n real-token counts  ->  rows written to out[rows[i]]
  void pool(const Tensor& hidden, const std::vector<int64_t>& lengths,
            const std::vector<int64_t>& rows, Tensor& out) const;

  BertModel model_;
  text::WordPieceTokenizer tokenizer_;
  Pooling pooling_ = Pooling::kMean;
  bool normalize_ = false;
  int64_t max_seq_length_ = 0;
  int64_t pad_id_ = 0;
};

}  // namespace qkv::models
