#include "training_progress.h"

#include <cstdio>
#include <iostream>
#include <utility>

namespace qkv::cli {

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", 100 * fraction);
  return buffer;
}

std::string seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f s", s);
  return buffer;
}

ProgressLine::ProgressLine(std::string name, bool in_place, int64_t every)
    : name_(std::move(name)), in_place_(in_place), every_(every > 0 ? every : 1) {}

void ProgressLine::update(const StepReport& r, bool final) {
  if (r.held_out) held_out_ = r.held_out;
  const bool last = final || r.step == r.steps;
  if (in_place_) {
    // About ten redraws a second are enough for the eye.
    if (!last && r.elapsed_seconds - drawn_at_ < 0.1) return;
    drawn_at_ = r.elapsed_seconds;
    std::cout << "\r\x1b[K" << line(r) << std::flush;
  } else if (r.step % every_ == 0 || last) {
    std::cout << line(r) << "\n" << std::flush;
  }
}

void ProgressLine::finish() {
  if (in_place_) std::cout << "\n" << std::flush;
}

std::string ProgressLine::line(const StepReport& r) const {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "%-9s step %5lld/%lld  loss %.4f", name_.c_str(),
                static_cast<long long>(r.step), static_cast<long long>(r.steps), r.loss);
  std::string text = buffer;
  if (r.batch_accuracy) text += "  batch acc " + percent(*r.batch_accuracy);
  text += "  held-out " + (held_out_ ? percent(*held_out_) : std::string("  -  "));
  std::snprintf(buffer, sizeof buffer, "  %.1fk tok/s  %.0fs left", r.tokens_per_second / 1000,
                r.seconds_left);
  return text + buffer;
}

}  // namespace qkv::cli
