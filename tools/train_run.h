// What every `qkv train` command does around its training loop so that no
// work is lost: Ctrl-C finishes the step and saves a checkpoint, --save-every
// and --resume, an --out directory that is never silently overwritten and
// defaults to runs/ (which .gitignore covers), the checkpoint's identity.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/checkpoint.h"

namespace qkv::cli {

// The file names inside a run's --out directory.
inline constexpr const char* kCheckpointFile = "checkpoint.safetensors";
inline constexpr const char* kLastModelFile = "last.safetensors";
inline constexpr const char* kBestModelFile = "best.safetensors";

// The options that every train command shares.
struct RunOptions {
  std::string out;     // empty: runs/<task>-<time>, or the --resume checkpoint's directory
  bool force = false;  // --out may exist
  std::string resume;  // a checkpoint to continue
  int64_t save_every = 0;
  int64_t stop_after = 0;  // stop after this step with a checkpoint (0: never)
};
void add_run_options(CLI::App& app, RunOptions& options, const std::string& out_help);

// While alive, the first SIGINT sets a flag (the loop finishes its step,
// saves and stops); a second one ends the process at once with status 130.
class InterruptToSave {
 public:
  InterruptToSave();
  ~InterruptToSave();
  InterruptToSave(const InterruptToSave&) = delete;
  InterruptToSave& operator=(const InterruptToSave&) = delete;
  static bool requested();
};

// What a checkpoint must agree on with the run that resumes it: the task and
// its options in order, as ("--flag", "value") pairs (given back in the
// command to resume; an empty value leaves the flag out) and ("name",
// "value") facts that are only compared ("d_model", "corpus").
struct RunIdentity {
  std::string task;  // "lm"
  std::vector<std::pair<std::string, std::string>> entries;
};

// `qkv train <task> <flags> --out <dir> --resume <checkpoint>`, shell-quoted.
std::string resume_command(const RunIdentity& identity, const std::filesystem::path& out,
                           const std::filesystem::path& checkpoint);

// The run's directory, created: --out, else the --resume checkpoint's
// directory, else runs/<task>-<YYYYmmdd-HHMMSS>. An existing --out is an
// Error without --force (unless it is the directory of the checkpoint being
// resumed); with --force the files a run writes there are removed first.
std::filesystem::path prepare_run_dir(const RunOptions& options, const std::string& task);

// Reads --resume and checks it belongs to this run: the same task, options
// and facts, else an Error saying what the checkpoint is for, what this run
// is, and the command that resumes it.
io::Checkpoint load_resume(const std::string& path, const RunIdentity& identity);

// The hook a loop calls after every step (train::LoopControl::after_step):
// saves `dir`/checkpoint.safetensors every --save-every steps, at
// --stop-after and on Ctrl-C (then stops the loop). `extra` adds the
// caller's metadata (its best score, ...). Remembers where it stopped.
class CheckpointSaver {
 public:
  CheckpointSaver(const RunOptions& options, RunIdentity identity, std::filesystem::path dir,
                  int64_t steps);
  template <class Snapshot, class Extra>
  bool after_step(int64_t step, const Snapshot& snapshot, const Extra& extra) {
    const bool stop = InterruptToSave::requested() || step == stop_after_;
    if (stop || (save_every_ > 0 && step % save_every_ == 0 && step < steps_)) {
      io::Checkpoint c = snapshot();
      extra(c);
      save(c);
    }
    if (stop && step < steps_) stopped_at_ = step;
    return !(stop && step < steps_);
  }
  void save(io::Checkpoint& checkpoint);

  // After the loop: when it stopped early, prints where the checkpoint is and
  // the command to resume; returns the exit code (130 after Ctrl-C, else 0),
  // or -1 when the loop ran to the end.
  int report_stop(std::ostream& out) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  RunIdentity identity_;
  std::filesystem::path dir_, path_;
  int64_t steps_, save_every_, stop_after_;
  int64_t stopped_at_ = 0;
};

// "'/tmp/a b'": a word the shell reads back unchanged.
std::string shell_word(const std::string& s);

}  // namespace qkv::cli
