// Learning-rate schedule: linear warmup, then cosine decay to a minimum.
//
//   optim::WarmupCosineSchedule schedule({.base_lr = 3e-4, .warmup_steps = 100,
//                                         .total_steps = 2000, .min_lr = 3e-5});
//   for (int64_t step = 0; step < 2000; ++step) {
//     opt.set_lr(schedule.lr(step));
//     opt.step();
//   }
//
// The values are those of Hugging Face transformers'
// get_cosine_with_min_lr_schedule_with_warmup (num_cycles = 0.5) with
// min_lr_rate = min_lr / base_lr, where `step` is the number of optimizer
// steps taken before this one (so the very first update uses lr(0) = 0 when
// warmup_steps > 0, as there):
//   step < warmup_steps:  base_lr · step / warmup_steps
//   otherwise:            min_lr + (base_lr − min_lr) · ½ (1 + cos(π · progress)),
//                         progress = (step − warmup_steps) / (total_steps − warmup_steps)
// Beyond total_steps the rate stays at min_lr (transformers' cosine would rise again).
#pragma once

#include <cstdint>

namespace qkv::optim {

struct WarmupCosineOptions {
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr = 0.0;
};

class WarmupCosineSchedule {
 public:
  explicit WarmupCosineSchedule(const WarmupCosineOptions& options);

  // The learning rate for the update after `step` earlier updates (step >= 0).
  double lr(int64_t step) const;

  const WarmupCosineOptions& options() const { return options_; }

 private:
  WarmupCosineOptions options_;
};

}  // namespace qkv::optim
