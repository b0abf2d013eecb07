// Software prefetch of quantized weights for the few-rows (decoding) kernels.
//
// Decoding reads every weight once per token, channel row after channel row,
// from matrices of a few hundred KB. The hardware prefetchers follow that
// stream but restart at each 4 KiB page, and the loads of one core alone
// leave too few misses in flight to reach the memory's bandwidth, so each
// kernel asks, at every row, for the bytes kPrefetchAhead further on
// (docs/benchmarks.md has the distances tried and what they gave).
#pragma once

#include <cstdint>

#include "kernels/quant_gemm.h"

namespace qkv::kernels::quant {

inline constexpr int64_t kPrefetchAhead = 6144;  // bytes

// Prefetches the row_bytes that start kPrefetchAhead bytes after row j of w:
// rows to come, or past the matrix (a prefetch never faults).
inline void prefetch_ahead(const QuantMatrix& w, int64_t j) {
  // Integer arithmetic: the address may lie outside w's bytes.
  const uintptr_t start = reinterpret_cast<uintptr_t>(w.data) +
                          static_cast<uintptr_t>(j * w.row_bytes + kPrefetchAhead);
  for (int64_t offset = 0; offset < w.row_bytes; offset += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(start + static_cast<uintptr_t>(offset)), 0, 3);
}

}  // namespace qkv::kernels::quant
