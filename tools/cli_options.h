// What the subcommands of `qkv` (command.h) share when they declare
// themselves: an options struct that the parser fills and `run` reads, and
// the few kinds of option they all use.
//
// Numeric options are checked by NumberIn, whose messages name the flag, the
// value and the allowed range in one short line ("--batch-size: 0 is not ≥ 1"),
// where CLI11's own ranges print their unbounded ends as 300-digit numbers.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "command.h"
#include "qkv/sampling.h"

namespace qkv::cli {

// Adds the subcommand `name` to `parent`: add_options(*app, options) declares
// its options into a fresh Options, and choosing it calls run(options). A run
// that returns int gives the exit code; one that returns nothing exits with 0
// (a command that can only succeed or throw).
template <class Options, class Result, class AddOptions>
Command make_command(CLI::App& parent, const std::string& name, const std::string& description,
                     Result (*run)(const Options&), AddOptions add_options) {
  static_assert(std::is_same_v<Result, int> || std::is_void_v<Result>);
  auto options = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(name, description);
  add_options(*app, *options);
  return {app, [options, run] {
            if constexpr (std::is_void_v<Result>) {
              run(*options);
              return 0;
            } else {
              return run(*options);
            }
          }};
}

// One end of a range: its value, and whether the value itself is allowed.
template <class T>
struct Bound {
  T value;
  bool inclusive = true;
};

// Accepts a T (an integer or a finite floating-point number) between `lo` and
// `hi` (either may be absent). CLI11 prefixes the message with the flag:
//   --batch-size: 0 is not ≥ 1          --top-p: 1.5 is not in (0, 1]
//   --threads: 'two' is not an integer  --seed: -1 is not in [0, 18446744073709551615]
template <class T>
class NumberIn : public CLI::Validator {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);

 public:
  NumberIn(std::optional<Bound<T>> lo, std::optional<Bound<T>> hi) {
    const std::string range = describe(lo, hi);
    // --help aligns its columns by bytes: ASCII there, "≥ 1" in messages.
    description(ascii(range));
    func_ = [lo, hi, range](std::string& text) -> std::string {
      const std::string shown = text.size() <= 20 ? text : text.substr(0, 16) + "\xe2\x80\xa6";
      T value{};
      if constexpr (std::is_integral_v<T>) {
        const bool negative = !text.empty() && text[0] == '-';
        const bool digits =
            text.size() > (negative ? 1u : 0u) &&
            text.find_first_not_of("0123456789", negative ? 1 : 0) == std::string::npos;
        if (!digits) return "'" + shown + "' is not an integer";
        const auto [at, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || at != text.data() + text.size())  // too large, or < 0 unsigned
          return shown + " is not " +
                 describe(lo ? lo : Bound<T>{std::numeric_limits<T>::lowest()},
                          hi ? hi : Bound<T>{std::numeric_limits<T>::max()});
      } else {
        char* end = nullptr;
        const double parsed = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(parsed))
          return "'" + shown + "' is not a finite number";
        value = static_cast<T>(parsed);
      }
      const bool above = !lo || (lo->inclusive ? value >= lo->value : value > lo->value);
      const bool below = !hi || (hi->inclusive ? value <= hi->value : value < hi->value);
      return above && below ? std::string() : shown + " is not " + range;
    };
  }

 private:
  static std::string format(T value) {
    if constexpr (std::is_integral_v<T>) {
      return std::to_string(value);
    } else {
      char text[32];
      std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
      return text;
    }
  }

  static std::string ascii(std::string text) {
    for (const auto& [from, to] :
         {std::pair{"\xe2\x89\xa5", ">="}, std::pair{"\xe2\x89\xa4", "<="}})
      if (const size_t at = text.find(from); at != std::string::npos) text.replace(at, 3, to);
    return text;
  }

  // "≥ 1", "> 0", "≤ 16" or "in [1, 16]", "in (0, 1]".
  static std::string describe(const std::optional<Bound<T>>& lo,
                              const std::optional<Bound<T>>& hi) {
    if (lo && hi)
      return std::string("in ") + (lo->inclusive ? "[" : "(") + format(lo->value) + ", " +
             format(hi->value) + (hi->inclusive ? "]" : ")");
    if (lo) return std::string(lo->inclusive ? "\xe2\x89\xa5 " : "> ") + format(lo->value);
    if (hi) return std::string(hi->inclusive ? "\xe2\x89\xa4 " : "< ") + format(hi->value);
    return "";  // no range: --help shows the type alone
  }
};

// [lo, hi]
template <class T>
NumberIn<T> in_range(T lo, T hi) {
  return NumberIn<T>(Bound<T>{lo}, Bound<T>{hi});
}
// ≥ lo
template <class T>
NumberIn<T> at_least(T lo) {
  return NumberIn<T>(Bound<T>{lo}, std::nullopt);
}
// > lo
template <class T>
NumberIn<T> above(T lo) {
  return NumberIn<T>(Bound<T>{lo, false}, std::nullopt);
}
// Any T (the message says so when the text is not one).
template <class T>
NumberIn<T> any_number() {
  return NumberIn<T>(std::nullopt, std::nullopt);
}

