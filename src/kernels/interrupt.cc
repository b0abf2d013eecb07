#include "kernels/interrupt.h"

#include <omp.h>

#include "qkv/error.h"

namespace qkv {

namespace {
std::atomic<InterruptCheck> installed_check{nullptr};
}  // namespace

void set_interrupt_check(InterruptCheck check) { installed_check.store(check); }

}  // namespace qkv

namespace qkv::kernels {

InterruptPoll::InterruptPoll()
    : check_(installed_check.load()), next_check_(std::chrono::steady_clock::now() + kInterval) {}

bool InterruptPoll::stop() {
  if (stopped_.load(std::memory_order_relaxed)) return true;
  if (check_ == nullptr || omp_get_thread_num() != 0) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return false;
  next_check_ = now + kInterval;
  if (!check_()) return false;
  stopped_.store(true, std::memory_order_relaxed);
  return true;
}

void InterruptPoll::throw_if_stopped(const char* fn) const {
  if (stopped_.load()) throw Error(ErrorKind::kInterrupted, detail::concat(fn, ": interrupted"));
}

}  // namespace qkv::kernels
