#include "tasks/char_lm.h"

#include <utf8proc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numbers>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/loss.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "tasks/task_schedule.h"

namespace qkv::train {

namespace {

namespace fs = std::filesystem;

Error io_error(const fs::path& path, const std::string& what) {
  return Error(ErrorKind::kIO, detail::concat("text file '", path.string(), "': ", what));
}

// Whether `s` holds nothing but whitespace.
bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); });
}

std::string join(const std::vector<std::string>& parts, const std::vector<size_t>& which) {
  std::string out;
  for (size_t i : which) {
    if (!out.empty()) out += '\n';
    out += parts[i];
  }
  return out;
}

// The model is saved with its characters as JSON strings, which must be
// valid UTF-8: a file with overlong forms, surrogates or stray bytes is
// refused before training, not at the save after it.
void check_utf8(const fs::path& path, std::string_view text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  int64_t line = 1;
  for (utf8proc_ssize_t i = 0; i < size;) {
    utf8proc_int32_t code_point;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + i, size - i, &code_point);
    if (n <= 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", bytes[i]);
      QKV_CHECK(false, "text file '", path.string(), "': is not valid UTF-8: byte ", i, " (", hex,
                ", line ", line, ") starts no valid character; convert the file to UTF-8 ",
                "(e.g. iconv -f latin1 -t utf-8)");
    }
    line += code_point == '\n';
    i += n;
  }
}

// nats -> bits.
constexpr double kBitsPerNat = 1.0 / std::numbers::ln2;

}  // namespace

std::vector<fs::path> default_fortune_files() {
  // Prose, quotes and jokes; the files of ASCII art, long lists and
  // definitions teach formatting more than English.
  std::vector<fs::path> files;
  for (const char* name : {"fortunes", "wisdom", "literature", "science", "humorists", "people",
                           "work", "love", "food", "education"})
    files.push_back(fs::path(kFortuneDir) / name);
  return files;
}

std::vector<std::string> read_text_entries(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw io_error(path, "no such file");
  if (fs::is_directory(status)) throw io_error(path, "is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(path, "cannot open it for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw io_error(path, "read error");
  const std::string text = buffer.str();
  if (blank(text)) throw io_error(path, "is empty (no text to train on)");
  check_utf8(path, text);

  // Entries end at lines that are exactly "%"; each keeps its own line ends.
  std::vector<std::string> entries;
  std::string entry;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    std::string_view line(text.data() + start,
                          (end == std::string::npos ? text.size() : end) - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      if (!blank(entry)) entries.push_back(std::move(entry));
      entry.clear();
    } else {
      entry.append(text, start, next - start);
    }
    start = next;
  }
  if (!blank(entry)) entries.push_back(std::move(entry));
  if (entries.empty()) throw io_error(path, "is empty: no text besides \"%\" separator lines");
  return entries;
}

