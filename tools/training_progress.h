// The progress line of `qkv train <task>`: step, loss, accuracy, tokens/s and
// time left, redrawn in place on a terminal and printed as plain lines every
// few steps elsewhere (pipes, logs, tests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace qkv::cli {

// One step's figures, as a training loop reports them.
struct StepReport {
  int64_t step = 0;   // steps done, 1 .. steps
  int64_t steps = 0;  // the limit
  double loss = 0;
  std::optional<double> batch_accuracy;  // tasks that predict one label per example
  std::optional<double> held_out;        // set on the steps that evaluated
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  double seconds_left = 0;
};

// The report of a training loop's progress struct, which has the fields of
// StepReport but for the held-out accuracy, given apart (named differently
// by each task).
template <class Progress>
StepReport step_report(const Progress& p, std::optional<double> held_out) {
  return {.step = p.step,
          .steps = p.steps,
          .loss = p.loss,
          .batch_accuracy = p.batch_accuracy,
          .held_out = held_out,
          .tokens_per_second = p.tokens_per_second,
          .elapsed_seconds = p.elapsed_seconds,
          .seconds_left = p.seconds_left};
}

class ProgressLine {
 public:
  // `name` starts every line; without a terminal a line is printed every
  // `every` steps, at the last step and when `final` is passed.
  ProgressLine(std::string name, bool in_place, int64_t every);

  void update(const StepReport& report, bool final = false);
  // Ends the redrawn line (a no-op for plain lines).
  void finish();

 private:
  std::string line(const StepReport& report) const;

  std::string name_;
  bool in_place_;
  int64_t every_;
  double drawn_at_ = -1;
  std::optional<double> held_out_;  // the latest evaluation, shown until the next
};

// "12.3%", "4.5 s": small formatting helpers shared by the train commands.
std::string percent(double fraction);
std::string seconds(double s);

}  // namespace qkv::cli
