// Atomic file replacement: temp file + fsync + rename + directory fsync.
#include "qkv/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "qkv/error.h"

namespace qkv::io {

namespace {

std::filesystem::path directory_of(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

[[noreturn]] void throw_io(const std::filesystem::path& path, const std::string& what, int err) {
  throw Error(ErrorKind::kIO, detail::concat("cannot write '", path.string(), "': ", what, ": ",
                                             std::strerror(err)));
}

// Flushes a directory entry change (the rename) to disk.
void sync_directory(const std::filesystem::path& target) {
  const std::filesystem::path dir = directory_of(target);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw_io(target,
             detail::concat("the file was replaced, but opening directory '", dir.string(),
                            "' to sync it failed"),
             errno);
  }
  // Some file systems cannot sync directories (EINVAL): nothing more to do there.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    throw_io(target,
             detail::concat("the file was replaced, but syncing directory '", dir.string(),
                            "' failed, so the change may not survive a power loss"),
             err);
  }
  ::close(fd);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  const std::string name = path_.filename().string();
  if (name.empty() || name == "." || name == "..") {
    throw Error(ErrorKind::kIO, detail::concat("cannot write '", path_.string(),
                                               "': the path does not name a file"));
  }
  // A per-process counter makes the name unique among our own writers; O_EXCL
  // guards against anything else that might use the same name.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    temp_path_ = directory_of(path_) /
                 detail::concat(".", name, ".tmp-", ::getpid(), "-", counter.fetch_add(1));
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int err = errno;
    if (err != EEXIST || attempt >= 100) {
      done_ = true;
      throw_io(path_, detail::concat("cannot create temporary file '", temp_path_.string(), "'"),
               err);
    }
  }
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

void AtomicFileWriter::fail(const char* what, const std::filesystem::path& which, int err) {
  const std::string message = detail::concat(what, " '", which.string(), "'");
  discard();
  done_ = true;
  throw_io(path_, message, err);
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (done_) {
    throw Error(ErrorKind::kIO, detail::concat("cannot write '", path_.string(),
                                               "': the writer was already committed or failed"));
  }
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing to temporary file", temp_path_, errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFileWriter::commit() {
  if (done_) {
    throw Error(ErrorKind::kIO, detail::concat("cannot write '", path_.string(),
                                               "': the writer was already committed or failed"));
  }
  if (::fsync(fd_) != 0) fail("syncing temporary file", temp_path_, errno);
  const int fd = fd_;
  fd_ = -1;
  // close() can report deferred write errors (NFS, quotas): do not ignore them.
  // On Linux EINTR still closes the descriptor, after fsync has succeeded.
  if (::close(fd) != 0 && errno != EINTR) fail("closing temporary file", temp_path_, errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail("renaming temporary file", temp_path_, errno);
  }
  temp_path_.clear();  // it is the target now: never unlink it
  done_ = true;
  sync_directory(path_);
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  AtomicFileWriter out(path);
  out.write(bytes);
  out.commit();
}

void check_writable(const std::filesystem::path& path, std::uintmax_t bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::kIO,
                detail::concat("cannot write '", path.string(), "': it is a directory"));
  }
  AtomicFileWriter probe(path);  // creates (and, uncommitted, removes) a file beside it
  const std::filesystem::space_info space = std::filesystem::space(directory_of(path), ec);
  if (!ec && space.available < bytes) {
    throw Error(ErrorKind::kIO, detail::concat("cannot write '", path.string(), "': it needs ",
                                               bytes / 1000000 + 1, " MB and its file system has ",
                                               space.available / 1000000, " MB free"));
  }
}

}  // namespace qkv::io
