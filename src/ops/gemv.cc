// Bandwidth-bound linear layers over few rows: the rows are computed by the
// kernel table's gemv_rows (src/kernels/simd/gemv_rows.h, one per ISA); this
// file splits them over threads.
#include "ops/gemv.h"

#include <omp.h>

#include <algorithm>

namespace qkv::detail {

namespace {

// Rows of W per pass of gemv_rows: threads split W in multiples of it.
constexpr int64_t kRows = 4;
// Below this many weights a second thread costs more (wake-up and join,
// a few microseconds) than it saves (measured with a d=384 decoding step).
constexpr int64_t kParallelWeights = 96 * 1024;

}  // namespace

int64_t gemv_max_rows() { return kernels::active_kernel_table().gemv_max_rows; }

void gemv(std::span<const GemvTask> tasks) {
  const kernels::KernelTable& table = kernels::active_kernel_table();
  int64_t weights = 0;
  for (const GemvTask& t : tasks) weights += t.n * t.k;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || weights < kParallelWeights) {
    for (const GemvTask& t : tasks) table.gemv_rows(t, 0, t.n);
    return;
  }
  // One parallel region for all tasks; each thread takes an equal share of
  // every task's rows (in multiples of kRows), so no thread waits between them.
#pragma omp parallel num_threads(threads)
  {
    const int64_t id = omp_get_thread_num(), count = omp_get_num_threads();
    for (const GemvTask& t : tasks) {
      const int64_t blocks = (t.n + kRows - 1) / kRows;
      const int64_t begin = std::min(t.n, blocks * id / count * kRows);
      const int64_t end = std::min(t.n, blocks * (id + 1) / count * kRows);
      if (begin < end) table.gemv_rows(t, begin, end);
    }
  }
}

}  // namespace qkv::detail
