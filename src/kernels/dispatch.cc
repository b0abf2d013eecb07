// Choosing the kernel table once per process, and the threaded driver of the
// fused forward pass (OpenMP over (problem, query tile)).
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/fused_attention.h"
#include "kernels/simd/tile_gemm.h"
#include "qkv/error.h"

namespace qkv::kernels {

extern const KernelTable kAvx512Kernels;
extern const KernelTable kAvx2Kernels;
extern const KernelTable kPortableKernels;

std::vector<const KernelTable*> supported_kernel_tables() {
  std::vector<const KernelTable*> tables;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    tables.push_back(&kAvx512Kernels);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    tables.push_back(&kAvx2Kernels);
  tables.push_back(&kPortableKernels);
  return tables;
}

namespace {
const KernelTable& choose_table() {
  const std::vector<const KernelTable*> tables = supported_kernel_tables();
  const char* wanted = std::getenv("QKV_ISA");
  if (wanted == nullptr || *wanted == '\0') return *tables.front();
  std::string names;
  for (const KernelTable* t : tables) {
    if (wanted == std::string(t->name)) return *t;
    names += std::string(names.empty() ? "" : ", ") + t->name;
  }
  throw Error(ErrorKind::kValue, std::string("QKV_ISA=") + wanted +
                                     " is not supported by this CPU; supported: " + names +
                                     " (unset QKV_ISA to pick the fastest)");
}
}  // namespace

namespace {
std::atomic<const KernelTable*> g_override{nullptr};
}

const KernelTable& active_kernel_table() {
  static const KernelTable& table = choose_table();
  const KernelTable* forced = g_override.load(std::memory_order_relaxed);
  return forced ? *forced : table;
}

void override_kernel_table(const KernelTable* table) {
  g_override.store(table, std::memory_order_relaxed);
}

namespace {

// Tile sizes: bench/bench_kernels.cc (tile sweep) chose 96 query rows and
// 256 keys: the score tile (96 KB) and packed K/V stay in L2.
constexpr int64_t kBlockQ = 96;
constexpr int64_t kBlockK = 256;
// Below this many multiply-adds a call runs on one thread: the fork/join of
// an OpenMP region costs more than it saves (bench/bench_kernels, small shapes).
constexpr double kParallelMinFlops = 2.0e5;

FlashTiling choose_tiling(const SdpaProblem& p) {
  return {std::min<int64_t>(kBlockQ, p.L), std::min<int64_t>(kBlockK, p.S)};
}

struct ScratchBuffer {
  explicit ScratchBuffer(int64_t floats)
      : data(static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t(64)))) {}
  ~ScratchBuffer() { ::operator delete[](data, std::align_val_t(64)); }
  float* data;
};

FlashScratch carve(const SdpaProblem& p, const FlashTiling& t, const KernelTable& table,
                   float* base) {
  const int64_t q_rows = simd::round_up(t.block_q, table.mr);
  const int64_t k_cols = simd::round_up(t.block_k, table.nr);
  const int64_t ev_cols = simd::round_up(p.Ev, table.nr);
  FlashScratch w;
  auto take = [&](int64_t n) {
    float* out = base;
    base += simd::round_up(n, 16);  // keep every buffer 64-byte aligned
    return out;
  };
  w.q_packed = take(q_rows * p.E);
  w.k_packed = take(p.E * k_cols);
  w.v_packed = take(t.block_k * ev_cols);
  w.p_packed = take(q_rows * t.block_k);
  w.scores = take(t.block_q * t.block_k);
  w.out_acc = take(t.block_q * p.Ev);
  w.row_max = take(t.block_q);
  w.row_sum = take(t.block_q);
  return w;
}

}  // namespace

int64_t flash_scratch_floats(const SdpaProblem& p, const FlashTiling& t, const KernelTable& table) {
  const int64_t q_rows = simd::round_up(t.block_q, table.mr);
  const int64_t k_cols = simd::round_up(t.block_k, table.nr);
  const int64_t ev_cols = simd::round_up(p.Ev, table.nr);
  const int64_t sizes[] = {
      q_rows * p.E,          p.E * k_cols,     t.block_k * ev_cols, q_rows * t.block_k,
      t.block_q * t.block_k, t.block_q * p.Ev, t.block_q,           t.block_q};
  int64_t total = 0;
  for (int64_t s : sizes) total += simd::round_up(s, 16);
  return total;
}

void sdpa_forward_fused(const SdpaProblem& p, const KernelTable& table) {
  const FlashTiling t = choose_tiling(p);
  const int64_t q_tiles = (p.L + t.block_q - 1) / t.block_q;
  const int64_t items = p.problems * q_tiles;
  const int64_t scratch_floats = flash_scratch_floats(p, t, table);
  const double flops = static_cast<double>(p.problems) * p.L * p.S * (p.E + p.Ev);
  const bool parallel = flops >= kParallelMinFlops && items > 1;

#pragma omp parallel if (parallel)
  {
    ScratchBuffer buffer(scratch_floats);
    const FlashScratch w = carve(p, t, table, buffer.data);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / q_tiles;
      const int64_t q_begin = (item % q_tiles) * t.block_q;
      const int64_t rows = std::min<int64_t>(t.block_q, p.L - q_begin);
      table.flash_forward_tile(p, t, b, q_begin, rows, w);
      if (p.weights != nullptr) table.flash_weights_tile(p, t, b, q_begin, rows, w);
    }
  }
}

}  // namespace qkv::kernels