// An option whose default --help shows; numbers are checked to be T's.
template <class T>
CLI::Option* add_defaulted(CLI::App& app, const std::string& name, T& value,
                           const std::string& description) {
  CLI::Option* option = app.add_option(name, value, description)->capture_default_str();
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) option->check(any_number<T>());
  return option;
}

// ... in [lo, hi].
template <class T>
CLI::Option* add_in_range(CLI::App& app, const std::string& name, T& value, T lo, T hi,
                          const std::string& description) {
  return app.add_option(name, value, description)->capture_default_str()->check(in_range(lo, hi));
}

// ... that must be positive: ≥ 1 for integers, > 0 for floating point.
template <class T>
CLI::Option* add_positive(CLI::App& app, const std::string& name, T& value,
                          const std::string& description) {
  CLI::Option* option = app.add_option(name, value, description)->capture_default_str();
  if constexpr (std::is_integral_v<T>)
    return option->check(at_least(T{1}));
  else
    return option->check(above(T{0}));
}

// ... that must not be negative.
template <class T>
CLI::Option* add_non_negative(CLI::App& app, const std::string& name, T& value,
                              const std::string& description) {
  return app.add_option(name, value, description)->capture_default_str()->check(at_least(T{0}));
}

// The MODEL of the commands that read a model file: positional, or after -m /
// --model as llama.cpp's tools take it. Exactly one is required.
inline void add_model_file_argument(CLI::App& app, std::string& model,
                                    const std::string& description) {
  CLI::Option* positional =
      app.add_option("model", model, description)->check(CLI::ExistingFile)->type_name("FILE");
  CLI::Option* flag = app.add_option("-m,--model", model, "The model file, as llama.cpp's -m")
                          ->check(CLI::ExistingFile)
                          ->type_name("FILE");
  positional->excludes(flag);
  app.parse_complete_callback([positional, flag] {
    if (positional->count() == 0 && flag->count() == 0)
      throw CLI::RequiredError("MODEL (or -m MODEL)");
  });
}

// The most threads --threads accepts (far above any machine qkv runs on).
inline constexpr int kMaxThreads = 1024;

// --threads of every command that computes; 0 leaves the count as it is.
inline CLI::Option* add_threads_option(CLI::App& app, int& threads) {
  return add_in_range(app, "-t,--threads", threads, 0, kMaxThreads,
                      "Threads (0 = OMP_NUM_THREADS or all cores)");
}

// --precision of the inference commands: the arithmetic of the model's layers.
inline CLI::Option* add_precision_option(CLI::App& app, std::string& precision) {
  return app
      .add_option("--precision", precision,
                  "Arithmetic of the layers: float32 (exact), bfloat16 (bf16) or int8 (fastest)")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "fp32", "bfloat16", "bf16", "int8"}))
      ->type_name("P");
}

// --kv-cache of the generating commands: how the KV cache keeps keys and values.
inline CLI::Option* add_kv_cache_option(CLI::App& app, std::string& kv_cache) {
  return add_defaulted(app, "--kv-cache", kv_cache,
                       "KV cache storage: f32, or q8_0 (8-bit blocks, ~3.6x less memory; "
                       "head dim a multiple of 32)")
      ->check(CLI::IsMember({"f32", "q8_0"}));
}

// The sampling flags of `qkv generate` and `qkv chat`, with llama.cpp's
// defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), so that the
// same model samples alike in both commands and in llama.cpp. The Python API
// stays greedy by default, as Hugging Face's generate().
struct SamplingFlags {
  double temperature = 0.8;
  int64_t top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  bool greedy = false;
  uint64_t seed = 0;

  // --greedy is temperature 0.
  SamplingOptions options() const {
    return {
        .temperature = greedy ? 0.0 : temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p};
  }
};

// --temperature (--temp), --top-k, --top-p, --min-p, --greedy and --seed (-s),
// named as llama.cpp names them.
inline void add_sampling_options(CLI::App& app, SamplingFlags& flags) {
  app.add_option("--temperature,--temp", flags.temperature,
                 "Divides the logits: < 1 sharper, > 1 flatter, 0 greedy")
      ->capture_default_str()
      ->check(at_least(0.0));
  add_non_negative(app, "--top-k", flags.top_k,
                   "Draw only among the k most likely tokens (0 = all)");
  app.add_option("--top-p", flags.top_p, "Draw only from the nucleus of probability p (1 = all)")
      ->capture_default_str()
      ->check(NumberIn<double>(Bound<double>{0.0, false}, Bound<double>{1.0}));
  add_in_range(app, "--min-p", flags.min_p, 0.0, 1.0,
               "Draw only tokens at least p times as likely as the most likely (0 = all)");
  app.add_flag("--greedy", flags.greedy, "Always take the most likely token (temperature 0)");
  add_defaulted(app, "-s,--seed", flags.seed, "Seed of the sampler: same seed, same text");
}

}  // namespace qkv::cli
