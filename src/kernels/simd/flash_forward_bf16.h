// The fused forward pass with bfloat16 products, written once for every ISA:
// the tile loops and the online softmax of flash_forward.h with Bf16Products
// (flash_forward_tile<Isa, Bf16Products<Isa>>), whose two products
//   Sᵀ = scale · (K Qᵀ)      and      O += P V
// multiply bfloat16 values: q, k, v and the weights P rounded to bfloat16
// (round to nearest even). On AVX512_BF16 one vdpbf16ps does 32 of those
// multiply-adds; other ISAs widen the bfloat16 values back to float32 and use
// FMAs, which gives the same products (two 8-bit significands multiply
// exactly in float32); only the order of the float32 additions differs.
// Softmax, row max and sum, log-sum-exp and the sums of both products stay
// float32; the exponentials use a shorter polynomial (relative error 5.4e-6,
// far below the 2⁻⁸ of rounding P), so l and the log-sum-exp are as close.
//
// vdpbf16ps adds to each 32-bit lane the products of two pairs of bfloat16
// values, so each operand is laid out in pairs along its product's reduction
// dimension (the even element in the low half of the lane):
//   Sᵀ = K Qᵀ   sums over E:     K rows are already pairs along E (bfloat16
//               inputs are read in place; float32 rows are rounded into
//               scratch); Q is packed as [E/2][queries] pairs (B panels).
//   O += P V    sums over keys:  P is packed as [keys/2][queries] pairs from
//               the transposed score tile; V as [keys/2][Ev] pairs (B panels).
// An odd E or key count is padded with a zero element.
#pragma once

#include <bit>
#include <cstring>

#include "kernels/simd/flash_forward.h"

