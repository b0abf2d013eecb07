// Checkpointing a training loop from outside: the `qkv train` commands save
// and resume the loops of tools/tasks/ through a LoopControl, so that a run
// stopped after step k and resumed equals an uninterrupted one bit for bit.
//
//   train::LoopControl control;
//   control.resume = &checkpoint;                     // or nullptr: from the start
//   control.after_step = [&](int64_t step, const train::Snapshot& snapshot) {
//     if (step % 100 == 0) io::save_checkpoint(path, snapshot());
//     return !interrupted;                             // false: stop after this step
//   };
//
// A loop's checkpoint holds what its next steps depend on: the parameters
// (io::Checkpoint::model), each optimizer's state under "<optimizer>." in
// io::Checkpoint::optimizer (Adam's moments and step counts), each random
// generator's state in metadata "rng.<name>", and the steps done. The
// learning-rate schedule is a function of the step; batches are drawn from
// the generators, so the data position is their state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/io/checkpoint.h"
#include "qkv/nn/parameter.h"
#include "qkv/optim/optimizer.h"

namespace qkv::train {

// Makes the loop's checkpoint as it stands (after the step just reported).
using Snapshot = std::function<io::Checkpoint()>;

struct LoopControl {
  // Continue after checkpoint->step steps; nullptr: start afresh.
  const io::Checkpoint* resume = nullptr;
  // Called after every step with the number of steps done; false stops the
  // loop there (its result then says `stopped`). Empty: never stop.
  std::function<bool(int64_t step, const Snapshot& snapshot)> after_step;
};

// Copies of the parameters' values into checkpoint.model, by name.
void put_parameters(io::Checkpoint& checkpoint, const std::vector<nn::Parameter>& params);
// Sets every parameter from checkpoint.model: the names and shapes must match
// exactly (an Error names the first that does not; nothing changes then).
// Entries named "done.*" are ignored: callers keep finished models there.
void restore_parameters(const io::Checkpoint& checkpoint, const std::vector<nn::Parameter>& params);

// The optimizer's state_dict() under "<name>." in checkpoint.optimizer, and back.
void put_optimizer(io::Checkpoint& checkpoint, const std::string& name,
                   const optim::Optimizer& optimizer);
void restore_optimizer(const io::Checkpoint& checkpoint, const std::string& name,
                       optim::Optimizer& optimizer);

// The generator's state in metadata "rng.<name>", and back (an Error when absent).
void put_generator(io::Checkpoint& checkpoint, const std::string& name, const Generator& gen);
void restore_generator(const io::Checkpoint& checkpoint, const std::string& name, Generator& gen);

}  // namespace qkv::train
