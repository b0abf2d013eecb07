// How large an element-wise loop must be before it is split over the threads.
#pragma once

#include <cstdint>

namespace qkv::detail {

// Element-wise arithmetic (activations, add/mul, Adam's update, column sums).
// Measured with a loop of gelu_into over n = 2^10 .. 2^22 at 1 and 2 threads:
// ~0.6 ns an element on one AVX-512 core, 2^16 elements in 34 us on two
// threads against 53 us on one, no gain at 2^14 (load average 4.5 on the 2
// cores, so the threshold is only roughly placed). Most loops gated by it
// also test !omp_in_parallel(): called from inside a parallel region they stay
// on the calling thread.
inline constexpr int64_t kParallelMinElements = int64_t{1} << 16;

// Pure memory traffic (copies, finite-value scans) does a few times less work
// an element, so it waits for four times as many elements.
inline constexpr int64_t kParallelMinCopyElements = int64_t{1} << 18;

}  // namespace qkv::detail