namespace qkv::kernels::simd {
namespace {

inline int64_t pair_count(int64_t n) { return (n + 1) / 2; }

// The bfloat16 pair at p (p[0] in the low half).
inline uint32_t load_pair(const uint16_t* p) {
  uint32_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

template <class Isa>
void store_pairs(uint32_t* p, typename Isa::V v) {
  Isa::store(reinterpret_cast<float*>(p), v);
}

// Where a pair micro-kernel reads its operands. A pair (r, p) is the two
// bfloat16 values at a + r·row_stride + p·step (16-bit units); B pair row p
// starts at b + p·step (32-bit units) and holds the kernel's width in lanes.
struct PairAView {
  const uint16_t* a;
  int64_t row_stride;
  int64_t step;
};
struct PairBView {
  const uint32_t* b;
  int64_t step;
};

// C[kRows × kVecs·lanes] (=, +=) scale · A · B over k2 pair steps, as
// micro_kernel (tile_gemm.h) with bfloat16 pairs: per step kVecs vectors of
// B pairs and one broadcast pair of A per row. Rows past `rows` read row 0.
template <class Isa, int kRows, int kVecs>
void pair_micro_kernel(int64_t k2, const PairAView& av, PairBView bv, float* c, int64_t ldc,
                       bool accumulate, int64_t rows, int64_t cols, float scale, float* col_max) {
  using V = typename Isa::V;
  V acc[kRows][kVecs];
  accumulate_tile<Isa>(
      acc, k2, av, bv,
      rows, [&](const auto& a_row, int64_t ap, const V* b) __attribute__((always_inline)) {
        if constexpr (kNativeBf16<Isa>) {
#pragma GCC unroll 16
          for (int r = 0; r < kRows; ++r) {
            const V a = Isa::set1(std::bit_cast<float>(load_pair(a_row[r] + ap)));
#pragma GCC unroll 4
            for (int v = 0; v < kVecs; ++v) acc[r][v] = Isa::dot_bf16(acc[r][v], a, b[v]);
          }
        } else {
          // The bfloat16 values widened (exact), then float32 FMAs.
          V b_even[kVecs], b_odd[kVecs];
#pragma GCC unroll 4
          for (int v = 0; v < kVecs; ++v) {
            b_even[v] = Isa::bf16_even(b[v]);
            b_odd[v] = Isa::bf16_odd(b[v]);
          }
#pragma GCC unroll 16
          for (int r = 0; r < kRows; ++r) {
            const uint32_t pair = load_pair(a_row[r] + ap);
            const V a_even = Isa::set1(std::bit_cast<float>(pair << 16));
            const V a_odd = Isa::set1(std::bit_cast<float>(pair & 0xffff0000u));
#pragma GCC unroll 4
            for (int v = 0; v < kVecs; ++v)
              acc[r][v] = Isa::fmadd(a_odd, b_odd[v], Isa::fmadd(a_even, b_even[v], acc[r][v]));
          }
        }
      });
  if (scale != 1.0f) {
    const V s = Isa::set1(scale);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] = Isa::mul(acc[r][v], s);
  }
  store_tile<Isa, kRows, kVecs>(acc, c, ldc, accumulate, rows, cols, col_max);
}

// C[m × n] (=, +=) scale · A · B over k2 pair steps, as gemm_tiles: A in
// panels of kRows rows (a_panel_stride apart, 16-bit units), B in panels of
// kVecs vectors (b_panel_stride apart, 32-bit units).
template <class Isa, int kRows, int kVecs>
void pair_gemm_tiles(int64_t m, int64_t n, int64_t k2, const PairAView& a, int64_t a_panel_stride,
                     PairBView b, int64_t b_panel_stride, float* c, int64_t ldc, bool accumulate,
                     float scale, float* col_max = nullptr) {
  for_each_tile<kRows, kVecs * Isa::kLanes>(
      m, n, a, a_panel_stride, b, b_panel_stride, c, ldc, col_max,
      [&](const PairAView& ap, PairBView bp, float* tile, int64_t rows, int64_t cols,
          float* tile_max) {
        pair_micro_kernel<Isa, kRows, kVecs>(k2, ap, bp, tile, ldc, accumulate, rows, cols, scale,
                                             tile_max);
      });
}

// Whether P·V runs on panels of WideShape's width (64 values on AVX-512):
// when that pads Ev no more than the usual 32-wide panels do.
template <class Isa>
bool wide_value_panels(int64_t ev) {
  using Wide = WideShape<Isa>;
  return Wide::kUsable && round_up(ev, Wide::kNr) == round_up(ev, TileShape<Isa>::kNr);
}

// The scratch of one query tile of the bfloat16 forward, carved from one
// buffer: the softmax state (m, l, shift, alpha [query_pad]; out [block_q,
// Ev]) and the operands of the pair products.
template <class Isa>
struct Bf16ForwardScratch : SoftmaxState {
  float* q_t;         // [E, query_pad] Qᵀ as float panels (then paired)
  uint32_t* q_pairs;  // [E/2, query_pad] Qᵀ as bfloat16 pair panels
  float* s_t;         // [block_k, query_pad] Sᵀ, then Pᵀ
  uint32_t* p_pairs;  // [block_k/2, query_pad] Pᵀ as pairs along keys
  uint16_t* k_rows;   // [block_k, 2·(E/2)] K rounded to bfloat16 (when not read in place)
  uint32_t* v_pairs;  // [block_k/2, round_up(Ev, 64)] V as pair panels
  float* q_rows;      // [block_q, E] bfloat16 Q widened (bfloat16 inputs only)

