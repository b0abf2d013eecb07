// Stopping a long kernel call between blocks of work (runtime.h,
// set_interrupt_check).
//
//   InterruptPoll poll;
//   #pragma omp for
//   for (item ...) { if (poll.stop()) continue; work(item); }
//   poll.throw_if_stopped("scaled_dot_product_attention");
//
// Only the thread that made the call (OpenMP thread 0) runs the check, and
// at most once per kInterval, so polling costs a clock read per block.
#pragma once

#include <atomic>
#include <chrono>

#include "qkv/runtime.h"

namespace qkv::kernels {

class InterruptPoll {
 public:
  static constexpr std::chrono::milliseconds kInterval{50};

  InterruptPoll();
  // True once the call should stop; then every thread skips its remaining blocks.
  bool stop();
  // Throws qkv::Error (ErrorKind::kInterrupted) naming `fn` when stop() said so.
  void throw_if_stopped(const char* fn) const;

 private:
  InterruptCheck check_;
  std::chrono::steady_clock::time_point next_check_;
  std::atomic<bool> stopped_{false};
};

}  // namespace qkv::kernels
