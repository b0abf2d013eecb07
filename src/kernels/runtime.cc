#include "qkv/runtime.h"

#include <omp.h>

#include "kernels/fused_attention.h"
#include "qkv/error.h"

namespace qkv {

void set_num_threads(int threads) {
  QKV_CHECK(threads >= 1, "set_num_threads: threads must be at least 1, got ", threads);
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

std::string kernel_isa() { return kernels::active_kernel_table().name; }

std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (const kernels::KernelTable* t : kernels::supported_kernel_tables()) names.push_back(t->name);
  return names;
}

double measure_fp32_peak_gflops(double seconds) {
  const kernels::KernelTable& table = kernels::active_kernel_table();
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  total += table.fma_peak_gflops(seconds);
  return total;
}

}  // namespace qkv
