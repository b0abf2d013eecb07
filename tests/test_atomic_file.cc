// Atomic file replacement: a killed writer leaves the previous file intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fork_writer.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using qkv::Error;
using qkv::ErrorKind;
using qkv::io::AtomicFileWriter;
using qkv::io::write_file_atomically;
using qkv_test::fork_writer;
using qkv_test::signal_ready;

namespace {

class AtomicFileTest : public qkv_test::TempDirTest {};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// The qkv::Error thrown by `body`; a test failure if nothing is thrown.
template <class Body>
Error catch_error(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected qkv::Error";
  return Error(ErrorKind::kValue, "");
}

TEST_F(AtomicFileTest, CreatesAndReplacesFiles) {
  const fs::path target = dir_ / "a.bin";
  write_file_atomically(target, bytes_of("first version"));
  EXPECT_EQ(read_text(target), "first version");
  write_file_atomically(target, bytes_of("second"));
  EXPECT_EQ(read_text(target), "second");
  write_file_atomically(target, {});
  EXPECT_EQ(read_text(target), "");
  EXPECT_TRUE(others("a.bin").empty()) << "temporary files were left behind";
}

TEST_F(AtomicFileTest, WriterStreamsPiecesAndCommits) {
  const fs::path target = dir_ / "streamed.txt";
  AtomicFileWriter out(target);
  EXPECT_EQ(out.temp_path().parent_path(), dir_);
  out.write("hello, ");
  out.write(bytes_of("world"));
  EXPECT_FALSE(fs::exists(target)) << "the target must not appear before commit()";
  out.commit();
  EXPECT_EQ(read_text(target), "hello, world");
  EXPECT_THROW(out.write("more"), Error);
  EXPECT_THROW(out.commit(), Error);
}

TEST_F(AtomicFileTest, UncommittedWriterChangesNothing) {
  const fs::path target = dir_ / "keep.txt";
  write_file_atomically(target, bytes_of("precious"));
  {
    AtomicFileWriter out(target);
    out.write("half of a new vers");
    EXPECT_TRUE(fs::exists(out.temp_path()));
  }  // destroyed without commit(), as when an exception unwinds
  EXPECT_EQ(read_text(target), "precious");
  EXPECT_TRUE(others("keep.txt").empty());
}

TEST_F(AtomicFileTest, MissingDirectoryGivesClearError) {
  const fs::path target = dir_ / "no" / "such" / "dir" / "out.bin";
  const Error e = catch_error([&] { write_file_atomically(target, bytes_of("x")); });
  EXPECT_EQ(e.kind(), ErrorKind::kIO);
  const std::string message = e.what();
  EXPECT_NE(message.find(target.string()), std::string::npos) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
}

TEST_F(AtomicFileTest, FailedRenameRemovesTemporaryFile) {
  // A non-empty directory at the target path: rename() fails at commit.
  const fs::path target = dir_ / "occupied";
  fs::create_directory(target);
  std::ofstream(target / "inside.txt") << "x";
  const Error e = catch_error([&] { write_file_atomically(target, bytes_of("data")); });
  EXPECT_EQ(e.kind(), ErrorKind::kIO);
  EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_TRUE(others("occupied").empty()) << "the temporary file must be removed on failure";
}

TEST_F(AtomicFileTest, PathThatNamesNoFileIsRejected) {
  EXPECT_THROW(write_file_atomically(dir_ / "", bytes_of("x")), Error);
  EXPECT_THROW(write_file_atomically(dir_ / "..", bytes_of("x")), Error);
}

TEST_F(AtomicFileTest, NewFilesFollowTheUmask) {
  const mode_t old = ::umask(027);
  write_file_atomically(dir_ / "m.bin", bytes_of("x"));
  ::umask(old);
  EXPECT_EQ(fs::status(dir_ / "m.bin").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
}

TEST_F(AtomicFileTest, RelativePathInCurrentDirectory) {
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  write_file_atomically("relative.txt", bytes_of("here"));
  fs::current_path(cwd);
  EXPECT_EQ(read_text(dir_ / "relative.txt"), "here");
}

// --- A writer killed midway ------------------------------------------------------

std::map<std::string, qkv::Tensor> version(double value, int64_t n) {
  return {{"w", qkv::Tensor::full({n}, value)},
          {"b", qkv::Tensor::full({3}, value, qkv::DType::kFloat64)}};
}

TEST_F(AtomicFileTest, KilledWriterLeavesPreviousFileIntact) {
  const fs::path target = dir_ / "model.safetensors";
  qkv::io::save_safetensors(target, version(1.0, 1000));
  const std::string before = read_text(target);

  int ready = -1;
  const pid_t pid = fork_writer(ready, [&](int signal_fd) {
    AtomicFileWriter out(target);
    const std::vector<std::byte> chunk(1 << 20, std::byte{0x5A});
    out.write(chunk);
    signal_ready(signal_fd);
    // Keep writing slowly: the parent kills us somewhere in here.
    for (int i = 0; i < 10000; ++i) {
      out.write(chunk);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out.commit();
  });
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(ready, &c, 1), 1) << "the child failed before writing";
  ::close(ready);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  EXPECT_EQ(read_text(target), before);
  const auto loaded = qkv::io::load_safetensors(target);
  EXPECT_EQ(loaded.at("w").to_vector(), std::vector<double>(1000, 1.0));
  // The half-written temporary file is what a crash leaves behind.
  const auto leftovers = others("model.safetensors");
  ASSERT_EQ(leftovers.size(), 1u);
  EXPECT_EQ(leftovers[0].rfind(".model.safetensors.tmp-" + std::to_string(pid) + "-", 0), 0u)
      << leftovers[0];
  EXPECT_GE(fs::file_size(dir_ / leftovers[0]), size_t{1} << 20);
}

TEST_F(AtomicFileTest, KilledAtAnyMomentTheFileIsOldOrNewNeverTorn) {
  const fs::path target = dir_ / "ckpt.safetensors";
  const int64_t n = 1 << 20;  // 4 MB per version
  qkv::io::save_safetensors(target, version(0.0, n));
  for (int round = 0; round < 4; ++round) {
    int ready = -1;
    const pid_t pid = fork_writer(ready, [&](int signal_fd) {
      signal_ready(signal_fd);
      for (int v = 1;; ++v) qkv::io::save_safetensors(target, version(v, n));
    });
    ASSERT_GT(pid, 0);
    char c = 0;
    ASSERT_EQ(::read(ready, &c, 1), 1);
    ::close(ready);
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 37 * round));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited early with status " << status;

    const auto loaded = qkv::io::load_safetensors(target);  // throws if torn
    const std::vector<double> w = loaded.at("w").to_vector();
    ASSERT_EQ(w.size(), static_cast<size_t>(n));
    EXPECT_EQ(w.front(), w.back());
    EXPECT_EQ(loaded.at("b").to_vector(), std::vector<double>(3, w.front()));
    for (const std::string& name : others("ckpt.safetensors")) fs::remove(dir_ / name);
  }
}

}  // namespace
