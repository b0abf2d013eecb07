// Linear layers in low precision: y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n], with
// float32 x, y and bias, and W converted once (at model load) into the packed
// layout that the micro-kernels read:
//
//   kBFloat16  W and x rounded to bfloat16 (round to nearest even); products
//              summed in float32 (AMX tiles where the CPU has AMX-BF16,
//              else vdpbf16ps where it has AVX512_BF16).
//   kInt8      W: int8 with one symmetric scale per output channel
//              (scale = max|W[j, :]| / 127, q = round_half_even(w / scale) in
//              [-127, 127]). x: u8 with a scale and a zero point per row,
//              computed per call (dynamic, asymmetric): the row's range
//              [min(lo, 0), max(hi, 0)] over 0..255, scale = range / 255,
//              zero = round(-lo / scale), u = round_half_even(x / scale) + zero
//              clamped to [0, 255], so that x ≈ scale · (u - zero). int32 sums
//              of u · W8 (AMX's tdpbusd or vpdpbusd, u8 × s8, where the CPU
//              has AMX-INT8 or AVX512_VNNI),
//              minus zero · Σ_k W8[j, k] (kept with W): exact in int32. Then in
//              float32: float(sum) · (scale_x · scale_w), then + bias (no FMA),
//              so every int8 table gives the same bits.
//              Optional smoothing (SmoothQuant): per-input-feature factors
//              s[k] > 0 move range from x to W: W8 quantises W[j, p] · s[p]
//              and x[i, p] · (1 / s[p]) is quantised per row — the same
//              product, with the outlier features of x tamed.
//
// Special values. bf16: NaN and Inf go through the products as in float32
// (a NaN in x[i] makes y[i, :] NaN). int8: a row of x holding a NaN or an
// Inf has no scale; its whole row of y is NaN (never finite numbers), and
// likewise a channel of W holding one makes its column of y NaN. A row (of
// x or W) that is all zero, or whose max |value| is below 2^-100 (127 / max
// would overflow), quantises to zeros with scale 0: its y is the bias.
// bf16 on AVX512_BF16 and AMX takes denormal inputs and sums as zero
// (vdpbf16ps and tdpbf16ps ignore MXCSR and always flush them).
//
// The packed layout does not depend on the instruction set: weights packed
// once run on every LowPrecisionKernels table this CPU supports (tests switch
// tables at run time, as with KernelTable).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "qkv/precision.h"

namespace qkv::kernels {

// Output channels per packed column panel: two 16-lane vectors of float32 sums.
constexpr int64_t kLowpPanel = 32;
// Each panel holds its k steps rounded up to a multiple of this (zeros past
// k): an AMX tile of W is 16 steps (32 bfloat16 or 64 int8 of k) deep.
constexpr int64_t kLowpStepAlign = 16;

// Allocates on 64-byte (cache line) boundaries: packed panels, and the
// benchmarks' operands.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t count) {
    return static_cast<T*>(::operator new(count * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const AlignedAllocator&) const { return true; }
};

// W[n, k] of one linear layer in bfloat16 or int8, packed.
class PackedWeights {
 public:
  PackedWeights() = default;
  // w: row-major [n, k] float32. precision: kBFloat16 or kInt8. smoothing:
  // null, or (int8 only) k finite factors > 0 (see above).
  PackedWeights(const float* w, int64_t n, int64_t k, Precision precision,
                const float* smoothing = nullptr);

  Precision precision() const { return precision_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  bool empty() const { return n_ == 0 && k_ == 0; }
  // Bytes held (for reports of model size).
  int64_t bytes() const;

  // The packed arrays as plain pointers, for the kernels (an out-of-line
  // function: the per-ISA translation units then call no inline function of
  // this class or of std::vector, whose one kept copy could be theirs).
  struct View {
    Precision precision;
    int64_t n, k;
    int64_t panels;            // ceil(n / kLowpPanel) column panels
    int64_t steps;             // k pairs (bfloat16) or k quads (int8): ceil(k / 2) or ceil(k / 4)
    int64_t panel_steps;       // steps rounded up to kLowpStepAlign (zero past steps)
    const uint16_t* bf16;      // [panels][panel_steps][kLowpPanel][2]
    const int8_t* int8;        // [panels][panel_steps][kLowpPanel][4]
    const float* scales;       // [panels · kLowpPanel], zero past n
    const int32_t* col_sums;   // [panels · kLowpPanel], zero past n
    const float* input_scale;  // int8 smoothing: [k] factors 1 / s applied to x, or null
  };
  View view() const;

 private:
  // 64-byte aligned, so that a panel row is one cache line (or two).
  template <class T>
  using Array = std::vector<T, AlignedAllocator<T>>;

  Precision precision_ = Precision::kFloat32;
  int64_t n_ = 0, k_ = 0;
  // Column panels of kLowpPanel output channels (zero-padded past n); within
  // a panel, k-major in steps of 2 (bfloat16) or 4 (int8) consecutive k per
  // channel, the groups that vdpbf16ps and vpdpbusd multiply-add into one lane.
  Array<uint16_t> bf16_;      // kBFloat16: [panels][panel steps][kLowpPanel][2]
  Array<int8_t> int8_;        // kInt8: [panels][panel steps][kLowpPanel][4]
  Array<float> scales_;       // kInt8: scale per output channel
  Array<int32_t> col_sums_;   // kInt8: Σ_k W8[j, k] per output channel (the zero points of x)
  Array<float> input_scale_;  // kInt8 with smoothing: 1 / s per input feature
};

// One instruction set's low-precision kernels.
struct LowPrecisionKernels {
  const char* name;  // e.g. "amx_bf16", "avx512_bf16", "avx512_vnni", "avx2", "portable"
  Precision precision;
  // Rows [row_begin, row_end) and columns [col_begin, col_end) of y (row
  // stride ldy), from x (row stride ldx); bias may be null.
  void (*gemm_block)(const float* x, int64_t ldx, const PackedWeights& w, const float* bias,
                     float* y, int64_t ldy, int64_t row_begin, int64_t row_end, int64_t col_begin,
                     int64_t col_end);
};

// The tables of `precision` this CPU can run, fastest first (tests, benchmarks).
std::vector<const LowPrecisionKernels*> supported_low_precision_kernels(Precision precision);
// The fastest of them at or below isa_ceiling() (kernels/cpu_features.h),
// unless override_low_precision_kernels chose another.
const LowPrecisionKernels& active_low_precision_kernels(Precision precision);
// Tests and benchmarks: use `table` for its precision from now on (nullptr:
// back to the default for every precision).
void override_low_precision_kernels(const LowPrecisionKernels* table);

// An elementwise function over n floats (x and y may be the same), e.g.
// RowKernels::gelu.
using RowMap = void (*)(const float* x, float* y, int64_t n);

// y[m, n] = x[m, k] · Wᵀ + bias, threaded (OpenMP) over blocks of y.
// x: row stride ldx ≥ k; y: row stride ldy ≥ n; bias: [n] or null.
// then: null, or applied in place to each block of y right after it is
// computed, while it is in cache (an activation: y = then(x · Wᵀ + bias)).
void low_precision_gemm(const float* x, int64_t ldx, int64_t m, const PackedWeights& w,
                        const float* bias, float* y, int64_t ldy, RowMap then = nullptr);

}  // namespace qkv::kernels
