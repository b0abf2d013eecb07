// Colour decisions and ANSI escape codes for the `qkv` CLI.
#include "terminal.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace qkv::cli {

bool stdout_wants_color() {
  if (!::isatty(STDOUT_FILENO)) return false;
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && no_color[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

std::string Style::paint(std::string_view code, std::string_view text) const {
  if (!enabled_) return std::string(text);
  std::string out = "\x1b[";
  out += code;
  out += 'm';
  out += text;
  out += "\x1b[0m";
  return out;
}

std::string Style::heading(std::string_view text) const { return paint("1;34", text); }
std::string Style::strong(std::string_view text) const { return paint("1", text); }
std::string Style::muted(std::string_view text) const { return paint("2", text); }
std::string Style::good(std::string_view text) const { return paint("32", text); }

}  // namespace qkv::cli
