// LineInput: libedit's readline on a terminal, std::getline otherwise.
#include "line_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#if defined(QKV_HAVE_LIBEDIT)
#include <editline/readline.h>
#endif

namespace qkv::cli {

LineInput::LineInput() {
#if defined(QKV_HAVE_LIBEDIT)
  editing_ = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
#endif
}

bool LineInput::read(const char* prompt, std::string& line) {
#if defined(QKV_HAVE_LIBEDIT)
  if (editing_) {
    char* text = readline(prompt);
    if (text == nullptr) return false;
    line = text;
    std::free(text);
    if (!line.empty()) add_history(line.c_str());
    return true;
  }
#endif
  std::cout << prompt << std::flush;
  return static_cast<bool>(std::getline(std::cin, line));
}

}  // namespace qkv::cli
