#include "qkv/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "qkv/error.h"

namespace qkv::optim {

WarmupCosineSchedule::WarmupCosineSchedule(const WarmupCosineOptions& options) : options_(options) {
  const WarmupCosineOptions& o = options_;
  const char* fn = "WarmupCosineSchedule";
  QKV_CHECK(std::isfinite(o.base_lr) && o.base_lr >= 0.0, fn, ": base_lr must be >= 0, got ",
            o.base_lr);
  QKV_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0.0 && o.min_lr <= o.base_lr, fn,
            ": min_lr must be in [0, base_lr = ", o.base_lr, "], got ", o.min_lr);
  QKV_CHECK(o.warmup_steps >= 0 && o.total_steps >= o.warmup_steps, fn,
            ": need 0 <= warmup_steps <= total_steps, got warmup_steps ", o.warmup_steps,
            " and total_steps ", o.total_steps);
}

double WarmupCosineSchedule::lr(int64_t step) const {
  const WarmupCosineOptions& o = options_;
  QKV_CHECK(step >= 0, "WarmupCosineSchedule::lr: step must be >= 0, got ", step);
  if (step < o.warmup_steps)
    return o.base_lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, o.total_steps - o.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.min_lr + (o.base_lr - o.min_lr) * cosine;
}

}  // namespace qkv::optim
