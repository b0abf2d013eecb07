// What the integer-x few-rows tables of quant_gemm.h share whatever their
// instruction set: x rounded per block of 32 (quantize_x_q16_reference or
// quantize_x_q8_reference) once per call, into thread-local scratch kept from
// call to call. No intrinsics here: each table rounds a block its own way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace qkv::kernels::quant {
namespace {

inline int load_u32(const uint8_t* p) {
  int v;
  std::memcpy(&v, p, 4);
  return v;
}

// x rounded for one call: row r's values at q + r·k (in the table's order),
// its blocks' {dx, sx} (sx = dx·Σ q_x where a format needs it, else 0) at
// s + r·2·nb, and the dx and sx of block b of every row at dx_by_block +
// b·ld_sx and sx_by_block + b·ld_sx (ld_sx: the rows rounded up to 8, the
// padding 0). k and nb count the blocks of zeros (dx = sx = 0) that pad a
// row to a whole number of the table's groups of blocks.
template <class Int>
struct RoundedX {
  const Int* q;
  const float* s;
  int64_t k, nb;
  const float* dx_by_block;
  const float* sx_by_block;
  int64_t ld_sx;
};

// Rounds m rows of x (stride ldx, k a multiple of 32) into this thread's
// scratch: round_block(p, q_row, b, &dx, &sum) rounds block b of a row (the
// 32 floats at p) into the row's q in the table's layout and gives its dx and
// Σ q; with_sums keeps dx·Σ q as the block's sx. Each row is padded with
// zero blocks to a multiple of `group` blocks.
template <class Int, class RoundBlock>
RoundedX<Int> round_rows(const float* x, int64_t ldx, int64_t m, int64_t k, bool with_sums,
                         RoundBlock round_block, int64_t group = 1) {
  struct Scratch {
    std::vector<Int> q;
    std::vector<float> s, dx_by_block, sx_by_block;
  };
  thread_local Scratch scratch;
  const int64_t blocks = k / 32, nb = (blocks + group - 1) / group * group, ldq = 32 * nb;
  const int64_t ld_sx = (m + 7) / 8 * 8;
  scratch.q.resize(static_cast<size_t>(m * ldq));
  scratch.s.assign(static_cast<size_t>(m * 2 * nb), 0.0f);
  scratch.dx_by_block.assign(static_cast<size_t>(nb * ld_sx), 0.0f);
  scratch.sx_by_block.assign(static_cast<size_t>(nb * ld_sx), 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    Int* q = scratch.q.data() + r * ldq;
    float* s = scratch.s.data() + r * 2 * nb;
    // The last group, where padded: zeros, then its blocks of x over them.
    const int64_t whole = blocks / group * group;
    std::fill(q + 32 * whole, q + ldq, Int{0});
    for (int64_t b = 0; b < blocks; ++b) {
      float dx;
      int32_t sum;
      round_block(x + r * ldx + 32 * b, q, b, &dx, &sum);
      s[2 * b] = dx;
      s[2 * b + 1] = with_sums ? dx * static_cast<float>(sum) : 0.0f;
      scratch.dx_by_block[b * ld_sx + r] = dx;
      scratch.sx_by_block[b * ld_sx + r] = s[2 * b + 1];
    }
  }
  return {scratch.q.data(),           scratch.s.data(),           ldq,  nb,
          scratch.dx_by_block.data(), scratch.sx_by_block.data(), ld_sx};
}

}  // namespace
}  // namespace qkv::kernels::quant
