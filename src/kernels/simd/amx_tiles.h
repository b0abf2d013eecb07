// AMX tile routines shared by the kernels that use them (kernels/cpu_features.h):
// the tile configuration, and a 32 × 32 block of C = A · B summed over k in
// the one arrangement of the eight tiles that they all use:
//
//   tmm0 tmm1   C, rows 0-15  × columns 0-15 | 16-31
//   tmm2 tmm3   C, rows 16-31 × columns 0-15 | 16-31
//   tmm4 tmm5   A, rows 0-15 | 16-31
//   tmm6 tmm7   B, columns 0-15 | 16-31
//
// A: row-major rows of 4-byte groups along k (bfloat16 pairs or u8 quads),
// a tile being 16 rows × 16 groups. B: a "panel" of 32 columns, k-major, each
// step (one group of k for each of the 32 columns) 128 bytes, the layout of
// low_precision_gemm.h's packed weights: a tile is 16 steps × 16 columns read
// at a stride of 128 bytes. Also the conversions that build those operands:
// floats to bfloat16, and 16 × 16 transposes of 4-byte words (rows of pairs
// into panels; transpose_16x16.h). Compiled only in translation units built with
// -mamx-tile -mamx-bf16 -mamx-int8; internal linkage, as kernels/simd/vec.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/transpose_16x16.h"

namespace qkv::kernels::amx {
namespace {

using simd::transpose_16x16_words;

constexpr int kTileBytes = 64;       // one tile row: 16 groups of 4 bytes
constexpr int kPanelRowBytes = 128;  // one step of a B panel: 32 columns × 4 bytes
constexpr int kBlock = 32;           // rows and columns of a C block

// The layout of ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Eight tiles of 16 rows × 64 bytes. Pair with _tile_release() when done, so
// that the thread gives the tile state back.
inline void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = kTileBytes;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// C += A · B of one tile triple: u8 × s8 into int32 (kInt8) or bfloat16
// pairs into float32. (A macro: GCC's tile intrinsics paste the register
// numbers into the instruction's text, so they cannot be template arguments.)
#define QKV_TILE_DOT(kInt8, C, A, B) \
  do {                               \
    if constexpr (kInt8) {           \
      _tile_dpbusd(C, A, B);         \
    } else {                         \
      _tile_dpbf16ps(C, A, B);       \
    }                                \
  } while (0)

// c[32][32] (4-byte sums, rows c_stride bytes apart) = a · b over `blocks`
// groups of 16 steps: a rows at a stride of a_stride bytes, b a panel
// (above). kTwoHalves: rows 16-31 too (otherwise only c's rows 0-15).
template <bool kInt8, bool kTwoHalves>
void multiply_block(const char* a, int64_t a_stride, const char* b, int64_t blocks, void* c,
                    int64_t c_stride = kBlock * 4) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kTwoHalves) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const char* bk = b + kb * 16 * kPanelRowBytes;
    _tile_loadd(6, bk, kPanelRowBytes);
    _tile_loadd(7, bk + kTileBytes, kPanelRowBytes);
    _tile_loadd(4, a + kb * kTileBytes, a_stride);
    QKV_TILE_DOT(kInt8, 0, 4, 6);
    QKV_TILE_DOT(kInt8, 1, 4, 7);
    if constexpr (kTwoHalves) {
      _tile_loadd(5, a + 16 * a_stride + kb * kTileBytes, a_stride);
      QKV_TILE_DOT(kInt8, 2, 5, 6);
      QKV_TILE_DOT(kInt8, 3, 5, 7);
    }
  }
  char* out = static_cast<char*>(c);
  _tile_stored(0, out, c_stride);
  _tile_stored(1, out + kTileBytes, c_stride);
  if constexpr (kTwoHalves) {
    _tile_stored(2, out + 16 * c_stride, c_stride);
    _tile_stored(3, out + 16 * c_stride + kTileBytes, c_stride);
  }
}

// 16 floats → 16 bfloat16, rounded to nearest even (denormals to zero, as
// the tiles take them anyway).
inline __m256i bf16x16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

#undef QKV_TILE_DOT

}  // namespace
}  // namespace qkv::kernels::amx
