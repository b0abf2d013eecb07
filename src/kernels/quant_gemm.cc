// The choice of kernel table and the threaded driver of quant_gemm
// (quant_gemm.h). The kernels are in kernels/simd/quant_rows.h, compiled per
// ISA in quant_*.cc.
#include "kernels/quant_gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/thread_policy.h"
#include "kernels/thread_scratch.h"
#include "qkv/error.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx512Vnni;
extern const QuantKernels kQuantAvx512Vnni16;
extern const QuantKernels kQuantAvx512;
extern const QuantKernels kQuantAvx2Int16;
extern const QuantKernels kQuantAvx2;
extern const QuantKernels kQuantPortable;

namespace {
// Fastest first, with the level each needs.
constexpr std::array<IsaTable<QuantKernels>, 6> kTables = {{{Isa::kAvx512Vnni, &kQuantAvx512Vnni},
                                                            {Isa::kAvx512Vnni, &kQuantAvx512Vnni16},
                                                            {Isa::kAvx512, &kQuantAvx512},
                                                            {Isa::kAvx2, &kQuantAvx2Int16},
                                                            {Isa::kAvx2, &kQuantAvx2},
                                                            {Isa::kPortable, &kQuantPortable}}};

std::atomic<const QuantKernels*> g_override{nullptr};
}  // namespace

std::vector<const QuantKernels*> supported_quant_kernels() {
  return tables_within(kTables, supported_isas().front());
}

// The default table under each cap: the fastest whose decoding does not round
// x to 8 bits, unless QKV_INT8_DECODE=1 asks for 8-bit x (quant_gemm.h).
const QuantKernels& active_quant_kernels() {
  const QuantKernels* forced = g_override.load(std::memory_order_relaxed);
  if (forced != nullptr) return *forced;
  static const auto by_level = [] {
    const char* env = std::getenv("QKV_INT8_DECODE");
    const bool round_x = env != nullptr && std::string(env) == "1";
    return first_within_each_level(kTables,
                                   [&](const QuantKernels& t) { return round_x || t.x_bits != 8; });
  }();
  return *by_level[static_cast<int>(isa_ceiling())];
}

void override_quant_kernels(const QuantKernels* table) {
  g_override.store(table, std::memory_order_relaxed);
}

namespace {

// Below this many multiply-adds the few-rows route stays on the calling
// thread: a fork/join (a few µs) costs more than a second thread saves.
constexpr double kParallelMinMacs = 1 << 17;
// The sgemm route dequantises at most this many floats of W at a time (whole
// layers of SmolLM2-135M at once; its [49152, 576] embedding in 32 panels).
constexpr int64_t kPanelFloats = int64_t{1} << 20;
// Channels per dequantisation work item.
constexpr int64_t kChannelGroup = 16;

// The few-rows route for one or more products of the same x: the threads
// split the channel groups of all of them (their concatenation) in one
// fork/join.
void gemv(const QuantKernels& table, const float* x, int64_t ldx, int64_t m,
          std::span<const QuantProduct> products) {
  auto groups_of = [](const QuantProduct& p) {
    return (p.w->n + kChannelGroup - 1) / kChannelGroup;
  };
  double macs = 0.0;
  int64_t groups = 0;
  for (const QuantProduct& p : products) {
    macs += static_cast<double>(m) * p.w->n * p.w->k;
    groups += groups_of(p);
  }
  // Groups [g0, g1) of the concatenation, each product's share in turn.
  auto run_groups = [&](int64_t g0, int64_t g1) {
    int64_t first = 0;
    for (const QuantProduct& p : products) {
      const int64_t count = groups_of(p);
      const int64_t a = std::max(g0, first), b = std::min(g1, first + count);
      if (a < b)
        table.gemv_block(x, ldx, m, *p.w, p.bias, p.y, p.ldy, (a - first) * kChannelGroup,
                         std::min(p.w->n, (b - first) * kChannelGroup));
      first += count;
    }
  };
  const int threads = omp_get_max_threads();
  if (threads == 1 || macs < kParallelMinMacs || omp_in_parallel() || groups < 2) {
    run_groups(0, groups);
    return;
  }
  const int parts = static_cast<int>(std::min<int64_t>(threads, groups));
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int part = 0; part < parts; ++part)
    run_groups(groups * part / parts, groups * (part + 1) / parts);
}

// Panels of W dequantised (threaded over groups of channels), then sgemm.
void gemm(const QuantKernels& table, const float* x, int64_t ldx, int64_t m, const QuantMatrix& w,
          const float* bias, float* y, int64_t ldy) {
  const int64_t n = w.n, k = w.k;
  const int64_t panel =
      std::min(n, std::max(kChannelGroup, kPanelFloats / k / kChannelGroup * kChannelGroup));
  float* buffer = thread_scratch(panel * k);
  const bool parallel = !omp_in_parallel();
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (parallel && m * n >= (1 << 16))
    for (int64_t r = 0; r < m; ++r) std::copy(bias, bias + n, y + r * ldy);
  }
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t cols = std::min(panel, n - j0);
    const int64_t groups = (cols + kChannelGroup - 1) / kChannelGroup;
