// The tasks of `qkv train`: each lives in tools/train_<task>.cc and adds its
// own subcommand under `train` (registered in tools/train.cc).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace qkv::cli {

// `qkv train recall`: key-value recall; attention against mean pooling, heatmaps.
Command add_train_recall(CLI::App& train);
// `qkv train lm`: a character-level decoder-only LM on fortune texts; bits/char, a sample.
Command add_train_lm(CLI::App& train);
// `qkv train fortunes`: topic of a fortune text; Transformer encoder against bag of words.
Command add_train_fortunes(CLI::App& train);

}  // namespace qkv::cli
