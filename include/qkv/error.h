// qkv::Error — the one exception type of the library.
//
// Every check on user input throws qkv::Error with a message that names the
// argument, what was expected and what was received. `kind()` tells the Python
// bindings which exception to raise:
//   kValue        ValueError         a wrong value or shape
//   kType         TypeError          a wrong dtype or type
//   kIO           OSError            a file that cannot be read or written (the
//                                    subclass of its errno: FileNotFoundError, ...)
//   kMemory       MemoryError        the memory a call needs cannot be had
//   kInterrupted  KeyboardInterrupt  the call was interrupted (Ctrl-C, see runtime.h)
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

enum class ErrorKind { kValue, kType, kIO, kMemory, kInterrupted };

class Error : public std::runtime_error {
 public:
  // `os_error`: for kIO, the errno of the failure when there is one (ENOENT:
  // a required file or folder does not exist). Python raises OSError with it,
  // i.e. its subclass for that errno: FileNotFoundError, PermissionError, ...
  Error(ErrorKind kind, const std::string& message, int os_error = 0)
      : std::runtime_error(message), kind_(kind), os_error_(os_error) {}
  ErrorKind kind() const { return kind_; }
  int os_error() const { return os_error_; }

 private:
  ErrorKind kind_;
  int os_error_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws qkv::Error(kValue) when `condition` is false; the message is the
// concatenation of the remaining arguments (streamed with <<).
#define QKV_CHECK(condition, ...)                                                       \
  do {                                                                                  \
    if (!(condition))                                                                   \
      throw ::qkv::Error(::qkv::ErrorKind::kValue, ::qkv::detail::concat(__VA_ARGS__)); \
  } while (0)

// As QKV_CHECK, for a wrong dtype (TypeError in Python).
#define QKV_CHECK_TYPE(condition, ...)                                                 \
  do {                                                                                 \
    if (!(condition))                                                                  \
      throw ::qkv::Error(::qkv::ErrorKind::kType, ::qkv::detail::concat(__VA_ARGS__)); \
  } while (0)

}  // namespace qkv
