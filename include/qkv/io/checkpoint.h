// Training checkpoints: model parameters, optimizer state and the step in one
// safetensors file, replaced atomically (io/atomic_file.h): a crash while a
// checkpoint is written leaves the previous one intact and loadable.
//
//   io::save_checkpoint("run/ckpt.safetensors",
//                       {.model = model.state_dict(), .optimizer = opt.state_dict(),
//                        .step = step, .metadata = {{"seed", "42"}}});
//   ...
//   io::Checkpoint c = io::load_checkpoint("run/ckpt.safetensors");
//   model.load_state_dict(c.model);
//   opt.load_state_dict(c.optimizer);   // then continue at step c.step
//
// Layout: tensors "model.<name>" and "optimizer.<name>"; metadata
// "qkv.format" = "checkpoint", "qkv.format_version" = "1", "qkv.step" = the
// step in decimal, plus the caller's metadata strings (keys must not start
// with "qkv."). Any safetensors reader can open the file.
//
// Random state: generator_state_text() turns a qkv::Generator's state into a
// metadata string and restore_generator_state() sets a Generator from it, so
// that a resumed run draws what the uninterrupted one would have drawn.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv::io {

struct Checkpoint {
  std::map<std::string, Tensor> model;          // a model's state_dict()
  std::map<std::string, Tensor> optimizer;      // an optimizer's state_dict()
  int64_t step = 0;                             // optimizer steps taken
  std::map<std::string, std::string> metadata;  // anything else (seed, configuration, ...)
};

// Writes `checkpoint` to `path` atomically (the old file stays until the new one is complete).
// Tensors: float32, float64 or bool, any strides. Errors (kIO) name the path.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);

// Reads a file written by save_checkpoint. A missing, unreadable, corrupt or
// foreign file is a qkv::Error naming the path and what is wrong.
Checkpoint load_checkpoint(const std::filesystem::path& path);

// "xoshiro256 <w0> <w1> <w2> <w3> <spare>": the four state words in hex, then
// "-" or the spare normal's bits in hex. Exact: a double's bits, not its digits.
std::string generator_state_text(const Generator& gen);
// Sets `gen` from generator_state_text(); anything else is a qkv::Error that
// names `what` (e.g. "checkpoint 'run/ckpt.safetensors', metadata \"rng.batches\"").
void restore_generator_state(Generator& gen, const std::string& text, const std::string& what);

}  // namespace qkv::io