  static int64_t floats(const SdpaProblem& p, const FlashTiling& t) {
    const int64_t qp = ForwardScratch<Isa>::query_pad(t);
    const int64_t e2 = pair_count(p.E), k2 = pair_count(t.block_k);
    auto r = [](int64_t n) { return round_up(n, 16); };
    return r(p.E * qp) + r(e2 * qp) + r(t.block_k * qp) + r(k2 * qp) + r(t.block_k * e2) +
           r(k2 * round_up(p.Ev, 64)) + SoftmaxState::floats(qp, t.block_q * p.Ev) +
           (p.dtype == DType::kBFloat16 ? r(t.block_q * p.E) : 0);
  }
  Bf16ForwardScratch(const SdpaProblem& p, const FlashTiling& t, float* base) {
    const int64_t qp = ForwardScratch<Isa>::query_pad(t);
    const int64_t e2 = pair_count(p.E), k2 = pair_count(t.block_k);
    ScratchCarver carve{base};
    q_t = carve.take(p.E * qp);
    q_pairs = carve.take_as<uint32_t>(e2 * qp);
    s_t = carve.take(t.block_k * qp);
    p_pairs = carve.take_as<uint32_t>(k2 * qp);
    k_rows = carve.take_as<uint16_t>(t.block_k * e2);
    v_pairs = carve.take_as<uint32_t>(k2 * round_up(p.Ev, 64));
    carve_from(carve, qp, t.block_q * p.Ev);
    q_rows = carve.next;
  }
};

// dst[e] = bfloat16(src[e·stride]) for e < n (round to nearest even).
template <class Isa>
void round_row_bf16(const float* src, int64_t stride, int64_t n, uint16_t* dst) {
  int64_t e = 0;
  if constexpr (kNativeBf16<Isa>) {
    if (stride == 1)
      for (; e + 32 <= n; e += 32) Isa::round_bf16_32(src + e, dst + e);
  }
  for (; e < n; ++e) dst[e] = float_to_bfloat16(src[e * stride]);
}

// Keys [j0, j0 + keys) of problem b as the A operand of Sᵀ = K Qᵀ: rows of
// bfloat16 pairs along E. bfloat16 rows that are contiguous with an even E
// are read in place; others are rounded (or copied) into `scratch`
// [keys, 2·(E/2)], an odd E padded with 0.
template <class Isa>
PairAView key_pairs(const SdpaProblem& p, int64_t b, int64_t j0, int64_t keys, uint16_t* scratch) {
  const MatrixOperand& k = p.k;
  const int64_t width = 2 * pair_count(p.E);
  if (p.dtype == DType::kBFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(k.base) + k.offsets[b] + j0 * k.row_stride;
    if (k.col_stride == 1 && p.E % 2 == 0) return {src, k.row_stride, 2};
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t e = 0; e < p.E; ++e)
        scratch[j * width + e] = src[j * k.row_stride + e * k.col_stride];
      if (width > p.E) scratch[j * width + p.E] = 0;
    }
  } else {
    const float* src = static_cast<const float*>(k.base) + k.offsets[b] + j0 * k.row_stride;
    for (int64_t j = 0; j < keys; ++j) {
      round_row_bf16<Isa>(src + j * k.row_stride, k.col_stride, p.E, scratch + j * width);
      if (width > p.E) scratch[j * width + p.E] = 0;
    }
  }
  return {scratch, width, 2};
}

// Qᵀ of the query tile as bfloat16 pair panels of qp's panel width:
// q_pairs[panel][e2][c] = (Q[c][2·e2], Q[c][2·e2 + 1]), zero-padded. The
// scale is applied to the product, so q itself is what gets rounded.
template <class Isa>
void pack_query_pairs(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                      const Bf16ForwardScratch<Isa>& w, int64_t qp) {
  constexpr int kL = Isa::kLanes;
  const FloatRows q = float_rows(p, p.q, b, q_begin, rows, p.E, w.q_rows);
  const int64_t e2 = pair_count(p.E);
  with_query_panel<Isa>(qp, [&](auto shape) {
    constexpr int64_t kPanel = decltype(shape)::kQueryPanel;
    // B element (e, i) = Q[i, e], float panels [panel][e][c]
    pack_b<Isa, kPanel>(q.data, q.col_stride, q.row_stride, p.E, rows, 1.0f, w.q_t);
    for (int64_t panel = 0; panel * kPanel < rows; ++panel) {
      const float* src = w.q_t + panel * p.E * kPanel;
      uint32_t* dst = w.q_pairs + panel * e2 * kPanel;
      for (int64_t i = 0; i < e2; ++i)
        for (int64_t c = 0; c < kPanel; c += kL) {
          const typename Isa::V even = Isa::load(src + 2 * i * kPanel + c);
          const typename Isa::V odd =
              2 * i + 1 < p.E ? Isa::load(src + (2 * i + 1) * kPanel + c) : Isa::zero();
          store_pairs<Isa>(dst + i * kPanel + c, Isa::bf16_pairs(even, odd));
        }
    }
  });
}

