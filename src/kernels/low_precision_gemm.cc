// Packing of the low-precision weights, the choice of kernel table and the
// threaded driver of low_precision_gemm (low_precision_gemm.h). The
// micro-kernels are in kernels/simd/low_precision_tiles.h, compiled per ISA
// in lowp_*.cc.
#include "kernels/low_precision_gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/simd/low_precision_tiles.h"
#include "kernels/thread_policy.h"
#include "qkv/error.h"

namespace qkv::kernels {

extern const LowPrecisionKernels kLowpBf16Amx;
extern const LowPrecisionKernels kLowpInt8Amx;
extern const LowPrecisionKernels kLowpBf16Avx512Bf16;
extern const LowPrecisionKernels kLowpBf16Avx512;
extern const LowPrecisionKernels kLowpBf16Avx2;
extern const LowPrecisionKernels kLowpBf16Portable;
extern const LowPrecisionKernels kLowpInt8Avx512Vnni;
extern const LowPrecisionKernels kLowpInt8Avx2;
extern const LowPrecisionKernels kLowpInt8Portable;

namespace {
int64_t padded_steps(int64_t steps) {
  return (steps + kLowpStepAlign - 1) / kLowpStepAlign * kLowpStepAlign;
}
}  // namespace

// W[n, k] → panels of kLowpPanel channels, k in steps of 2 (bfloat16) or 4
// (int8); channels past n and k past k are zero.
PackedWeights::PackedWeights(const float* w, int64_t n, int64_t k, Precision precision,
                             const float* smoothing)
    : precision_(precision), n_(n), k_(k) {
  if (n < 0 || k < 0)
    throw Error(ErrorKind::kValue, "PackedWeights: n and k must be >= 0, got n = " +
                                       std::to_string(n) + ", k = " + std::to_string(k));
  if (precision != Precision::kBFloat16 && precision != Precision::kInt8)
    throw Error(ErrorKind::kValue, std::string("PackedWeights: precision must be bfloat16 or "
                                               "int8, got ") +
                                       precision_name(precision));
  if (smoothing != nullptr) {
    if (precision != Precision::kInt8)
      throw Error(ErrorKind::kValue, "PackedWeights: smoothing is for int8 weights only");
    input_scale_.resize(k);
    for (int64_t p = 0; p < k; ++p) {
      if (!(smoothing[p] > 0.0f && std::isfinite(smoothing[p])))
        throw Error(ErrorKind::kValue,
                    "PackedWeights: smoothing factors must be finite and > 0, "
                    "got " +
                        std::to_string(smoothing[p]) + " at input feature " + std::to_string(p));
      input_scale_[p] = 1.0f / smoothing[p];
    }
  }
  const int64_t panels = (n + kLowpPanel - 1) / kLowpPanel;
  const int64_t cols = panels * kLowpPanel;
  if (k == 0) {  // nothing to pack (y = bias); the int8 scales are zero
    if (precision == Precision::kInt8) {
      scales_.assign(cols, 0.0f);
      col_sums_.assign(cols, 0);
    }
    return;
  }
  if (precision == Precision::kBFloat16) {
    const int64_t steps = padded_steps((k + 1) / 2);
    bf16_.assign(panels * steps * kLowpPanel * 2, 0);
    for (int64_t j = 0; j < n; ++j) {
      uint16_t* dst =
          bf16_.data() + (j / kLowpPanel) * steps * kLowpPanel * 2 + (j % kLowpPanel) * 2;
      for (int64_t p = 0; p < k; ++p)
        dst[(p / 2) * kLowpPanel * 2 + p % 2] = static_cast<uint16_t>(lowp::bf16_of(w[j * k + p]));
    }
    return;
  }
  const int64_t steps = padded_steps((k + 3) / 4);
  int8_.assign(panels * steps * kLowpPanel * 4, 0);
  scales_.assign(cols, 0.0f);
  col_sums_.assign(cols, 0);
  std::vector<float> smoothed_row(smoothing ? k : 0);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w + j * k;
    if (smoothing) {
      for (int64_t p = 0; p < k; ++p) smoothed_row[p] = row[p] * smoothing[p];
      row = smoothed_row.data();
    }
    const lowp::RowScale rs = lowp::row_scale(lowp::max_abs_bits(row, k));
    scales_[j] = rs.scale;
    if (rs.inv == 0.0f) continue;  // zeros (a NaN scale makes the channel NaN)
    int8_t* dst = int8_.data() + (j / kLowpPanel) * steps * kLowpPanel * 4 + (j % kLowpPanel) * 4;
    int32_t sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      const int32_t q = lowp::quantize(row[p], rs.inv);
      dst[(p / 4) * kLowpPanel * 4 + p % 4] = static_cast<int8_t>(q);
      sum += q;
    }
    col_sums_[j] = sum;
  }
}

int64_t PackedWeights::bytes() const {
  return static_cast<int64_t>(bf16_.size() * sizeof(uint16_t) + int8_.size() +
                              scales_.size() * sizeof(float) + col_sums_.size() * sizeof(int32_t) +
                              input_scale_.size() * sizeof(float));
}

PackedWeights::View PackedWeights::view() const {
  const int64_t step = precision_ == Precision::kInt8 ? 4 : 2;
  const int64_t steps = (k_ + step - 1) / step;
  return {precision_,
          n_,
          k_,
          (n_ + kLowpPanel - 1) / kLowpPanel,
          steps,
          padded_steps(steps),
          bf16_.data(),
          int8_.data(),
          scales_.data(),
          col_sums_.data(),
          input_scale_.empty() ? nullptr : input_scale_.data()};
}

