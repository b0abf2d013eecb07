#include "qkv/runtime.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu_features.h"
#include "kernels/fused_attention.h"
#include "kernels/low_precision_gemm.h"
#include "kernels/thread_policy.h"
#include "qkv/error.h"

namespace qkv {

void set_num_threads(int threads) {
  QKV_CHECK(threads >= 1, "set_num_threads: threads must be at least 1, got ", threads);
  kernels::threads_chosen();
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

void release_idle_threads() {
  // libgomp frees the calling thread's pool; inside a parallel region it does nothing.
  omp_pause_resource_all(omp_pause_soft);
}

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

namespace qkv::kernels {
namespace {

// How often the load is read: a decoding step of SmolLM2-135M takes ~10 ms,
// so a neighbour that starts or stops is noticed within ten steps, and the
// read (~10 µs) costs < 0.01 % (issue 38's busy-neighbour A/B).
constexpr int64_t kCheckIntervalNs = 100'000'000;

std::atomic<bool> g_chosen{false};
std::atomic<int64_t> g_next_check_ns{0};

// Tasks runnable on the machine now (the 4th field of /proc/loadavg,
// "running/total"), or -1.
int runnable_tasks() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  double avg[3];
  int running = -1, total = 0;
  if (std::fscanf(f, "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2], &running, &total) != 5)
    running = -1;
  std::fclose(f);
  return running;
}

}  // namespace

void threads_chosen() { g_chosen.store(true, std::memory_order_relaxed); }

void adapt_default_threads() {
  if (g_chosen.load(std::memory_order_relaxed)) return;
  // The default (all cores, or OMP_NUM_THREADS: then chosen), read before any change.
  static const int default_threads = [] {
    if (std::getenv("OMP_NUM_THREADS") != nullptr) threads_chosen();
    return omp_get_max_threads();
  }();
  if (g_chosen.load(std::memory_order_relaxed) || default_threads == 1 || omp_in_parallel()) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t next = g_next_check_ns.load(std::memory_order_relaxed);
  if (now < next || !g_next_check_ns.compare_exchange_strong(next, now + kCheckIntervalNs,
                                                             std::memory_order_relaxed))
    return;
  const int running = runnable_tasks();
  if (running < 0) return;
  // Our runnable threads: this one, and the team's others, which spin for a
  // while after each region (counted as ours even when asleep: the back-off
  // errs towards more threads). Others' tasks spread over all online CPUs.
  const int current = omp_get_max_threads();
  const int cores = std::max(1, omp_get_num_procs());
  const long online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const double others = std::max(0, running - current) * std::min(1.0, double(cores) / online);
  const int threads = std::clamp(cores - static_cast<int>(std::lround(others)), 1, default_threads);
  if (threads != current) omp_set_num_threads(threads);
}

}  // namespace qkv::kernels
