// Helpers the test files share: checking a qkv::Error, a temporary directory
// per test, and where scripts/fetch_model.sh puts all-MiniLM-L6-v2.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "checkout_paths.h"
#include "qkv/error.h"

namespace qkv_test {

namespace fs = std::filesystem;

// True in the AddressSanitizer build (scripts/sanitize.sh): a few tests then
// take smaller sizes that still cross every tile boundary. The sanitizers look
// for memory errors along each code path; the Release run checks the numbers
// at full size.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline const char* kind_name(qkv::ErrorKind kind) {
  switch (kind) {
    case qkv::ErrorKind::kValue:
      return "kValue";
    case qkv::ErrorKind::kType:
      return "kType";
    case qkv::ErrorKind::kIO:
      return "kIO";
    case qkv::ErrorKind::kMemory:
      return "kMemory";
    case qkv::ErrorKind::kInterrupted:
      return "kInterrupted";
  }
  return "unknown kind";
}

// Where a helper was called from, for its failure messages: what
// std::source_location does, which clang 14 with libstdc++ 12 lacks.
struct CallSite {
  const char* file;
  int line;
  CallSite(const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : file(file), line(line) {}
};

// Runs `call`, which must throw a qkv::Error of `kind` whose message contains
// every one of `parts`. Returns the message ("" when nothing was thrown), for
// callers with more to check. The overloads below take the parts as a list,
// a vector or one string, and the kind after them or first.
template <class F>
std::string expect_error(F&& call, const std::vector<std::string>& parts,
                         qkv::ErrorKind kind = qkv::ErrorKind::kValue, CallSite where = {}) {
  const ::testing::ScopedTrace trace(where.file, where.line, "expect_error");
  std::string wanted;
  for (const std::string& part : parts) wanted += " \"" + part + "\"";
  try {
    call();
  } catch (const qkv::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "\"" << part << "\" missing from: " << message;
    EXPECT_EQ(e.kind(), kind) << "a qkv::Error of " << kind_name(e.kind()) << ", expected "
                              << kind_name(kind) << ": " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a " << typeid(e).name() << " (" << e.what() << "), expected a qkv::Error of "
                  << kind_name(kind) << " mentioning" << wanted;
    return {};
  }
  ADD_FAILURE() << "no error thrown; expected a qkv::Error of " << kind_name(kind) << " mentioning"
                << wanted;
  return {};
}

// expect_error(call, {"must be", "positive"}).
template <class F>
std::string expect_error(F&& call, std::initializer_list<std::string_view> parts,
                         qkv::ErrorKind kind = qkv::ErrorKind::kValue, CallSite where = {}) {
  return expect_error(std::forward<F>(call), std::vector<std::string>(parts.begin(), parts.end()),
                      kind, where);
}

// expect_error(call, "must be positive").
template <class F>
std::string expect_error(F&& call, std::string_view part,
                         qkv::ErrorKind kind = qkv::ErrorKind::kValue, CallSite where = {}) {
  return expect_error(std::forward<F>(call), std::vector<std::string>{std::string(part)}, kind,
                      where);
}

// The kind first: expect_error(call, ErrorKind::kIO, {"cannot open", path}).
template <class F>
std::string expect_error(F&& call, qkv::ErrorKind kind, const std::vector<std::string>& parts,
                         CallSite where = {}) {
  return expect_error(std::forward<F>(call), parts, kind, where);
}

template <class F>
std::string expect_error(F&& call, qkv::ErrorKind kind,
                         std::initializer_list<std::string_view> parts, CallSite where = {}) {
  return expect_error(std::forward<F>(call), parts, kind, where);
}

template <class F>
std::string expect_error(F&& call, qkv::ErrorKind kind, std::string_view part,
                         CallSite where = {}) {
  return expect_error(std::forward<F>(call), part, kind, where);
}

// A fresh temporary directory dir_ for each test, removed after it. A fixture
// that overrides SetUp calls TempDirTest::SetUp() first.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "qkv_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "cannot make " << pattern;
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Writes `content` to dir_ / name (its folders made as needed); returns that path.
  fs::path write(const fs::path& name, const std::string& content) const {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  // The names in dir_ other than `keep` (a writer's leftovers).
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename() != keep) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

// The names of a module's state_dict (parameters and buffers), sorted.
template <class Module>
std::set<std::string> state_names(const Module& m) {
  std::set<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.insert(name);
  return names;
}

// The largest Euclidean norm of the rows of length n in `values` (row-major):
// the ‖q‖ and ‖k‖ of the low-precision error bounds.
inline double max_row_norm(const std::vector<double>& values, int64_t n) {
  double worst = 0.0;
  for (size_t r = 0; r + n <= values.size(); r += n) {
    double sum = 0.0;
    for (int64_t e = 0; e < n; ++e) sum += values[r + e] * values[r + e];
    worst = std::max(worst, std::sqrt(sum));
  }
  return worst;
}

// all-MiniLM-L6-v2 as scripts/fetch_model.sh leaves it in the checkout.
inline fs::path minilm_dir() { return fs::path(source_dir()) / "models" / "all-MiniLM-L6-v2"; }

// SmolLM2-135M-Instruct in GGUF (Q4_1), as scripts/fetch_model.sh leaves it.
inline fs::path smollm2_path() {
  return fs::path(source_dir()) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// tests/data/tokenizer_corpus.txt: over 1,000 varied lines of text.
inline fs::path tokenizer_corpus_path() {
  return fs::path(source_dir()) / "tests" / "data" / "tokenizer_corpus.txt";
}

}  // namespace qkv_test

// Skips the test when all-MiniLM-L6-v2 has not been fetched.
#define QKV_SKIP_WITHOUT_MINILM()                                               \
  if (!std::filesystem::exists(::qkv_test::minilm_dir() / "model.safetensors")) \
  GTEST_SKIP() << ::qkv_test::minilm_dir() << " is missing: run scripts/fetch_model.sh"