// Values [j0, j0 + keys) of problem b as pair panels of kNr columns:
// dst[panel][j2][c] = (V[j0 + 2·j2][c], V[j0 + 2·j2 + 1][c]), zero past Ev
// and for the missing key of an odd count.
template <class Isa, int kNr>
void pack_value_pairs(const SdpaProblem& p, int64_t b, int64_t j0, int64_t keys, uint32_t* dst) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  const MatrixOperand& v = p.v;
  const int64_t k2 = pair_count(keys), rs = v.row_stride, cs = v.col_stride;
  const bool bf16 = p.dtype == DType::kBFloat16;
  const uint16_t* base16 = static_cast<const uint16_t*>(v.base) + v.offsets[b] + j0 * rs;
  const float* base32 = static_cast<const float*>(v.base) + v.offsets[b] + j0 * rs;
  // Element (key j, column c) as bfloat16 bits, rounded when float32.
  auto bits = [&](int64_t j, int64_t c) -> uint32_t {
    return bf16 ? base16[j * rs + c * cs] : float_to_bfloat16(base32[j * rs + c * cs]);
  };
  for (int64_t c0 = 0; c0 < p.Ev; c0 += kNr, dst += k2 * kNr) {
    const int64_t cols = std::min<int64_t>(kNr, p.Ev - c0);
    for (int64_t j2 = 0; j2 < k2; ++j2) {
      const int64_t je = 2 * j2;
      const bool has_odd = je + 1 < keys;
      uint32_t* out = dst + j2 * kNr;
      int64_t c = 0;
      if (cs == 1 && bf16) {
        const uint16_t* re = base16 + je * rs + c0;
        const uint16_t* ro = re + rs;
        if constexpr (kNativeBf16<Isa>) {
          if (has_odd)
            for (; c + kL <= cols; c += kL)
              store_pairs<Isa>(out + c, Isa::pair_rows_bf16(re + c, ro + c));
        } else {
          for (; c + kL <= cols; c += kL)
            store_pairs<Isa>(out + c,
                             Isa::bf16_pairs(Isa::load_bf16(re + c),
                                             has_odd ? Isa::load_bf16(ro + c) : Isa::zero()));
        }
      } else if (cs == 1) {
        const float* re = base32 + je * rs + c0;
        const float* ro = re + rs;
        for (; c + kL <= cols; c += kL)
          store_pairs<Isa>(out + c, Isa::bf16_pairs(Isa::load(re + c),
                                                    has_odd ? Isa::load(ro + c) : Isa::zero()));
        if (c < cols) {  // the last partial vector; lanes past cols pair zeros
          const int n = static_cast<int>(cols - c);
          const V odd = has_odd ? Isa::load_first(ro + c, n) : Isa::zero();
          store_pairs<Isa>(out + c, Isa::bf16_pairs(Isa::load_first(re + c, n), odd));
          c += kL;
        }
      }
      for (; c < cols; ++c) out[c] = bits(je, c0 + c) | (has_odd ? bits(je + 1, c0 + c) << 16 : 0u);
      for (; c < kNr; ++c) out[c] = 0;
    }
  }
}

// Rows [rows, lds] of a float tile (columns < cols used) as pairs along the
// rows, rounded to bfloat16: dst[r2·lds + c] = (x̂[2·r2][c], x̂[2·r2 + 1][c]);
// the missing row of an odd count is 0. Pᵀ [keys, qp] so paired along keys
// is the A operand of O += P V; the backward pairs P and dS along queries.
template <class Isa>
void pair_tile_rows(const float* x, int64_t lds, int64_t rows, int64_t cols, uint32_t* dst) {
  constexpr int kL = Isa::kLanes;
  for (int64_t r2 = 0; r2 < pair_count(rows); ++r2) {
    const float* even = x + 2 * r2 * lds;
    const bool has_odd = 2 * r2 + 1 < rows;
    for (int64_t c = 0; c < cols; c += kL)
      store_pairs<Isa>(
          dst + r2 * lds + c,
          Isa::bf16_pairs(Isa::load(even + c), has_odd ? Isa::load(even + lds + c) : Isa::zero()));
  }
}