CharCorpus make_char_corpus(const std::vector<std::string>& entries,
                            const CharCorpusOptions& options) {
  const int64_t every = options.held_out_every;
  QKV_CHECK(every >= 2, "make_char_corpus: held_out_every must be >= 2, got ", every);
  CharCorpus corpus;
  corpus.entries = static_cast<int64_t>(entries.size());
  if (corpus.entries >= every) {
    std::vector<size_t> train, held_out;
    for (size_t i = 0; i < entries.size(); ++i)
      (static_cast<int64_t>(i) % every == every - 1 ? held_out : train).push_back(i);
    corpus.train_text = join(entries, train);
    corpus.held_out_text = join(entries, held_out);
  } else {
    // Too few entries: hold out the tail, from a line start when one is near.
    std::vector<size_t> all(entries.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::string text = join(entries, all);
    size_t cut = text.size() - text.size() / static_cast<size_t>(every);
    const size_t line_start = text.rfind('\n', cut);
    if (line_start != std::string::npos && line_start + 1 < text.size() &&
        text.size() - (line_start + 1) < 2 * (text.size() - cut))
      cut = line_start + 1;
    // Never inside a UTF-8 sequence: back up to a lead byte.
    while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;
    corpus.train_text = text.substr(0, cut);
    corpus.held_out_text = text.substr(cut);
  }
  corpus.vocabulary = io::CharVocabulary::from_text(corpus.train_text + corpus.held_out_text);
  corpus.train_ids = corpus.vocabulary.encode(corpus.train_text);
  corpus.held_out_ids = corpus.vocabulary.encode(corpus.held_out_text);
  QKV_CHECK(corpus.train_ids.size() >= 2 && corpus.held_out_ids.size() >= 2,
            "the corpus is too small to split: ", corpus.train_ids.size(), " training and ",
            corpus.held_out_ids.size(), " held-out characters (each needs at least 2)");
  return corpus;
}

CharCorpus load_char_corpus(const std::vector<fs::path>& files, const CharCorpusOptions& options) {
  QKV_CHECK(!files.empty(), "load_char_corpus: no text files given");
  std::vector<std::string> entries;
  for (const fs::path& path : files) {
    std::vector<std::string> more = read_text_entries(path);
    // UTF-8 is checked per file, so that an error names the file.
    std::string text;
    for (const std::string& e : more) text += e;
    try {
      (void)io::CharVocabulary::from_text(text);
    } catch (const Error& error) {
      throw Error(ErrorKind::kValue,
                  detail::concat("text file '", path.string(), "': ", error.what()));
    }
    std::move(more.begin(), more.end(), std::back_inserter(entries));
  }
  return make_char_corpus(entries, options);
}

double unigram_bits_per_char(std::span<const int64_t> ids, int64_t vocab_size) {
  QKV_CHECK(!ids.empty(), "unigram_bits_per_char: no ids");
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  for (int64_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size, "unigram_bits_per_char: id ", id,
              " is outside the vocabulary of ", vocab_size);
    ++counts[static_cast<size_t>(id)];
  }
  const double n = static_cast<double>(ids.size());
  double h = 0.0;
  for (int64_t c : counts)
    if (c > 0) h -= c / n * std::log2(c / n);
  return h;
}

CharBatch sample_windows(std::span<const int64_t> ids, int64_t batch, int64_t length,
                         Generator& gen) {
  const int64_t n = static_cast<int64_t>(ids.size());
  QKV_CHECK(batch >= 1 && length >= 1, "sample_windows: batch and length must be >= 1, got ", batch,
            " and ", length);
  QKV_CHECK(n >= length + 1, "sample_windows: windows of ", length + 1, " characters (context ",
            length, " + 1) do not fit in a text of ", n);
  CharBatch b;
  b.batch = batch;
  b.length = length;
  b.inputs.reserve(static_cast<size_t>(batch * length));
  b.targets.reserve(static_cast<size_t>(batch * length));
  const int64_t starts = n - length;  // start in [0, n − T − 1]
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t s =
        std::min(starts - 1, static_cast<int64_t>(gen.uniform() * static_cast<double>(starts)));
    b.inputs.insert(b.inputs.end(), ids.begin() + s, ids.begin() + s + length);
    b.targets.insert(b.targets.end(), ids.begin() + s + 1, ids.begin() + s + length + 1);
  }
  return b;
}

