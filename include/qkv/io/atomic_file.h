// Atomic file replacement: readers see either the old file or the new one,
// never a half-written mix, even if the process is killed or the machine loses
// power midway. Checkpoints and saved tensors are written this way.
//
//   io::write_file_atomically("model.safetensors", bytes);
//
//   io::AtomicFileWriter out("big.bin");   // streams large files in pieces
//   out.write(chunk1);
//   out.write(chunk2);
//   out.commit();                          // without commit(), nothing changes
//
// How: the bytes go to a temporary file in the target's directory (named
// ".<name>.tmp-<pid>-<n>"), which is fsync'ed and then renamed over the target
// (rename is atomic on POSIX file systems); finally the directory is fsync'ed
// so that the rename itself is durable. On any error the temporary file is
// removed and qkv::Error (ErrorKind::kIO) is thrown naming the path and the
// system's reason. A process killed by a signal cannot clean up: its
// temporary file stays behind (the target is untouched); such leftovers match
// ".<name>.tmp-*" and are safe to delete.
//
// A symbolic link at the target is replaced by a regular file (the link's
// destination is not written). New files get mode 0666 minus the umask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

namespace qkv::io {

class AtomicFileWriter {
 public:
  // Creates the temporary file next to `path`; throws if that is impossible
  // (for example, the directory does not exist or is not writable).
  explicit AtomicFileWriter(std::filesystem::path path);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();

  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes to the temporary file.
  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Flushes to disk and renames over the target. After a failed commit the
  // writer is unusable and the target is unchanged.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const char* what, const std::filesystem::path& which, int err);
  void discard() noexcept;

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  bool done_ = false;  // committed or failed: nothing more to write
};

// Replaces the file at `path` by `bytes`, atomically (see above).
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);

// Checks now, before long work that ends by writing `path`, that the write
// can succeed: a temporary file can be created beside it (the directory
// exists and is writable) and the file system has `bytes` free. Throws
// qkv::Error (ErrorKind::kIO) naming the path and the reason otherwise.
void check_writable(const std::filesystem::path& path, std::uintmax_t bytes);

}  // namespace qkv::io
