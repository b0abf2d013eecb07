// `qkv train lm`: trains a small decoder-only Transformer to predict the next
// character of English text (fortune files by default), reports the held-out
// loss in bits per character next to the unigram baseline, prints a sample
// and saves the model for `qkv generate`. The corpus, batches and loop live
// in tools/tasks/char_lm.h.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
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
#include "train_run.h"
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
  // --steps, --batch-size, --context, --lr and --seed (which seeds the
  // initialisation and the sample too); run_lm sets the rest of the schedule.
  train::CharLmTrainOptions training{.steps = 800, .batch_size = 8, .context = 256, .lr = 3e-3};
  // --layers, --d-model and --heads; run_lm sets the vocabulary and
  // max_seq_len (--context).
  nn::DecoderModelConfig model_config{
      .d_model = 128, .num_layers = 4, .num_heads = 4, .ffn = nn::FeedForwardKind::kGelu};
  int threads = 1;
  RunOptions run;
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

// The shortest text that reads back as the same double ("0.003").
std::string exact(double value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  return std::string(buffer, end);
}

// FNV-1a of the text: a resumed run must train on the same characters.
std::string fingerprint(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%zu chars, fnv1a %016llx", text.size(),
                static_cast<unsigned long long>(h));
  return buffer;
}

// What a checkpoint of this run must agree on (train_run.h).
RunIdentity lm_identity(const LmOptions& o, const train::CharCorpus& corpus) {
  std::string text;
  for (const std::string& f : o.text) text += (text.empty() ? "" : " ") + shell_word(f);
  return {"lm",
          {{"--d-model", std::to_string(o.model_config.d_model)},
           {"--layers", std::to_string(o.model_config.num_layers)},
           {"--heads", std::to_string(o.model_config.num_heads)},
           {"--context", std::to_string(o.training.context)},
           {"--batch-size", std::to_string(o.training.batch_size)},
           {"--steps", std::to_string(o.training.steps)},
           {"--lr", exact(o.training.lr)},
           {"--seed", std::to_string(o.training.seed)},
           {"--text", text},
           {"corpus", fingerprint(corpus.train_text + corpus.held_out_text)}}};
}

// The best periodic held-out score so far, carried through checkpoints.
struct Best {
  int64_t step = 0;  // 0: none yet
  double bits = 0;
  void put(io::Checkpoint& c) const {
    c.metadata["best.step"] = std::to_string(step);
    c.metadata["best.bits"] = exact(bits);
  }
  void restore(const io::Checkpoint& c, const std::string& path) {
    const auto s = c.metadata.find("best.step"), b = c.metadata.find("best.bits");
    bool ok = s != c.metadata.end() && b != c.metadata.end();
    if (ok) {
      const auto [p1, e1] =
          std::from_chars(s->second.data(), s->second.data() + s->second.size(), step);
      const auto [p2, e2] =
          std::from_chars(b->second.data(), b->second.data() + b->second.size(), bits);
      ok = e1 == std::errc() && e2 == std::errc() && step >= 0 && step <= c.step;
    }
    QKV_CHECK(ok, "--resume: '", path, "' has no valid \"best.step\" / \"best.bits\" metadata ",
              "(the best held-out score so far)");
  }
};