double bits_per_char(nn::DecoderModel& model, std::span<const int64_t> ids, int64_t context,
                     int64_t max_predictions, int64_t batch_size) {
  const int64_t n = static_cast<int64_t>(ids.size());
  QKV_CHECK(n >= 2, "bits_per_char: needs at least 2 ids, got ", n);
  QKV_CHECK(context >= 1 && batch_size >= 1 && max_predictions >= 0,
            "bits_per_char: context and batch_size must be >= 1 and max_predictions >= 0, got ",
            context, ", ", batch_size, ", ", max_predictions);
  const int64_t T = std::min(context, n - 1);
  const int64_t limit = max_predictions > 0 ? std::min(max_predictions, n - 1) : n - 1;
  double nats = 0.0;
  int64_t count = 0;
  int64_t start = 0;
  while (count < limit && start + 1 < n) {
    // Up to batch_size full windows in one pass; the last, shorter one alone.
    int64_t windows = 0;
    std::vector<int64_t> inputs, targets;
    while (windows < batch_size && count + windows * T < limit && start + T + 1 <= n) {
      inputs.insert(inputs.end(), ids.begin() + start, ids.begin() + start + T);
      targets.insert(targets.end(), ids.begin() + start + 1, ids.begin() + start + T + 1);
      start += T;
      ++windows;
    }
    if (windows == 0) {  // the tail, shorter than T
      const int64_t t = n - 1 - start;
      inputs.assign(ids.begin() + start, ids.begin() + start + t);
      targets.assign(ids.begin() + start + 1, ids.begin() + start + t + 1);
      start = n;
      windows = 1;
    }
    const Tensor logits = model.forward(inputs, windows);
    const int64_t rows = static_cast<int64_t>(targets.size());
    const Tensor flat = logits.reshape({rows, logits.size(2)});
    nats += cross_entropy(flat, targets, {.reduction = Reduction::kSum}).item();
    count += rows;
  }
  return nats / static_cast<double>(count) * kBitsPerNat;
}

void init_gpt2(nn::DecoderModel& model, Generator& gen) {
  constexpr double kStd = 0.02;
  const double residual_std =
      kStd / std::sqrt(2.0 * static_cast<double>(model.config().num_layers));
  for (const nn::Parameter& p : model.parameters()) {
    Tensor value = p.value;
    if (p.name.find("norm.") != std::string::npos) {  // attention_norm, ffn_norm, norm
      value.fill(p.name.ends_with(".bias") ? 0.0 : 1.0);
    } else if (p.name.ends_with(".bias")) {
      value.fill(0.0);
    } else {
      const bool residual = p.name.ends_with("o_proj.weight") || p.name.ends_with("w2.weight") ||
                            p.name.ends_with("linear2.weight");
      value.copy_from(
          scale(Tensor::randn(value.shape(), gen, value.dtype()), residual ? residual_std : kStd));
    }
  }
}

