#include "train_run.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <iostream>
#include <map>
#include <system_error>

#include "cli_options.h"
#include "qkv/error.h"

namespace qkv::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTaskKey = "train.task";
constexpr const char* kEntryPrefix = "train.";  // "train.--d-model", "train.corpus"
constexpr const char* kCommandKey = "train.resume_command";

std::atomic<bool> sigint_seen{false};

extern "C" void on_train_sigint(int) {
  if (sigint_seen.exchange(true)) {
    // The second Ctrl-C: the user does not want to wait for the step.
    static const char message[] = "\nqkv train: interrupted again, stopping without saving\n";
    (void)!::write(STDERR_FILENO, message, sizeof message - 1);
    ::_exit(130);
  }
  static const char message[] =
      "\nqkv train: finishing this step to save a checkpoint (Ctrl-C again: stop now)\n";
  (void)!::write(STDERR_FILENO, message, sizeof message - 1);
}

struct sigaction previous_action = {};

std::string local_time_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y%m%d-%H%M%S", &tm);
  return buffer;
}

// "task 'lm' with --d-model 128, --steps 800" for the entries in `keys`.
std::string describe(const std::string& task, const std::map<std::string, std::string>& entries,
                     const std::vector<std::string>& keys) {
  std::string text = "'" + task + "'";
  size_t shown = 0;
  for (const std::string& key : keys) {
    const auto it = entries.find(key);
    text += shown++ == 0 ? " with " : ", ";
    text += key + " " + (it == entries.end() ? std::string("(none)") : it->second);
    if (shown == 4) break;
  }
  return text;
}

}  // namespace

std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_./+=:,@") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void add_run_options(CLI::App& app, RunOptions& o, const std::string& out_help) {
  app.add_option("--out", o.out,
                 out_help + "; default: runs/<task>-<time>/ (or the --resume checkpoint's)")
      ->type_name("DIR");
  app.add_flag("--force", o.force, "Write into --out even if it exists");
  app.add_option("--resume", o.resume,
                 "Continue from a checkpoint (give the options it was saved with)")
      ->type_name("CHECKPOINT");
  add_non_negative(app, "--save-every", o.save_every,
                   "Save a checkpoint every N steps (0: only on Ctrl-C and --stop-after)");
  add_non_negative(app, "--stop-after", o.stop_after,
                   "Stop after step N with a checkpoint, as Ctrl-C does (0: never)");
}

InterruptToSave::InterruptToSave() {
  sigint_seen.store(false);
  struct sigaction action = {};
  action.sa_handler = on_train_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &previous_action);
}

InterruptToSave::~InterruptToSave() { ::sigaction(SIGINT, &previous_action, nullptr); }

bool InterruptToSave::requested() { return sigint_seen.load(); }

std::string resume_command(const RunIdentity& identity, const fs::path& out,
                           const fs::path& checkpoint) {
  std::string command = "qkv train " + identity.task;
  for (const auto& [key, value] : identity.entries)
    if (key.starts_with("--") && !value.empty()) command += " " + key + " " + value;
  return command + " --out " + shell_word(out.string()) + " --resume " +
         shell_word(checkpoint.string());
}

fs::path prepare_run_dir(const RunOptions& o, const std::string& task) {
  std::error_code ec;
  fs::path dir;
  if (!o.out.empty()) {
    dir = o.out;
    QKV_CHECK(dir.extension() != ".safetensors" || fs::is_directory(dir, ec), "--out '", o.out,
              "' looks like a file name: --out is a directory, which receives ", kLastModelFile,
              ", ", kBestModelFile, " and ", kCheckpointFile);
    const bool resuming_here =
        !o.resume.empty() &&
        fs::equivalent(fs::absolute(o.resume).parent_path(), fs::absolute(dir), ec);
    if (fs::exists(dir, ec) && !resuming_here) {
      QKV_CHECK(o.force, "--out '", o.out,
                "' exists; pass --force to write into it (its models and checkpoint are "
                "replaced) or choose another directory");
      QKV_CHECK(fs::is_directory(dir, ec), "--out '", o.out, "' exists and is not a directory");
      for (const char* name : {kCheckpointFile, kLastModelFile, kBestModelFile})
        fs::remove(dir / name, ec);
    }
  } else if (!o.resume.empty()) {
    dir = fs::path(o.resume).parent_path();
    if (dir.empty()) dir = ".";
  } else {
    const std::string stamp = local_time_stamp();
    dir = fs::path("runs") / (task + "-" + stamp);
    for (int n = 2; fs::exists(dir, ec); ++n)
      dir = fs::path("runs") / (task + "-" + stamp + "-" + std::to_string(n));
  }
  fs::create_directories(dir, ec);
  QKV_CHECK(!ec && fs::is_directory(dir), "--out: cannot create directory '", dir.string(),
            "': ", ec ? ec.message() : "exists and is not a directory");
  // Resumed into another directory: the best model so far comes along.
  if (!o.resume.empty()) {
    fs::path from_dir = fs::path(o.resume).parent_path();
    if (from_dir.empty()) from_dir = ".";
    const fs::path from = from_dir / kBestModelFile;
    if (fs::exists(from, ec) && !fs::equivalent(from_dir, dir, ec))
      fs::copy_file(from, dir / kBestModelFile, fs::copy_options::overwrite_existing, ec);
  }
  return dir;
}

