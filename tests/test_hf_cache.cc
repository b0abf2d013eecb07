// io::find_cached_model: Hugging Face ids found in a huggingface_hub cache
// laid out under a temporary directory (no model files needed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/io/hf_cache.h"

namespace fs = std::filesystem;

namespace {

// HF_HUB_CACHE (and HF_HOME) set for one test, restored after.
class HfCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("qkv_hf_cache_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    for (const char* name : {"HF_HUB_CACHE", "HF_HOME"}) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    }
    ::setenv("HF_HUB_CACHE", root_.c_str(), 1);
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
    fs::remove_all(root_);
  }
  // A snapshot folder of repo `id` at `commit`, with refs/<ref> naming it.
  fs::path snapshot(const std::string& folder, const std::string& commit, const std::string& ref) {
    const fs::path dir = root_ / folder / "snapshots" / commit;
    fs::create_directories(dir);
    if (!ref.empty()) {
      fs::create_directories(root_ / folder / "refs");
      std::ofstream(root_ / folder / "refs" / ref) << commit << "\n";
    }
    return dir;
  }
  fs::path root_;
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOther = "fedcba9876543210fedcba9876543210fedcba98";

TEST_F(HfCache, CacheDirectoryFollowsHuggingFaceHubsOrder) {
  EXPECT_EQ(qkv::io::hub_cache_dir(), root_);
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", (root_ / "home").c_str(), 1);
  EXPECT_EQ(qkv::io::hub_cache_dir(), root_ / "home" / "hub");
}

TEST_F(HfCache, IdsAndBareNamesThroughRefs) {
  const fs::path main =
      snapshot("models--sentence-transformers--all-MiniLM-L6-v2", kCommit, "main");
  EXPECT_EQ(qkv::io::find_cached_model("sentence-transformers/all-MiniLM-L6-v2"), main);
  // A bare name is also looked up under sentence-transformers/, as that library does.
  EXPECT_EQ(qkv::io::find_cached_model("all-MiniLM-L6-v2"), main);
  EXPECT_EQ(qkv::io::find_cached_model("all-MiniLM-L6-v2", kCommit), main);
  EXPECT_FALSE(qkv::io::find_cached_model("all-MiniLM-L6-v2", "v2"));
  EXPECT_FALSE(qkv::io::find_cached_model("other/all-MiniLM-L6-v2"));
  // A tag through refs/, and a commit named directly.
  const fs::path tagged = snapshot("models--org--name", kOther, "v1.0");
  EXPECT_EQ(qkv::io::find_cached_model("org/name", "v1.0"), tagged);
  EXPECT_EQ(qkv::io::find_cached_model("org/name", kOther), tagged);
  // No refs/main: the most recently written snapshot.
  EXPECT_EQ(qkv::io::find_cached_model("org/name"), tagged);
}

TEST_F(HfCache, IdsThatWouldLeaveTheCacheFindNothing) {
  snapshot("models--org--name", kCommit, "main");
  for (const std::string id : {"../name", "org/..", "./name", "/name", "org/", "a/b/c", ""})
    EXPECT_FALSE(qkv::io::find_cached_model(id)) << id;
  EXPECT_EQ(qkv::io::hub_ids_for("name"), (std::vector<std::string>{"sentence-transformers/name"}));
  EXPECT_EQ(qkv::io::hub_ids_for("org/name"), (std::vector<std::string>{"org/name"}));
}

}  // namespace