#pragma omp parallel for schedule(static) if (parallel && groups > 1)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t a = j0 + g * kChannelGroup, b = std::min(j0 + cols, a + kChannelGroup);
      table.dequantize_rows(w, a, b, buffer + (a - j0) * k, k);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(cols), static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), buffer,
                static_cast<int>(k), bias != nullptr ? 1.0f : 0.0f, y + j0, static_cast<int>(ldy));
  }
}

}  // namespace

// Up to 16 rows the few-rows route (two passes over W from 9 rows on) beats
// dequantising panels for sgemm: SmolLM2-135M's Q4_1 1536 x 576 at 12 rows,
// 0.63 against 2.2 ns per row and block on 2 threads (AVX2).
int64_t quant_gemv_max_rows() { return 16; }

bool rounds_x_at(const QuantKernels& t, BlockFormat f, int64_t m) {
  return m <= quant_gemv_max_rows() ? rounds_x(t, f) : has_prompt_route(t, f);
}

namespace {

// x rounded to Int per block of 32: dx = max|x| / kMax, q = round(x / dx);
// blocks whose max|x| is below `tiny` (where kMax / max|x| would overflow)
// become dx = 0, q = 0.
template <class Int>
void quantize_x_reference(const float* x, int64_t k, Int* q, float* dx, float tiny_below) {
  constexpr float kMax = std::numeric_limits<Int>::max();
  constexpr float kMin = std::numeric_limits<Int>::min();
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    uint32_t bits = 0;  // max |x| as bits: NaN and Inf above every finite value
    for (int i = 0; i < 32; ++i)
      bits = std::max(bits, std::bit_cast<uint32_t>(xb[i]) & 0x7fffffffu);
    const float amax = std::bit_cast<float>(bits);
    const bool tiny = amax < tiny_below;
    dx[b] = tiny ? 0.0f : amax / kMax;
    const float id = tiny ? 0.0f : kMax / amax;
    for (int i = 0; i < 32; ++i) {
      const float v = xb[i] * id;
      q[32 * b + i] =
          std::isfinite(v) ? static_cast<Int>(std::clamp(std::nearbyint(v), kMin, kMax)) : 0;
    }
  }
}

}  // namespace

void quantize_x_q8_reference(const float* x, int64_t k, int8_t* q, float* dx) {
  quantize_x_reference(x, k, q, dx, 0x1p-120f);
}

void quantize_x_q16_reference(const float* x, int64_t k, int16_t* q, float* dx) {
  quantize_x_reference(x, k, q, dx, 0x1p-100f);
}

void quant_gemm(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                float* y, int64_t ldy) {
  if (m <= 0 || w.n <= 0) return;
  if (ldx < w.k || ldy < w.n)
    throw Error(ErrorKind::kValue,
                "quant_gemm: need ldx >= k and ldy >= n, got ldx = " + std::to_string(ldx) +
                    ", k = " + std::to_string(w.k) + ", ldy = " + std::to_string(ldy) +
                    ", n = " + std::to_string(w.n));
  adapt_default_threads();
  const QuantKernels& table = active_quant_kernels();
  if (m <= quant_gemv_max_rows())
    gemv(table, x, ldx, m, {{{&w, bias, y, ldy}}});
  else if (has_prompt_route(table, w.format))
    table.prompt->gemm(x, ldx, m, {{{&w, bias, y, ldy}}});
  else
    gemm(table, x, ldx, m, w, bias, y, ldy);
}

void quant_gemm_each(const float* x, int64_t ldx, int64_t m,
                     std::span<const QuantProduct> products) {
  const QuantKernels& table = active_quant_kernels();
  const bool one_prompt = std::all_of(products.begin(), products.end(), [&](const QuantProduct& p) {
    return has_prompt_route(table, p.w->format);
  });
  if (products.size() < 2 || (m > quant_gemv_max_rows() && !one_prompt)) {
    for (const QuantProduct& p : products) quant_gemm(x, ldx, m, *p.w, p.bias, p.y, p.ldy);
    return;
  }
  for (const QuantProduct& p : products)
    if (ldx < p.w->k || p.ldy < p.w->n || p.w->k != products[0].w->k)
      throw Error(ErrorKind::kValue,
                  "quant_gemm_each: every weight needs k = " + std::to_string(products[0].w->k) +
                      " <= ldx and n <= its ldy, got k = " + std::to_string(p.w->k) +
                      ", n = " + std::to_string(p.w->n) + ", ldx = " + std::to_string(ldx) +
                      ", ldy = " + std::to_string(p.ldy));
  if (m <= 0) return;
  adapt_default_threads();
  if (m <= quant_gemv_max_rows())
    gemv(table, x, ldx, m, products);
  else
    table.prompt->gemm(x, ldx, m, products);
}

void quant_gather_rows(const QuantMatrix& w, const int64_t* ids, int64_t count, float* out,
                       int64_t ldo) {
  const QuantKernels& table = active_quant_kernels();
  for (int64_t i = 0; i < count; ++i)
    table.dequantize_rows(w, ids[i], ids[i] + 1, out + i * ldo, ldo);
}

}  // namespace qkv::kernels
