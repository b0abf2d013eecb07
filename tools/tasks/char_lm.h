// A character-level language model trained on text (tutorial §7 and §8.2–8.3:
// a decoder-only Transformer learns to predict the next character).
//
//   train::CharCorpus corpus = train::load_char_corpus(train::default_fortune_files());
//   nn::DecoderModel model({.vocab_size = corpus.vocabulary.size(), .d_model = 128,
//                           .num_layers = 4, .num_heads = 4, .max_seq_len = 128});
//   train::CharLmTrainResult r = train::train_char_lm(model, corpus, {.steps = 1000});
//   train::save_char_lm(model, corpus.vocabulary, "lm.safetensors");
//   // then: qkv generate lm.safetensors
//
// The corpus: fortune files (Debian's `fortunes` package) list short texts
// separated by lines that are exactly "%"; the separators are dropped and the
// entries joined with "\n" (so a blank line ends each one). Any other text
// file is one entry. Every tenth entry is held out, so the held-out loss is
// measured on texts the model never trained on; the vocabulary is every
// character of the corpus (io::CharVocabulary::from_text).
//
// Training draws B random windows of T + 1 characters per step (inputs are
// the first T, targets the last T), minimises the mean cross-entropy with
// AdamW, linear warmup + cosine decay and gradient clipping. Losses are
// reported in bits per character (cross-entropy in nats / ln 2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/io/char_vocabulary.h"
#include "qkv/io/safetensors.h"
#include "qkv/nn/decoder_model.h"
#include "tasks/loop_checkpoint.h"

namespace qkv::train {

// Where Debian's `fortunes` package puts its files.
inline constexpr const char* kFortuneDir = "/usr/share/games/fortunes";

// A handful of fortune files of plain English prose, quotes and jokes (about
// 670 kB): the default corpus of `qkv train lm`.
std::vector<std::filesystem::path> default_fortune_files();

// The entries of one file: separated by lines that are exactly "%" (fortune
// files), or the whole text as one entry. Blank entries are skipped. A
// missing, unreadable or empty file (no text) is a qkv::Error naming it.
std::vector<std::string> read_text_entries(const std::filesystem::path& path);

struct CharCorpusOptions {
  // Entry i is held out when i % held_out_every == held_out_every − 1. With
  // fewer entries than that, the last 1/held_out_every of the text (from a
  // line start when there is one) is held out instead.
  int64_t held_out_every = 10;
};

struct CharCorpus {
  io::CharVocabulary vocabulary = io::CharVocabulary::bytes();  // every character of both parts
  std::string train_text;
  std::string held_out_text;
  std::vector<int64_t> train_ids;     // train_text encoded
  std::vector<int64_t> held_out_ids;  // held_out_text encoded
  int64_t entries = 0;                // read from the files
};

// Reads the files in order, splits them, builds the vocabulary. The files are
// named in errors; a corpus without two held-out or training characters is an Error.
CharCorpus load_char_corpus(const std::vector<std::filesystem::path>& files,
                            const CharCorpusOptions& options = {});
// The same from entries already in memory.
CharCorpus make_char_corpus(const std::vector<std::string>& entries,
                            const CharCorpusOptions& options = {});

// The entropy of the character frequencies of `ids`, in bits: the loss of the
// best model that ignores context (the unigram baseline).
double unigram_bits_per_char(std::span<const int64_t> ids, int64_t vocab_size);

// B windows of T + 1 consecutive ids at uniformly random starts.
struct CharBatch {
  int64_t batch = 0;             // B
  int64_t length = 0;            // T
  std::vector<int64_t> inputs;   // [B, T] row-major: window[0 .. T)
  std::vector<int64_t> targets;  // [B, T]: window[1 .. T], the next character of each input
};
// ids must hold at least T + 1 values.
CharBatch sample_windows(std::span<const int64_t> ids, int64_t batch, int64_t length,
                         Generator& gen);

// The mean loss of `model` on `ids` in bits per character: consecutive,
// non-overlapping windows of up to `context` + 1 ids, each position
// predicting the next (so early positions see little context, as in
// training). max_predictions > 0 stops after about that many (the first
// windows); 0 evaluates all of `ids`. Forward passes of `batch_size` windows.
double bits_per_char(nn::DecoderModel& model, std::span<const int64_t> ids, int64_t context,
                     int64_t max_predictions = 0, int64_t batch_size = 16);

// GPT-2's initialisation, for training from scratch: every matrix (the
// embeddings too) N(0, 0.02²), the last projection of each residual branch
// (attention.o_proj, feed_forward.w2 / linear2) N(0, (0.02 / √(2·layers))²),
// biases 0; norms keep weight 1, bias 0. nn::DecoderModel's own
// initialisation (torch's per-module defaults) draws the embedding N(0, 1):
// as the tied output head that makes the first logits ~√D large and the
// first loss tens of bits per character.
void init_gpt2(nn::DecoderModel& model, Generator& gen);

struct CharLmTrainOptions {
  int64_t steps = 1000;
  int64_t batch_size = 32;  // B windows per step
  int64_t context = 128;    // T characters per window (at most the model's max_seq_len)
  double lr = 2e-3;         // peak
  double min_lr = 2e-4;     // at the end of the cosine
  int64_t warmup_steps = 100;
  // AdamW's decoupled decay on the matrices (embeddings, projections); norms
  // and biases are not decayed.
  double weight_decay = 0.1;
  double clip_norm = 1.0;  // of all gradients together; 0: no clipping
  int64_t eval_every = 250;
  // Predictions per periodic held-out evaluation (0: all); the final one uses all.
  int64_t eval_predictions = 16384;
  uint64_t seed = 0;  // the batches (the model's own generator initialises it)
  // Checkpoints: the generator "batches", optimizers "decayed" (matrices)
  // and "plain" (norms, biases). A resumed run evaluates at the same steps.
  LoopControl control;
};

// Reported after every step; held_out_bits on the steps that evaluated.
struct CharLmProgress {
  int64_t step = 0;   // steps done, 1 .. steps
  int64_t steps = 0;  // the total
  double bits = 0;    // this batch's training loss, bits per character
  // Periodic evaluations (the first eval_predictions held-out predictions),
  // the last step included: the same measure at every step that has one.
  std::optional<double> held_out_bits;
  double tokens_per_second = 0;  // predictions trained on per second
  double elapsed_seconds = 0;
  double seconds_left = 0;
};

struct CharLmTrainResult {
  int64_t steps = 0;         // steps done, those before a resumed checkpoint included
  bool stopped = false;      // control.after_step stopped the loop before the last step
  double final_bits = 0;     // the last batch's training loss
  double held_out_bits = 0;  // on all held-out text, after the last step (not when stopped)
  double seconds = 0;        // training, without the final evaluation
};

// Trains `model` in place. Its vocab_size must cover the corpus' vocabulary
// and options.context must fit its max_seq_len (learned/sinusoidal positions).
CharLmTrainResult train_char_lm(nn::DecoderModel& model, const CharCorpus& corpus,
                                const CharLmTrainOptions& options,
                                const std::function<void(const CharLmProgress&)>& on_progress = {});

// models::save_decoder_model(model, path) with the vocabulary's JSON under
// io::CharVocabulary::kMetadataKey (what `qkv generate` reads) plus `metadata`; written atomically.
void save_char_lm(const nn::DecoderModel& model, const io::CharVocabulary& vocabulary,
                  const std::filesystem::path& path, const io::SafetensorsMetadata& metadata = {});

}  // namespace qkv::train