// exp(x) for x ≤ 0 (or NaN, which stays NaN), for weights that are rounded
// to bfloat16 next: relative error 5.4e-6 (2⁻¹⁷·⁵, against 2⁻⁸ for the
// rounding), one multiply-add fewer than exp<Isa> and no clamping (x ≤ 0
// cannot overflow; x below −87.3, −inf included, gives exactly 0 through the
// final mask as in exp<Isa>). Degree-4 polynomial 1 + r + c₂r² + c₃r³ + c₄r⁴
// on |r| ≤ ln2/2, fitted for least maximum relative error.
template <class Isa>
typename Isa::V exp_nonpositive(typename Isa::V x) {
  using V = typename Isa::V;
  const V n = Isa::round_nearest(Isa::mul(x, Isa::set1(1.44269504088896341f)));
  V r = Isa::fmadd(n, Isa::set1(-0.693359375f), x);
  r = Isa::fmadd(n, Isa::set1(2.12194440e-4f), r);
  V p = Isa::set1(0.04127737f);
  p = Isa::fmadd(p, r, Isa::set1(0.16753601f));
  p = Isa::fmadd(p, r, Isa::set1(0.50005126f));
  p = Isa::fmadd(p, r, Isa::set1(1.0f));
  p = Isa::fmadd(p, r, Isa::set1(1.0f));
  return Isa::zero_below(x, -87.3f, Isa::times_pow2(p, n));
}

// update_softmax_shift a vector of queries at a time: the scalar std::exp per
// query and key tile costs as much as a tenth of the products at E = 32.
// (α by exp<Isa>, relative error 2e-7.)
template <class Isa>
void update_softmax_shift_vectors(int64_t keys, int64_t qp, bool have_max, const float* s_t,
                                  const SoftmaxState& st) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  const V neg_inf = Isa::set1(kNegInfF), one = Isa::set1(1.0f), zero = Isa::zero();
  for (int64_t c = 0; c < qp; c += kL) {
    V mx = Isa::load(st.shift + c);
    if (!have_max)
      for (int64_t j = 0; j < keys; ++j) mx = Isa::max(mx, Isa::load(s_t + j * qp + c));
    const V m_old = Isa::load(st.m + c);
    const V m_new = Isa::max(mx, m_old);
    // Nothing seen before (m = −inf): α = 1; nothing visible yet: shift 0.
    Isa::store(st.alpha + c, Isa::gt_select(m_old, neg_inf, exp<Isa>(Isa::sub(m_old, m_new)), one));
    Isa::store(st.shift + c, Isa::gt_select(m_new, neg_inf, m_new, zero));
    Isa::store(st.m + c, m_new);
  }
}

// One key tile of the online softmax (as online_softmax_step) that writes
// the weights straight into bfloat16 pairs along keys, p_pairs [keys/2, qp],
// two key rows at a time: the A operand of O += P V. l sums the float32
// weights. With dropout: online_softmax_step, then pair_tile_rows.
template <class Isa>
void online_softmax_pairs_step(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                               int64_t j0, int64_t keys, int64_t qp, bool have_max, float* s_t,
                               const SoftmaxState& st, uint32_t* p_pairs) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  if (p.dropout_p > 0.0) {
    online_softmax_step<Isa>(p, b, q_begin, rows, j0, keys, qp, have_max, s_t, st);
    pair_tile_rows<Isa>(s_t, qp, keys, qp, p_pairs);
    return;
  }
  update_softmax_shift_vectors<Isa>(keys, qp, have_max, s_t, st);
  const int64_t whole = keys / 2;
  for (int64_t c = 0; c < qp; c += kL) {
    const V shift = Isa::load(st.shift + c);
    V sum = Isa::zero();
    const float* s = s_t + c;
    uint32_t* out = p_pairs + c;
    for (int64_t j2 = 0; j2 < whole; ++j2, s += 2 * qp, out += qp) {
      const V e0 = exp_nonpositive<Isa>(Isa::sub(Isa::load(s), shift));
      const V e1 = exp_nonpositive<Isa>(Isa::sub(Isa::load(s + qp), shift));
      sum = Isa::add(sum, Isa::add(e0, e1));
      store_pairs<Isa>(out, Isa::bf16_pairs(e0, e1));
    }
    if (keys % 2 != 0) {
      const V e0 = exp_nonpositive<Isa>(Isa::sub(Isa::load(s), shift));
      sum = Isa::add(sum, e0);
      store_pairs<Isa>(out, Isa::bf16_pairs(e0, Isa::zero()));
    }
    Isa::store(st.l + c, Isa::fmadd(Isa::load(st.l + c), Isa::load(st.alpha + c), sum));
  }
  rescale_output_rows<Isa>(p, rows, st);
}

