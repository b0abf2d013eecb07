// Bandwidth-bound matrix-vector products: AVX-512, AVX2 and portable
// versions chosen once per process (GCC target attributes, so this file needs
// no special compile flags).
#include "ops/gemv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <string>

#include "qkv/runtime.h"

// GCC 12's _mm512_reduce_add_ps starts from an "undefined" register.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace qkv::detail {

namespace {

// Rows per pass: four independent streams of W share each load of x.
constexpr int64_t kRows = 4;
// Below this many weights a second thread costs more (wake-up and join,
// a few microseconds) than it saves (measured with a d=384 decoding step).
constexpr int64_t kParallelWeights = 96 * 1024;

using RowsKernel = void (*)(const GemvTask& t, int64_t row_begin, int64_t row_end);

__attribute__((target("avx512f,avx512dq,fma"))) void rows_avx512(const GemvTask& t, int64_t begin,
                                                                 int64_t end) {
  const int64_t k = t.k;
  const int64_t full = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - full)) - 1u);
  int64_t r = begin;
  for (; r + kRows <= end; r += kRows) {
    const float* w0 = t.w + r * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < full; c += 16) {
      const __m512 x = _mm512_loadu_ps(t.x + c);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + c), x, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + c), x, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + c), x, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + c), x, a3);
    }
    if (tail) {
      const __m512 x = _mm512_maskz_loadu_ps(tail, t.x + full);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + full), x, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w1 + full), x, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w2 + full), x, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w3 + full), x, a3);
    }
    const float s[kRows] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1),
                            _mm512_reduce_add_ps(a2), _mm512_reduce_add_ps(a3)};
    for (int64_t i = 0; i < kRows; ++i) t.y[r + i] = t.accumulate ? t.y[r + i] + s[i] : s[i];
  }
  for (; r < end; ++r) {
    const float* w = t.w + r * k;
    __m512 a = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; c += 16)
      a = _mm512_fmadd_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(t.x + c), a);
    if (tail)
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + full),
                          _mm512_maskz_loadu_ps(tail, t.x + full), a);
    const float s = _mm512_reduce_add_ps(a);
    t.y[r] = t.accumulate ? t.y[r] + s : s;
  }
}

__attribute__((target("avx2,fma"))) float sum8(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

__attribute__((target("avx2,fma"))) void rows_avx2(const GemvTask& t, int64_t begin, int64_t end) {
  const int64_t k = t.k;
  const int64_t full = k / 8 * 8;
  int64_t r = begin;
  for (; r + kRows <= end; r += kRows) {
    const float* w0 = t.w + r * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < full; c += 8) {
      const __m256 x = _mm256_loadu_ps(t.x + c);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + c), x, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + c), x, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + c), x, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + c), x, a3);
    }
    float s[kRows] = {sum8(a0), sum8(a1), sum8(a2), sum8(a3)};
    for (int64_t c = full; c < k; ++c) {
      s[0] += w0[c] * t.x[c];
      s[1] += w1[c] * t.x[c];
      s[2] += w2[c] * t.x[c];
      s[3] += w3[c] * t.x[c];
    }
    for (int64_t i = 0; i < kRows; ++i) t.y[r + i] = t.accumulate ? t.y[r + i] + s[i] : s[i];
  }
  for (; r < end; ++r) {
    const float* w = t.w + r * k;
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; c += 8)
      a = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(t.x + c), a);
    float s = sum8(a);
    for (int64_t c = full; c < k; ++c) s += w[c] * t.x[c];
    t.y[r] = t.accumulate ? t.y[r] + s : s;
  }
}

void rows_portable(const GemvTask& t, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* w = t.w + r * t.k;
    float s = 0.0f;
    for (int64_t c = 0; c < t.k; ++c) s += w[c] * t.x[c];
    t.y[r] = t.accumulate ? t.y[r] + s : s;
  }
}

struct Choice {
  RowsKernel kernel;
  const char* name;
};

const Choice& choice() {
  static const Choice chosen = [] {
    const std::string isa = kernel_isa();
    if (isa == "avx512") return Choice{rows_avx512, "avx512"};
    if (isa == "avx2") return Choice{rows_avx2, "avx2"};
    return Choice{rows_portable, "portable"};
  }();
  return chosen;
}

}  // namespace

const char* gemv_isa() { return choice().name; }

void gemv(std::span<const GemvTask> tasks) {
  const RowsKernel kernel = choice().kernel;
  int64_t weights = 0;
  for (const GemvTask& t : tasks) weights += t.n * t.k;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || weights < kParallelWeights) {
    for (const GemvTask& t : tasks) kernel(t, 0, t.n);
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
      kernel(t, begin, end);
    }
  }
}

}  // namespace qkv::detail
