// A writer in a forked child that the test can kill midway: the atomic file
// and checkpoint tests check what a killed writer leaves behind.
#pragma once

#include <sys/types.h>
#include <unistd.h>

namespace qkv_test {

// Forks a child that runs `child(signal_fd)`, which calls signal_ready(signal_fd)
// when it is about to write; returns the child's pid (-1 if the pipe failed)
// and, in ready_fd, the read end of the pipe. The child exits with 0 when
// `child` returns and 2 when it throws.
template <class Child>
pid_t fork_writer(int& ready_fd, Child child) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      child(fds[1]);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  ready_fd = fds[0];
  return pid;
}

// In the child: one byte down the pipe to say it is writing (exit code 3 if that fails).
inline void signal_ready(int fd) {
  char c = 'w';
  if (::write(fd, &c, 1) != 1) ::_exit(3);
}

}  // namespace qkv_test
