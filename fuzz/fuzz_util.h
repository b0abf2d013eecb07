// Shared by the libFuzzer harnesses (fuzz/*.cc): the input as a file, and
// checks whose failure is a finding.
//
// Every harness catches qkv::Error only: the library promises that bad input
// is a qkv::Error, so any other exception (nlohmann::json's, std::bad_alloc,
// std::out_of_range, ...), a crash, a leak, undefined behaviour, a huge
// allocation (-rss_limit_mb / -malloc_limit_mb) or a timeout is a finding.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace qkv_fuzz {

// The input as a file without touching the disk: an anonymous memory file
// (memfd_create), named by /proc/self/fd/N for APIs that take a path.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("qkv-fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) fail("memfd_create failed");
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) fail("write to the memory file failed");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_ = -1;
  std::string path_;
};

// A broken promise of the API (not a bad input): abort, which libFuzzer
// reports as a crash with the input that caused it.
#define QKV_FUZZ_EXPECT(condition)                                                 \
  do {                                                                             \
    if (!(condition)) {                                                            \
      std::fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, \
                   #condition);                                                    \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

}  // namespace qkv_fuzz
