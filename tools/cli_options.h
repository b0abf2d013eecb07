// What the subcommands of `qkv` (command.h) share when they declare
// themselves: an options struct that the parser fills and `run` reads, and
// the few kinds of option they all use.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "command.h"

namespace qkv::cli {

// Adds the subcommand `name` to `parent`: add_options(*app, options) declares
// its options into a fresh Options, and choosing it calls run(options).
template <class Options, class AddOptions>
Command make_command(CLI::App& parent, const std::string& name, const std::string& description,
                     int (*run)(const Options&), AddOptions add_options) {
  auto options = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(name, description);
  add_options(*app, *options);
  return {app, [options, run] { return run(*options); }};
}

// An option whose default --help shows.
template <class T>
CLI::Option* add_defaulted(CLI::App& app, const std::string& name, T& value,
                           const std::string& description) {
  return app.add_option(name, value, description)->capture_default_str();
}

// ... that must be positive.
template <class T>
CLI::Option* add_positive(CLI::App& app, const std::string& name, T& value,
                          const std::string& description) {
  return add_defaulted(app, name, value, description)->check(CLI::PositiveNumber);
}

// ... that must not be negative.
template <class T>
CLI::Option* add_non_negative(CLI::App& app, const std::string& name, T& value,
                              const std::string& description) {
  return add_defaulted(app, name, value, description)->check(CLI::NonNegativeNumber);
}

// --threads of the training commands.
inline CLI::Option* add_threads_option(CLI::App& app, int& threads) {
  return add_non_negative(app, "--threads", threads, "Threads (0 = OMP_NUM_THREADS or all cores)");
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

}  // namespace qkv::cli