int run_lm(const LmOptions& o) {
  // Checked before training: the sample after it continues a one-character
  // prompt, and the model's longest sequence (max_seq_len) is its context.
  QKV_CHECK(o.sample_tokens <= o.training.context, "--sample-tokens (", o.sample_tokens,
            ") must be at most --context (", o.training.context,
            "): the model's longest sequence is its context");
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

  nn::DecoderModelConfig config = o.model_config;
  config.vocab_size = vocab;
  config.max_seq_len = o.training.context;
  Generator init(o.training.seed);
  nn::DecoderModel model(config, &init);
  train::init_gpt2(model, init);

  // The checkpoint is checked before anything is written.
  const RunIdentity identity = lm_identity(o, corpus);
  std::optional<io::Checkpoint> resume;
  Best best;
  if (!o.run.resume.empty()) {
    resume = load_resume(o.run.resume, identity);
    QKV_CHECK(resume->step < o.training.steps, "--resume: checkpoint '", o.run.resume,
              "' is at step ", resume->step, " of ", o.training.steps, ": that run is finished");
    best.restore(*resume, o.run.resume);
  }
  const std::filesystem::path dir = prepare_run_dir(o.run, "lm");
  const std::filesystem::path last_path = dir / kLastModelFile, best_path = dir / kBestModelFile;
  // The model is written after training: find out now if it cannot be.
  io::check_writable(last_path,
                     static_cast<std::uintmax_t>(model.num_parameters()) * 12 + (3 << 20));
  const nn::DecoderModelConfig& c = model.config();
  std::cout << "\n"
            << style.strong("Decoder") << " (" << c.num_layers << " layers, d_model " << c.d_model
            << ", " << c.num_heads << " heads, RoPE, RMSNorm, GELU FFN " << c.ffn_hidden
            << ", tied embeddings; " << grouped(model.num_parameters()) << " parameters)\n"
            << style.muted("context " + std::to_string(o.training.context) + ", batch " +
                           std::to_string(o.training.batch_size) + ", " +
                           std::to_string(o.training.steps) + " steps, " +
                           std::to_string(num_threads()) +
                           (num_threads() == 1 ? " thread" : " threads") +
                           "; loss in bits per character; Ctrl-C saves a checkpoint")
            << "\n";
  if (resume)
    std::cout << "Resuming after step " << resume->step << " from " << o.run.resume << "\n";

  const auto model_metadata = [&](int64_t step, double bits) -> io::SafetensorsMetadata {
    return {{"qkv.train.task", "lm"},
            {"qkv.train.step", std::to_string(step)},
            {"qkv.train.held_out_bits_per_char", fixed(bits, 4)}};
  };
  InterruptToSave interrupt;
  CheckpointSaver saver(o.run, identity, dir, o.training.steps);
  train::CharLmTrainOptions t = o.training;
  t.min_lr = t.lr / 10;
  t.eval_every = std::max<int64_t>(1, o.training.steps / 5);
  t.eval_predictions = 8192;
  t.control.resume = resume ? &*resume : nullptr;
  t.control.after_step = [&](int64_t step, const train::Snapshot& snapshot) {
    return saver.after_step(step, snapshot, [&](io::Checkpoint& ck) { best.put(ck); });
  };
  ProgressLine progress("lm", in_place, std::max<int64_t>(1, o.training.steps / 30));
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
          std::cout << "  held-out " << fixed(*p.held_out_bits, 3) << " bits/char";
          if (best.step == 0 || *p.held_out_bits < best.bits) {
            best = {.step = p.step, .bits = *p.held_out_bits};
            train::save_char_lm(model, corpus.vocabulary, best_path,
                                model_metadata(p.step, *p.held_out_bits));
            std::cout << style.muted("  (best so far: " + best_path.string() + ")");
          }
          std::cout << "\n" << std::flush;
        }
      });
  if (result.stopped) return saver.report_stop(std::cout);

  train::save_char_lm(model, corpus.vocabulary, last_path,
                      model_metadata(result.steps, result.held_out_bits));

  std::cout << "\n" << style.heading("Summary") << "\n";
  std::cout << "  held-out loss  " << style.good(fixed(result.held_out_bits, 3) + " bits/char")
            << "  (all held-out text; unigram baseline " << fixed(unigram, 3) << ", uniform over "
            << vocab << " " << fixed(std::log2(static_cast<double>(vocab)), 3) << ")\n";
  std::cout << "  best periodic held-out " << fixed(best.bits, 3) << " bits/char at step "
            << best.step << " of " << result.steps
            << style.muted(" (first " + std::to_string(t.eval_predictions) +
                           " held-out predictions)")
            << "\n";
  std::cout << "  trained " << result.steps << " steps in " << seconds(result.seconds)
            << (resume ? " (since the resume)" : "") << "\n";

  if (o.sample_tokens > 0) {
    nn::GenerationOptions g;
    g.max_new_tokens = o.sample_tokens;
    g.sampling = {.temperature = o.temperature};
    g.seed = o.training.seed;
    const std::vector<int64_t> prompt = corpus.vocabulary.encode("\n");
    std::cout << "\n"
              << style.heading("Sample")
              << style.muted(" (temperature " + fixed(o.temperature, 1) + ")") << "\n";
    std::string text;
    nn::generate(model, prompt, g, [&](int64_t id) {
      text += corpus.vocabulary.decode(id);
      return !InterruptToSave::requested();
    });
    // Indented, so that the sample stands apart from the report.
    std::cout << "  ";
    for (char ch : text) std::cout << ch << (ch == '\n' ? "  " : "");
    std::cout << "\n";
  }
  std::cout << "\n  Last model: " << style.good(last_path.string())
            << "\n  Best model: " << style.good(best_path.string()) << " (step " << best.step
            << ", " << fixed(best.bits, 3)
            << " bits/char)\n  Generate more with:\n    qkv generate "
            << shell_word(best_path.string()) << " --temperature 0.8 --max-new-tokens "
            << std::min<int64_t>(o.training.context, 400) << "\n";
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
        add_positive(app, "--steps", options.training.steps, "Training steps");
        add_positive(app, "--batch-size", options.training.batch_size, "Windows of text per step");
        add_defaulted(app, "--context", options.training.context, "Characters per window (T)")
            ->check(in_range(int64_t{2}, int64_t{4096}));
        add_defaulted(app, "--layers", options.model_config.num_layers, "Transformer blocks")
            ->check(in_range(int64_t{1}, int64_t{64}));
        add_positive(app, "--d-model", options.model_config.d_model, "Model width D");
        add_positive(app, "--heads", options.model_config.num_heads,
                     "Attention heads (D / heads must be even)");
        add_positive(app, "--lr", options.training.lr,
                     "Peak learning rate (AdamW, warmup then cosine to lr/10)");
        add_defaulted(app, "--seed", options.training.seed,
                      "Seeds the initialisation, batches and sample");
        add_threads_option(app, options.threads);
        add_run_options(app, options.run,
                        "Directory for last.safetensors, best.safetensors (the best held-out "
                        "score) and checkpoint.safetensors");
        add_non_negative(app, "--sample-tokens", options.sample_tokens,
                         "Characters of sample text to print at the end (0: none)");
        add_non_negative(app, "--temperature", options.temperature,
                         "Sampling temperature (0: greedy)");
        app.footer(
            "Every 10th entry is held out; the held-out loss is measured on text never trained "
            "on.\n"
            "The unigram baseline is the entropy of the character frequencies: the loss of a\n"
            "model that ignores context.\n"
            "Ctrl-C finishes the step, saves checkpoint.safetensors in --out and prints the\n"
            "command that resumes it (a second Ctrl-C stops at once).");
      });
}

}  // namespace qkv::cli
