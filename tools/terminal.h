// Terminal helpers for the `qkv` CLI: colour only where it helps.
#pragma once

#include <string>
#include <string_view>

namespace qkv::cli {

// True when stdout is a terminal, TERM is not "dumb" and NO_COLOR is unset or
// empty (https://no-color.org). Pipes, files and test harnesses get plain text.
bool stdout_wants_color();

// ANSI styles that turn into plain text when disabled.
class Style {
 public:
  explicit Style(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }

  std::string heading(std::string_view text) const;  // bold blue
  std::string strong(std::string_view text) const;   // bold
  std::string muted(std::string_view text) const;    // dim: asides and explanations
  std::string good(std::string_view text) const;     // green: paths written, checks passed

 private:
  std::string paint(std::string_view code, std::string_view text) const;
  bool enabled_;
};

}  // namespace qkv::cli
