// The Hugging Face hub cache, read the way huggingface_hub lays it out.
#include "qkv/io/hf_cache.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace qkv::io {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// "~/x" with the home directory, as Python's expanduser.
fs::path expand_home(const std::string& path) {
  if (path.size() >= 1 && path[0] == '~' && (path.size() == 1 || path[1] == '/'))
    return fs::path(env("HOME")) / path.substr(std::min<size_t>(2, path.size()));
  return path;
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool directory_exists(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The snapshot of `revision` in one repository's cache folder, or nullopt.
std::optional<fs::path> snapshot_of(const fs::path& repo, const std::string& revision) {
  const fs::path snapshots = repo / "snapshots";
  if (!directory_exists(snapshots)) return std::nullopt;
  std::ifstream ref(repo / "refs" / revision);
  std::string commit;
  if (ref && std::getline(ref, commit)) {
    commit.erase(commit.find_last_not_of(" \t\r\n") + 1);
    if (!commit.empty() && directory_exists(snapshots / commit)) return snapshots / commit;
  }
  if (is_commit_hash(revision) && directory_exists(snapshots / revision))
    return snapshots / revision;
  if (revision != "main") return std::nullopt;
  // No refs/main: the most recently written snapshot.
  std::optional<fs::path> newest;
  fs::file_time_type newest_time{};
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(snapshots, ec)) {
    if (!entry.is_directory(ec)) continue;
    const fs::file_time_type t = entry.last_write_time(ec);
    if (!newest || t > newest_time) newest = entry.path(), newest_time = t;
  }
  return newest;
}

}  // namespace

fs::path hub_cache_dir() {
  if (const std::string cache = env("HF_HUB_CACHE"); !cache.empty()) return expand_home(cache);
  std::string home = env("HF_HOME");
  if (home.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    home = (xdg.empty() ? (fs::path(env("HOME")) / ".cache").string() : xdg) + "/huggingface";
  }
  return expand_home(home) / "hub";
}

std::vector<std::string> hub_ids_for(const std::string& model) {
  std::vector<std::string> candidates = {model};
  if (model.find('/') == std::string::npos) candidates.push_back("sentence-transformers/" + model);
  std::vector<std::string> ids;
  for (const std::string& id : candidates) {
    const size_t slash = id.find('/');
    if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos) continue;
    const std::string org = id.substr(0, slash), name = id.substr(slash + 1);
    const auto usable = [](const std::string& part) {
      return !part.empty() && part != "." && part != "..";
    };
    if (usable(org) && usable(name)) ids.push_back(id);
  }
  return ids;
}

std::optional<fs::path> find_cached_model(const std::string& model, const std::string& revision) {
  const fs::path cache = hub_cache_dir();
  for (const std::string& id : hub_ids_for(model)) {
    const size_t slash = id.find('/');
    const std::string folder = "models--" + id.substr(0, slash) + "--" + id.substr(slash + 1);
    if (auto snapshot = snapshot_of(cache / folder, revision)) return snapshot;
  }
  return std::nullopt;
}

}  // namespace qkv::io