// The products of the bfloat16 forward (see the top of this file): Q, K, V
// and the weights P in bfloat16 pairs, multiplied by pair_gemm_tiles.
template <class Isa>
struct Bf16Products {
  using Scratch = Bf16ForwardScratch<Isa>;

  static void pack_query(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                         const Scratch& w, int64_t qp) {
    pack_query_pairs<Isa>(p, b, q_begin, rows, w, qp);
  }

  // Keys [j0, j0 + keys) as the A operand of Sᵀ = scale · K Qᵀ (key_pairs).
  static PairAView key_operand(const SdpaProblem& p, int64_t b, int64_t j0, int64_t keys,
                               const Scratch& w) {
    return key_pairs<Isa>(p, b, j0, keys, w.k_rows);
  }

  // Sᵀ of the queries [c0, c0 + cols), a panel of Shape's width, over the
  // first `extent` keys.
  template <class Shape>
  static void score_panel(const SdpaProblem& p, const PairAView& k, const Scratch& w, int64_t qp,
                          int64_t c0, int64_t cols, int64_t extent, float* panel_max) {
    constexpr int64_t kPanel = Shape::kQueryPanel;
    const int64_t e2 = pair_count(p.E);
    pair_gemm_tiles<Isa, Shape::kKeyRows, Shape::kKeyVecs>(
        extent, cols, e2, k, Shape::kKeyRows * k.row_stride, PairBView{w.q_pairs + c0 * e2, kPanel},
        e2 * kPanel, w.s_t + c0, qp, false, static_cast<float>(p.scale), panel_max);
  }

  static void softmax_step(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                           int64_t j0, int64_t keys, int64_t qp, bool have_max, const Scratch& w) {
    online_softmax_pairs_step<Isa>(p, b, q_begin, rows, j0, keys, qp, have_max, w.s_t, w,
                                   w.p_pairs);
  }

  // O[rows × Ev] += P Vⱼ from the pair-packed P (A pair (query i, step j2) at
  // p_pairs[j2·qp + i]) and V packed as pair panels.
  static void accumulate_values(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                                int64_t j0, int64_t keys, int64_t qp, bool diagonal,
                                const Scratch& w) {
    const uint16_t* a = reinterpret_cast<const uint16_t*>(w.p_pairs);
    with_value_shape<Isa>(qp, wide_value_panels<Isa>(p.Ev), [&](auto shape) {
      using Shape = decltype(shape);
      constexpr int kRows = Shape::kRows, kVecs = Shape::kVecs, kNr = kVecs * Isa::kLanes;
      pack_value_pairs<Isa, kNr>(p, b, j0, keys, w.v_pairs);
      const int64_t k2 = pair_count(keys);
      accumulate_value_panels<kRows>(
          p, q_begin, rows, j0, keys, diagonal, [&](int64_t r0, int64_t n, int64_t depth) {
            pair_gemm_tiles<Isa, kRows, kVecs>(
                n, p.Ev, pair_count(depth), PairAView{a + 2 * r0, 2, 2 * qp}, 2 * kRows,
                PairBView{w.v_pairs, kNr}, k2 * kNr, w.out + r0 * p.Ev, p.Ev, true, 1.0f);
          });
    });
  }
};

}  // namespace
}  // namespace qkv::kernels::simd
