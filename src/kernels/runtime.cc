#include "qkv/runtime.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>

#include "kernels/cpu_features.h"
#include "kernels/fused_attention.h"
#include "kernels/low_precision_gemm.h"
#include "qkv/error.h"

namespace qkv {

void set_num_threads(int threads) {
  QKV_CHECK(threads >= 1, "set_num_threads: threads must be at least 1, got ", threads);
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

std::string kernel_isa() { return kernels::active_kernel_table().name; }

std::string linear_kernel_isa(Precision precision) {
  QKV_CHECK(precision != Precision::kFloat32,
            "linear_kernel_isa: float32 linear layers run OpenBLAS (see blas_core_name)");
  return kernels::active_low_precision_kernels(precision).name;
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (kernels::Isa isa : kernels::supported_isas()) names.push_back(kernels::isa_name(isa));
  return names;
}

std::string blas_core_name() { return openblas_get_corename(); }

std::string openblas_coretype_for_cpu() {
  const kernels::CpuFeatures& cpu = kernels::cpu_features();
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

bool blas_kernels_misdetected() {
  // OpenBLAS's SSE-era families: what 0.3.21 falls back to for a CPU it does not know.
  static constexpr std::array<const char*, 6> kGeneric = {"Prescott",   "Core2",   "Penryn",
                                                          "Dunnington", "Nehalem", "Katmai"};
  const std::string name = blas_core_name();
  return !openblas_coretype_for_cpu().empty() &&
         std::any_of(kGeneric.begin(), kGeneric.end(),
                     [&](const char* generic) { return name == generic; });
}

double measure_fp32_peak_gflops(double seconds) {
  const kernels::KernelTable& table = kernels::active_kernel_table();
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  total += table.fma_peak_gflops(seconds);
  return total;
}

}  // namespace qkv