io::Checkpoint load_resume(const std::string& path, const RunIdentity& identity) {
  io::Checkpoint c;
  try {
    c = io::load_checkpoint(path);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("--resume: ") + e.what());
  }
  std::map<std::string, std::string> theirs, ours;
  std::vector<std::string> their_keys, our_keys;
  for (const auto& [key, value] : c.metadata)
    if (key.starts_with(kEntryPrefix) && key != kTaskKey && key != kCommandKey) {
      theirs[key.substr(std::string(kEntryPrefix).size())] = value;
      their_keys.push_back(key.substr(std::string(kEntryPrefix).size()));
    }
  for (const auto& [key, value] : identity.entries) {
    ours[key] = value;
    our_keys.push_back(key);
  }
  const auto task = c.metadata.find(kTaskKey);
  QKV_CHECK(task != c.metadata.end(), "--resume: '", path,
            "' is a qkv checkpoint but not of `qkv train` (no metadata \"", kTaskKey, "\")");
  const auto command = c.metadata.find(kCommandKey);
  const std::string hint =
      command == c.metadata.end() ? std::string() : "; it resumes with: " + command->second;
  if (task->second != identity.task) {
    // Different tasks: the settings both have under one name ("--d-model" is
    // "d_model") that differ, else the first settings of each.
    const auto norm = [](std::string key) {
      if (key.starts_with("--")) key = key.substr(2);
      for (char& ch : key) ch = ch == '-' ? '_' : ch;
      return key;
    };
    std::map<std::string, std::string> their_norm, our_norm;
    for (const auto& [key, value] : theirs) their_norm[norm(key)] = value;
    std::vector<std::string> shared, our_norm_keys, their_norm_keys;
    for (const std::string& key : our_keys) {
      our_norm[norm(key)] = ours[key];
      our_norm_keys.push_back(norm(key));
      const auto it = their_norm.find(norm(key));
      if (it != their_norm.end() && it->second != ours[key]) shared.push_back(norm(key));
    }
    for (const std::string& key : their_keys) their_norm_keys.push_back(norm(key));
    QKV_CHECK(false, "--resume: checkpoint '", path, "' is for ",
              describe(task->second, their_norm, shared.empty() ? their_norm_keys : shared),
              ", this run is ",
              describe(identity.task, our_norm, shared.empty() ? our_norm_keys : shared), hint);
  }
  std::vector<std::string> differ;
  for (const std::string& key : our_keys)
    if (!theirs.count(key) || theirs[key] != ours[key]) differ.push_back(key);
  for (const std::string& key : their_keys)
    if (!ours.count(key)) differ.push_back(key);
  QKV_CHECK(differ.empty(), "--resume: checkpoint '", path, "' is for ",
            describe(task->second, theirs, differ), ", this run is ",
            describe(identity.task, ours, differ), " (a resumed run needs the same options)", hint);
  return c;
}

CheckpointSaver::CheckpointSaver(const RunOptions& o, RunIdentity identity, fs::path dir,
                                 int64_t steps)
    : identity_(std::move(identity)),
      dir_(std::move(dir)),
      path_(dir_ / kCheckpointFile),
      steps_(steps),
      save_every_(o.save_every),
      stop_after_(o.stop_after) {}

void CheckpointSaver::save(io::Checkpoint& c) {
  c.metadata[kTaskKey] = identity_.task;
  for (const auto& [key, value] : identity_.entries) c.metadata[kEntryPrefix + key] = value;
  c.metadata[kCommandKey] = resume_command(identity_, dir_, path_);
  io::save_checkpoint(path_, c);
}

int CheckpointSaver::report_stop(std::ostream& out) const {
  if (stopped_at_ == 0) return -1;
  out << "\nStopped after step " << stopped_at_ << " of " << steps_ << "; checkpoint saved to "
      << path_.string() << "\n  Resume with:\n    " << resume_command(identity_, dir_, path_)
      << "\n"
      << std::flush;
  return InterruptToSave::requested() ? 130 : 0;
}

}  // namespace qkv::cli
