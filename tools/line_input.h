// One line of the user's input for `qkv chat`: on a terminal with line editing
// and history (libedit: arrow keys move in the line and through earlier
// messages instead of reaching the model as "^[[D"), otherwise a plain read
// of stdin (pipes, files, tests).
#pragma once

#include <string>

namespace qkv::cli {

class LineInput {
 public:
  LineInput();

  // Shows `prompt` and reads one line into `line` (without its newline);
  // false at the end of input (Ctrl-D, or the end of a pipe).
  bool read(const char* prompt, std::string& line);

  // Whether lines are edited in place (stdin and stdout are terminals and
  // libedit was found at build time).
  bool editing() const { return editing_; }

 private:
  bool editing_ = false;
};

}  // namespace qkv::cli