CharLmTrainResult train_char_lm(nn::DecoderModel& model, const CharCorpus& corpus,
                                const CharLmTrainOptions& options,
                                const std::function<void(const CharLmProgress&)>& on_progress) {
  const char* m = "train_char_lm";
  const nn::DecoderModelConfig& c = model.config();
  QKV_CHECK(options.steps >= 1 && options.batch_size >= 1 && options.context >= 1, m,
            ": steps, batch_size and context must be >= 1, got ", options.steps, ", ",
            options.batch_size, ", ", options.context);
  QKV_CHECK(options.eval_every >= 1 && options.eval_predictions >= 0, m,
            ": eval_every must be >= 1 and eval_predictions >= 0, got ", options.eval_every,
            " and ", options.eval_predictions);
  QKV_CHECK(corpus.vocabulary.size() <= c.vocab_size, m, ": the corpus has ",
            corpus.vocabulary.size(), " characters but the model's vocab_size is ", c.vocab_size);
  QKV_CHECK(c.positions == nn::PositionKind::kRope || options.context <= c.max_seq_len, m,
            ": context ", options.context, " exceeds the model's max_seq_len ", c.max_seq_len);
  QKV_CHECK(static_cast<int64_t>(corpus.train_ids.size()) >= options.context + 1, m,
            ": the training text has ", corpus.train_ids.size(), " characters; context ",
            options.context, " needs at least ", options.context + 1);

  std::vector<nn::Parameter> params = model.parameters();
  // Matrices decay; norm weights and biases (1-D) do not, as in GPT-2 / nanoGPT.
  std::vector<nn::Parameter> decayed, plain;
  for (const nn::Parameter& p : params) (p.value.dim() >= 2 ? decayed : plain).push_back(p);
  optim::AdamW opt_decayed(decayed,
                           {.lr = options.lr, .beta2 = 0.99, .weight_decay = options.weight_decay});
  std::optional<optim::AdamW> opt_plain;
  if (!plain.empty()) opt_plain.emplace(plain, optim::AdamOptions{.lr = options.lr, .beta2 = 0.99});
  const optim::WarmupCosineSchedule schedule =
      task_schedule(options.lr, options.warmup_steps, options.steps, options.min_lr);
  Generator gen(options.seed);
  const int64_t B = options.batch_size, T = options.context;

  int64_t first = 0;
  if (const io::Checkpoint* resume = options.control.resume) {
    QKV_CHECK(resume->step >= 0 && resume->step < options.steps, m, ": the checkpoint is at step ",
              resume->step, ", this run has ", options.steps, " steps");
    restore_parameters(*resume, params);
    restore_optimizer(*resume, "decayed", opt_decayed);
    if (opt_plain) restore_optimizer(*resume, "plain", *opt_plain);
    restore_generator(*resume, "batches", gen);
    first = resume->step;
  }
  const auto snapshot = [&](int64_t steps_done) {
    io::Checkpoint c;
    c.step = steps_done;
    put_parameters(c, params);
    put_optimizer(c, "decayed", opt_decayed);
    if (opt_plain) put_optimizer(c, "plain", *opt_plain);
    put_generator(c, "batches", gen);
    return c;
  };

  CharLmTrainResult result;
  CharLmProgress progress;
  progress.steps = options.steps;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = first; step < options.steps; ++step) {
    const CharBatch batch = sample_windows(corpus.train_ids, B, T, gen);
    model.zero_grad();
    nn::DecoderModelRecord record;
    const Tensor logits = model.forward(batch.inputs, B, &record);  // [B, T, vocab]
    const Tensor flat = logits.view({B * T, c.vocab_size});
    const double loss = cross_entropy(flat, batch.targets).item();
    Tensor grad_logits = Tensor::zeros(flat.shape(), c.dtype);
    cross_entropy_backward(Tensor::ones({}, c.dtype), flat, batch.targets, {}, grad_logits);
    model.backward(grad_logits.view(logits.shape()), record);
    if (options.clip_norm > 0) optim::clip_grad_norm(params, options.clip_norm);
    const double lr = schedule.lr(step);
    opt_decayed.set_lr(lr);
    opt_decayed.step();
    if (opt_plain) {
      opt_plain->set_lr(lr);
      opt_plain->step();
    }

    progress.step = step + 1;
    progress.bits = loss * kBitsPerNat;
    progress.held_out_bits.reset();
    if (progress.step % options.eval_every == 0 || progress.step == options.steps)
      progress.held_out_bits =
          bits_per_char(model, corpus.held_out_ids, T, options.eval_predictions);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t done_here = progress.step - first;  // steps of this process
    progress.elapsed_seconds = elapsed;
    progress.tokens_per_second =
        elapsed > 0 ? static_cast<double>(done_here * B * T) / elapsed : 0.0;
    progress.seconds_left = elapsed / done_here * (options.steps - progress.step);
    result.steps = progress.step;
    result.final_bits = progress.bits;
    result.seconds = elapsed;
    // The last step also measures all held-out text (the result; not reported per step).
    if (progress.step == options.steps) {
      const bool all =
          options.eval_predictions == 0 ||
          options.eval_predictions >= static_cast<int64_t>(corpus.held_out_ids.size()) - 1;
      result.held_out_bits =
          all ? *progress.held_out_bits : bits_per_char(model, corpus.held_out_ids, T);
    }
    if (on_progress) on_progress(progress);
    if (options.control.after_step &&
        !options.control.after_step(progress.step, [&] { return snapshot(progress.step); }) &&
        progress.step < options.steps) {
      result.stopped = true;
      break;
    }
  }
  return result;
}

void save_char_lm(const nn::DecoderModel& model, const io::CharVocabulary& vocabulary,
                  const fs::path& path, const io::SafetensorsMetadata& metadata) {
  QKV_CHECK(vocabulary.size() <= model.config().vocab_size, "save_char_lm: the vocabulary has ",
            vocabulary.size(), " tokens but the model only ", model.config().vocab_size);
  io::SafetensorsMetadata meta = metadata;
  meta[io::CharVocabulary::kMetadataKey] = vocabulary.to_json();
  models::save_decoder_model(model, path, meta);
}

}  // namespace qkv::train
