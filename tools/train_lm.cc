// `qkv train lm`: trains a small decoder-only Transformer to predict the next
// character of English text (fortune files by default), reports the held-out
// loss in bits per character next to the unigram baseline, prints a sample
// and saves the model for `qkv generate`. The corpus, batches and loop live
// in tools/tasks/char_lm.h.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/runtime.h"
#include "tasks/char_lm.h"
#include "terminal.h"
#include "train_tasks.h"
#include "training_progress.h"

namespace qkv::cli {

namespace {

// The defaults train for about 4 minutes of one core (~7k characters/s on
// this project's 2-core AVX-512 Xeon) and reach about 2.5 bits/char on the
// default fortunes, where samples are English-looking words and lines with
// "-- Author" attributions. Measured alternatives (same CPU time, held-out
// bits/char): context 128 learns as fast but its samples fall apart past 128
// characters (RoPE meets distances it never trained on); batch 16 x 128 or
// 32 x 64 gave the same loss per character; d_model 96 no better per second;
// lr 6e-3 no better than 3e-3. GELU rather than SwiGLU: the same size, 30%
// faster per step here. One thread: two spent most of their time waiting in
// OpenMP barriers whenever another process used a core (3x slower).
struct LmOptions {
  std::vector<std::string> text;  // empty: train::default_fortune_files()
  int64_t steps = 800;
  int64_t batch_size = 8;
  int64_t context = 256;
  int64_t layers = 4;
  int64_t d_model = 128;
  int64_t heads = 4;
  double lr = 3e-3;
  uint64_t seed = 0;
  int threads = 1;
  std::string out = "lm.safetensors";
  int64_t sample_tokens = 200;
  double temperature = 0.8;
};

std::string fixed(double value, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// "667,104"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The shell can paste it back: quoted unless it is plainly safe.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_./+=:,@") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run_lm(const LmOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  const Style style(stdout_wants_color());
  const bool in_place = ::isatty(STDOUT_FILENO) != 0;

  std::vector<std::filesystem::path> files;
  for (const std::string& f : o.text) files.emplace_back(f);
  if (files.empty()) files = train::default_fortune_files();
  const train::CharCorpus corpus = train::load_char_corpus(files);
  const int64_t vocab = corpus.vocabulary.size();
  const double unigram = train::unigram_bits_per_char(corpus.train_ids, vocab);
  const int64_t chars = static_cast<int64_t>(corpus.train_ids.size() + corpus.held_out_ids.size());
  std::cout << style.heading("Character-level language model") << ": predict the next character "
            << "of " << files.size() << (files.size() == 1 ? " file" : " files") << ", "
            << grouped(chars) << " characters, " << vocab << " distinct\n"
            << style.muted(grouped(static_cast<int64_t>(corpus.train_ids.size())) +
                           " to train on, " +
                           grouped(static_cast<int64_t>(corpus.held_out_ids.size())) +
                           " held out (every 10th entry); unigram baseline " + fixed(unigram, 2) +
                           " bits/char")
            << "\n";

  nn::DecoderModelConfig config{.vocab_size = vocab,
                                .d_model = o.d_model,
                                .num_layers = o.layers,
                                .num_heads = o.heads,
                                .max_seq_len = o.context,
                                .ffn = nn::FeedForwardKind::kGelu};
  Generator init(o.seed);
  nn::DecoderModel model(config, &init);
  train::init_gpt2(model, init);
  // The model is written after training: find out now if it cannot be.
  io::check_writable(o.out, static_cast<std::uintmax_t>(model.num_parameters()) * 4 + (1 << 20));
  const nn::DecoderModelConfig& c = model.config();
  std::cout << "\n"
            << style.strong("Decoder") << " (" << c.num_layers << " layers, d_model " << c.d_model
            << ", " << c.num_heads << " heads, RoPE, RMSNorm, GELU FFN " << c.ffn_hidden
            << ", tied embeddings; " << grouped(model.num_parameters()) << " parameters)\n"
            << style.muted("context " + std::to_string(o.context) + ", batch " +
                           std::to_string(o.batch_size) + ", " + std::to_string(o.steps) +
                           " steps, " + std::to_string(num_threads()) +
                           (num_threads() == 1 ? " thread" : " threads") +
                           "; loss in bits per character")
            << "\n";

  train::CharLmTrainOptions t;
  t.steps = o.steps;
  t.batch_size = o.batch_size;
  t.context = o.context;
  t.lr = o.lr;
  t.min_lr = o.lr / 10;
  t.seed = o.seed;
  t.eval_every = std::max<int64_t>(1, o.steps / 5);
  t.eval_predictions = 8192;
  ProgressLine progress("lm", in_place, std::max<int64_t>(1, o.steps / 30));
  const train::CharLmTrainResult result =
      train::train_char_lm(model, corpus, t, [&](const train::CharLmProgress& p) {
        // The progress line's held-out column is an accuracy: evaluations get their own line.
        const StepReport report{.step = p.step,
                                .steps = p.steps,
                                .loss = p.bits,
                                .tokens_per_second = p.tokens_per_second,
                                .elapsed_seconds = p.elapsed_seconds,
                                .seconds_left = p.seconds_left};
        progress.update(report, p.held_out_bits.has_value());
        if (p.held_out_bits) {
          if (!in_place) std::cout << "   ";
          std::cout << "  held-out " << fixed(*p.held_out_bits, 3) << " bits/char\n" << std::flush;
        }
      });

  train::save_char_lm(model, corpus.vocabulary, o.out,
                      {{"qkv.train.task", "lm"},
                       {"qkv.train.held_out_bits_per_char", fixed(result.held_out_bits, 4)}});

  std::cout << "\n" << style.heading("Summary") << "\n";
  std::cout << "  held-out loss  " << style.good(fixed(result.held_out_bits, 3) + " bits/char")
            << "  (unigram baseline " << fixed(unigram, 3) << ", uniform over " << vocab << " "
            << fixed(std::log2(static_cast<double>(vocab)), 3) << ")\n";
  std::cout << "  trained " << result.steps << " steps in " << seconds(result.seconds) << "\n";

  if (o.sample_tokens > 0) {
    nn::GenerationOptions g;
    g.max_new_tokens = o.sample_tokens;
    g.sampling = {.temperature = o.temperature};
    g.seed = o.seed;
    const std::vector<int64_t> prompt = corpus.vocabulary.encode("\n");
    std::cout << "\n"
              << style.heading("Sample")
              << style.muted(" (temperature " + fixed(o.temperature, 1) + ")") << "\n";
    std::string text;
    nn::generate(model, prompt, g, [&](int64_t id) {
      text += corpus.vocabulary.decode(id);
      return true;
    });
    // Indented, so that the sample stands apart from the report.
    std::cout << "  ";
    for (char ch : text) std::cout << ch << (ch == '\n' ? "  " : "");
    std::cout << "\n";
  }
  std::cout << "\n  Model: " << style.good(o.out) << "\n  Generate more with:\n    qkv generate "
            << shell_word(o.out) << " --temperature 0.8 --max-new-tokens "
            << std::min<int64_t>(o.context, 400) << "\n";
  return 0;
}

}  // namespace

Command add_train_lm(CLI::App& train) {
  return make_command(
      train, "lm", "Character-level language model (decoder-only Transformer) on fortune texts",
      run_lm, [](CLI::App& app, LmOptions& options) {
        app.add_option("--text", options.text,
                       "Text files to learn (fortune files: entries separated by \"%\" lines); "
                       "default: ten files of /usr/share/games/fortunes")
            ->type_name("FILE...");
        add_positive(app, "--steps", options.steps, "Training steps");
        add_positive(app, "--batch-size", options.batch_size, "Windows of text per step");
        add_defaulted(app, "--context", options.context, "Characters per window (T)")
            ->check(CLI::Range(int64_t{2}, int64_t{4096}));
        add_defaulted(app, "--layers", options.layers, "Transformer blocks")
            ->check(CLI::Range(int64_t{1}, int64_t{64}));
        add_positive(app, "--d-model", options.d_model, "Model width D");
        add_positive(app, "--heads", options.heads, "Attention heads (D / heads must be even)");
        add_positive(app, "--lr", options.lr,
                     "Peak learning rate (AdamW, warmup then cosine to lr/10)");
        add_defaulted(app, "--seed", options.seed, "Seeds the initialisation, batches and sample");
        add_threads_option(app, options.threads);
        add_defaulted(app, "--out", options.out,
                      "Model file to write (safetensors, with the vocabulary)")
            ->type_name("FILE");
        add_non_negative(app, "--sample-tokens", options.sample_tokens,
                         "Characters of sample text to print at the end (0: none)");
        add_non_negative(app, "--temperature", options.temperature,
                         "Sampling temperature (0: greedy)");
        app.footer(
            "Every 10th entry is held out; the held-out loss is measured on text never trained "
            "on.\n"
            "The unigram baseline is the entropy of the character frequencies: the loss of a\n"
            "model that ignores context.");
      });
}

}  // namespace qkv::cli
