// The learning-rate schedule the training tasks share (recall, fortunes,
// char-LM). Internal.
#pragma once

#include <algorithm>
#include <cstdint>

#include "qkv/optim/lr_schedule.h"

namespace qkv::train {

// Linear warmup then cosine decay over `steps` updates. Short runs (tests)
// keep most of their steps after the warmup: it takes at most a quarter of
// them; the floor never exceeds the peak.
inline optim::WarmupCosineSchedule task_schedule(double lr, int64_t warmup_steps, int64_t steps,
                                                 double min_lr) {
  return optim::WarmupCosineSchedule({.base_lr = lr,
                                      .warmup_steps = std::min(warmup_steps, steps / 4),
                                      .total_steps = steps,
                                      .min_lr = std::min(min_lr, lr)});
}

}  // namespace qkv::train