namespace {

// Fastest first, with the level each needs.
constexpr std::array<IsaTable<LowPrecisionKernels>, 5> kBf16Tables = {
    {{Isa::kAmx, &kLowpBf16Amx},
     {Isa::kAvx512Bf16, &kLowpBf16Avx512Bf16},
     {Isa::kAvx512, &kLowpBf16Avx512},
     {Isa::kAvx2, &kLowpBf16Avx2},
     {Isa::kPortable, &kLowpBf16Portable}}};
constexpr std::array<IsaTable<LowPrecisionKernels>, 4> kInt8Tables = {
    {{Isa::kAmx, &kLowpInt8Amx},
     {Isa::kAvx512Vnni, &kLowpInt8Avx512Vnni},
     {Isa::kAvx2, &kLowpInt8Avx2},
     {Isa::kPortable, &kLowpInt8Portable}}};

std::atomic<const LowPrecisionKernels*> g_override[3] = {nullptr, nullptr, nullptr};

void check_low_precision(Precision precision) {
  if (precision != Precision::kBFloat16 && precision != Precision::kInt8)
    throw Error(ErrorKind::kValue, std::string("low-precision kernels are bfloat16 or int8, not ") +
                                       precision_name(precision));
}

}  // namespace

std::vector<const LowPrecisionKernels*> supported_low_precision_kernels(Precision precision) {
  const Isa highest = supported_isas().front();
  if (precision == Precision::kBFloat16) return tables_within(kBf16Tables, highest);
  if (precision == Precision::kInt8) return tables_within(kInt8Tables, highest);
  return {};
}

const LowPrecisionKernels& active_low_precision_kernels(Precision precision) {
  check_low_precision(precision);
  const LowPrecisionKernels* forced =
      g_override[static_cast<int>(precision)].load(std::memory_order_relaxed);
  if (forced != nullptr) return *forced;
  auto any = [](const LowPrecisionKernels&) { return true; };
  static const auto bf16 = first_within_each_level(kBf16Tables, any);
  static const auto int8 = first_within_each_level(kInt8Tables, any);
  const int level = static_cast<int>(isa_ceiling());
  return precision == Precision::kBFloat16 ? *bf16[level] : *int8[level];
}

void override_low_precision_kernels(const LowPrecisionKernels* table) {
  if (table == nullptr) {
    for (auto& slot : g_override) slot.store(nullptr, std::memory_order_relaxed);
    return;
  }
  check_low_precision(table->precision);
  g_override[static_cast<int>(table->precision)].store(table, std::memory_order_relaxed);
}

namespace {

// Below this many multiply-adds a call runs on the calling thread: an OpenMP
// fork/join (a few µs) would cost more than the second thread saves.
constexpr double kParallelMinMacs = 1 << 18;
// Rows of y per parallel work item when m is large: a multiple of every
// flavour's row panel (12, 6, 4), small enough that 2 threads balance
// (4096 rows: 86 items), large enough (≥ 7 M multiply-adds at n = k = 384)
// that an item's fixed costs (scratch, dispatch) do not show.
constexpr int64_t kItemRows = 48;

}  // namespace

// Large m: items of kItemRows rows × all n, dynamically scheduled, so each
// thread converts each row of x it owns once. Small m (fewer than 4 items a
// thread): all rows × one slice of the column panels per thread.
void low_precision_gemm(const float* x, int64_t ldx, int64_t m, const PackedWeights& w,
                        const float* bias, float* y, int64_t ldy, RowMap then) {
  const int64_t n = w.n(), k = w.k();
  if (m <= 0 || n <= 0) return;
  if (ldx < k || ldy < n)
    throw Error(ErrorKind::kValue,
                "low_precision_gemm: need ldx >= k and ldy >= n, got ldx = " + std::to_string(ldx) +
                    ", k = " + std::to_string(k) + ", ldy = " + std::to_string(ldy) +
                    ", n = " + std::to_string(n));
  adapt_default_threads();
  const LowPrecisionKernels& table = active_low_precision_kernels(w.precision());
  // A block of y, then `then` over its rows while they are in cache.
  auto block = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    table.gemm_block(x, ldx, w, bias, y, ldy, r0, r1, c0, c1);
    if (then != nullptr)
      for (int64_t r = r0; r < r1; ++r) then(y + r * ldy + c0, y + r * ldy + c0, c1 - c0);
  };
  const int threads = omp_get_max_threads();
  const double macs = static_cast<double>(m) * n * std::max<int64_t>(k, 1);
  const int64_t row_items = (m + kItemRows - 1) / kItemRows;
  if (threads == 1 || macs < kParallelMinMacs || omp_in_parallel()) {
    if (then == nullptr) return block(0, m, 0, n);
    for (int64_t item = 0; item < row_items; ++item)  // (`then` on cached rows)
      block(item * kItemRows, std::min(m, (item + 1) * kItemRows), 0, n);
    return;
  }
  if (row_items >= 4 * threads) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < row_items; ++item)
      block(item * kItemRows, std::min(m, (item + 1) * kItemRows), 0, n);
    return;
  }
  const int64_t panels = (n + kLowpPanel - 1) / kLowpPanel;
  const int parts = static_cast<int>(std::min<int64_t>(threads, panels));
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int part = 0; part < parts; ++part) {
    const int64_t first = panels * part / parts, last = panels * (part + 1) / parts;
    block(0, m, first * kLowpPanel, std::min(n, last * kLowpPanel));
  }
}

}  // namespace qkv::kernels
