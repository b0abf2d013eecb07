// The fused forward pass of one query tile, written once for every ISA.
//
// For queries i in [q_begin, q_begin + rows) of problem b, walking key tiles j:
//   Sᵀ  = Kⱼ (scale·Q)ᵀ  (soft-capped, + ALiBi + mask, −inf outside causal/window)
//   m'  = max(m, colmax Sᵀ);  Pᵀ = exp(Sᵀ − m');  α = exp(m − m')
//   l   = α·l + colsum Pᵀ;    O = α·O + dropout(P) Vⱼ
// and finally O /= l, lse = m + log l. Rows with every key masked end with
// l = 0 and give output 0.
//
// Why the scores are kept transposed (keys × queries): K is then read in
// place by the micro-kernel (row-major, one broadcast per element), Q is
// transposed once per query tile rather than K once per (query tile, key
// tile), the softmax statistics of 16 queries sit in one vector, and the
// P·V product reads Pᵀ columns as ready-made packed panels. No key tile is
// ever copied.
//
// The tile loops (flash_forward_tile, flash_weights_tile) are written once for
// float32 and bfloat16 products: a Products policy packs the query tile and
// computes a key tile's scores, softmax step and P·V in its own layout.
// Float32Products is here; Bf16Products in flash_forward_bf16.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/fused_attention.h"
#include "kernels/simd/tile_gemm.h"
#include "qkv/tensor.h"

namespace qkv::kernels::simd {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// Micro-kernel shapes of the two products (rows × vectors of columns):
// Sᵀ = K Qᵀ reads K rows in place (kKeyRows row pointers), P V keeps
// kMr × 2 vectors. Both fit the register file with room for the operands.
// A tile of at most one or two vectors of queries (short prompts, the last
// tile of a sequence) uses a one- or two-vector panel, so that 16 or 32
// queries do not pay for 48, and one of four vectors two two-vector panels
// (64 queries: not 96, nor a 48 and a 16 that read K and V twice).
template <class Isa, int kVecs = 3>
struct ForwardShape {
  static constexpr int kKeyRows = Isa::kLanes == 16 ? 8 : 4;
  static constexpr int kKeyVecs = kVecs;
  static constexpr int kQueryPanel = kKeyVecs * Isa::kLanes;  // 48, 24 or 12 queries when wide
};

// Runs f(ForwardShape<Isa, v>{}) for the panel of a tile padded to qp queries.
template <class Isa, class F>
void with_query_panel(int64_t qp, F&& f) {
  if (qp == Isa::kLanes) {
    f(ForwardShape<Isa, 1>{});
  } else if (qp == 2 * Isa::kLanes || qp == 4 * Isa::kLanes) {
    f(ForwardShape<Isa, 2>{});
  } else {
    f(ForwardShape<Isa>{});
  }
}

// Narrows the keys [begin, end) of problem b to those a mask that is the same
// for every query (key padding, [B, 1, 1, S]) keeps: keys it hides (false, or
// −inf in a float mask) before the first kept one and after the last need no
// work at all.
inline void trim_to_kept_keys(const SdpaProblem& p, int64_t b, int64_t* begin, int64_t* end) {
  if (p.mask.base == nullptr || p.mask.row_stride != 0) return;
  const int64_t at = p.mask.offsets[b], step = p.mask.col_stride;
  auto kept = [&](int64_t j) {
    return p.mask.dtype == DType::kBool
               ? static_cast<const bool*>(p.mask.base)[at + j * step]
               : static_cast<const float*>(p.mask.base)[at + j * step] != kNegInfF;
  };
  while (*end > *begin && !kept(*end - 1)) --*end;
  while (*begin < *end && !kept(*begin)) ++*begin;
}

// The keys [begin, end) a tile of queries of problem b may see at all (the
// causal mask, the window, key padding): key tiles outside are skipped, not
// computed and masked.
inline void tile_key_range(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                           int64_t* begin, int64_t* end) {
  int64_t unused;
  visible_keys(p, q_begin, begin, &unused);
  visible_keys(p, q_begin + rows - 1, &unused, end);
  trim_to_kept_keys(p, b, begin, end);
}

// Whether every query of the tile sees every key of [j0, j0 + keys).
inline bool tile_fully_visible(const SdpaProblem& p, int64_t q_begin, int64_t rows, int64_t j0,
                               int64_t keys) {
  if (!limits_keys(p)) return true;
  int64_t first_begin, first_end, last_begin, last_end;
  visible_keys(p, q_begin, &first_begin, &first_end);
  visible_keys(p, q_begin + rows - 1, &last_begin, &last_end);
  return last_begin <= j0 && first_end >= j0 + keys;
}

// How many of the keys [j0, j0 + keys) query i or an earlier query may see
// (visible ranges only move right as i grows): on a diagonal tile a panel of
// queries computes its scores and products only that far.
inline int64_t keys_seen_by(const SdpaProblem& p, int64_t i, int64_t j0, int64_t keys) {
  int64_t begin, end;
  visible_keys(p, i, &begin, &end);
  return std::clamp<int64_t>(end - j0, 0, keys);
}

// The end of the key tile that starts at j0 (keys up to key_end): at most
// block_k keys, and cut where the keys that every query of the tile sees begin
// or end, so that only the tiles across the diagonal (or the window's edges)
// take the masked path. Cuts closer than a vector of keys are not worth a tile.
inline int64_t key_tile_end(const SdpaProblem& p, const FlashTiling& t, int64_t q_begin,
                            int64_t rows, int64_t j0, int64_t key_end) {
  int64_t end = std::min<int64_t>(j0 + t.block_k, key_end);
  if (!limits_keys(p)) return end;
  constexpr int64_t kMinKeys = 16;
  int64_t first_begin, first_end, last_begin, last_end;
  visible_keys(p, q_begin, &first_begin, &first_end);
  visible_keys(p, q_begin + rows - 1, &last_begin, &last_end);
  for (const int64_t cut : {last_begin, first_end})
    if (cut - j0 >= kMinKeys && cut < end) end = cut;
  return end;
}

// −inf for every score of the tile that the causal mask or the window hides.
// Query i sees the keys [begin(i), end(i)), both non-decreasing in i, so a
// query row hides a prefix and a suffix of its keys and a key row (the
// forward's transposed tile) a prefix and a suffix of its queries: each is
// two contiguous fills. Layout as in adjust_scores().
inline void mask_invisible_scores(const SdpaProblem& p, int64_t q_begin, int64_t rows, int64_t j0,
                                  int64_t keys, float* s, int64_t row_step, int64_t col_step) {
  auto fill = [](float* x, int64_t n, int64_t step) {
    if (step == 1) {
      std::fill_n(x, n, kNegInfF);
    } else {
      for (int64_t k = 0; k < n; ++k) x[k * step] = kNegInfF;
    }
  };
  if (row_step == 1 && col_step != 1) {
    // Key row c: queries [lo, hi) see it; lo and hi only grow with c.
    int64_t lo = 0, hi = 0, begin, end;
    for (int64_t c = 0; c < keys; ++c) {
      const int64_t j = j0 + c;
      for (; lo < rows; ++lo) {
        visible_keys(p, q_begin + lo, &begin, &end);
        if (end > j) break;
      }
      for (hi = std::max(hi, lo); hi < rows; ++hi) {
        visible_keys(p, q_begin + hi, &begin, &end);
        if (begin > j) break;
      }
      float* row = s + c * col_step;
      fill(row, lo, 1);
      fill(row + hi, rows - hi, 1);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    int64_t begin, end;
    visible_keys(p, q_begin + r, &begin, &end);
    const int64_t first = std::clamp<int64_t>(begin - j0, 0, keys);
    const int64_t last = std::clamp<int64_t>(end - j0, first, keys);
    float* row = s + r * row_step;
    fill(row, first, col_step);
    fill(row + last * col_step, keys - last, col_step);
  }
}

// The attention mask added to a tile of scores (a bool mask: −inf where
// false). Layout as in adjust_scores(). A mask that is the same for every
// query (key padding, [B, 1, 1, S]) on the forward's transposed tile is one
// test per key and a contiguous row of queries to fill or shift.
inline void add_mask(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows, int64_t j0,
                     int64_t keys, float* s, int64_t row_step, int64_t col_step) {
  const bool is_bool = p.mask.dtype == DType::kBool;
  const bool* bool_mask = static_cast<const bool*>(p.mask.base) + p.mask.offsets[b];
  const float* float_mask = static_cast<const float*>(p.mask.base) + p.mask.offsets[b];
  if (p.mask.row_stride == 0 && row_step == 1) {
    for (int64_t c = 0; c < keys; ++c) {
      const int64_t at = (j0 + c) * p.mask.col_stride;
      float* key_row = s + c * col_step;
      if (is_bool) {
        if (!bool_mask[at]) std::fill_n(key_row, rows, kNegInfF);
      } else if (const float add = float_mask[at]; add != 0.0f) {
        for (int64_t r = 0; r < rows; ++r) key_row[r] += add;
      }
    }
    return;
  }
  const int64_t cs = p.mask.col_stride;
  if (p.mask.row_stride == 0) {
    // Key padding on the backward's rows: the tile's keys are usually all
    // kept (trim_to_kept_keys cut the padded end), and then nothing changes.
    bool changes = false;
    for (int64_t c = 0; c < keys && !changes; ++c)
      changes = is_bool ? !bool_mask[(j0 + c) * cs] : float_mask[(j0 + c) * cs] != 0.0f;
    if (!changes) return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = (q_begin + r) * p.mask.row_stride + j0 * cs;
    float* row = s + r * row_step;
    // The backward's contiguous rows: a blend, which the compiler vectorises.
    if (is_bool && col_step == 1 && cs == 1) {
      for (int64_t c = 0; c < keys; ++c) row[c] = bool_mask[at + c] ? row[c] : kNegInfF;
    } else if (is_bool) {
      for (int64_t c = 0; c < keys; ++c)
        if (!bool_mask[at + c * cs]) row[c * col_step] = kNegInfF;
    } else {
      for (int64_t c = 0; c < keys; ++c) row[c * col_step] += float_mask[at + c * cs];
    }
  }
}

// Everything between the score GEMM and the softmax, in place, for a tile of
// scores: soft-capping, ALiBi, the mask and the causal/window limits. Score
// (query q_begin + r, key j0 + c) sits at s[r·row_step + c·col_step], so the
// same code serves the forward's transposed tile and the backward's row-major
// one. `cap_slope` (optional, same layout) receives d softcap/dx.
inline void adjust_scores(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                          int64_t j0, int64_t keys, float* s, int64_t row_step, int64_t col_step,
                          float* cap_slope = nullptr) {
  if (p.softcap > 0.0) {
    const float cap = static_cast<float>(p.softcap), inv = 1.0f / cap;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < keys; ++c) {
        float& x = s[r * row_step + c * col_step];
        const float t = std::tanh(x * inv);
        x = cap * t;
        if (cap_slope) cap_slope[r * row_step + c * col_step] = 1.0f - t * t;
      }
  }
  for (int64_t r = 0; p.alibi_slopes != nullptr && r < rows; ++r)
    for (int64_t c = 0; c < keys; ++c)
      s[r * row_step + c * col_step] += static_cast<float>(alibi_bias(p, b, q_begin + r, j0 + c));
  if (p.mask.base != nullptr) add_mask(p, b, q_begin, rows, j0, keys, s, row_step, col_step);
  if (!tile_fully_visible(p, q_begin, rows, j0, keys))
    mask_invisible_scores(p, q_begin, rows, j0, keys, s, row_step, col_step);
}

// x <- exp(x − shift) in place; returns Σ of the new values.
template <class Isa>
float exp_shift_sum(float* x, int64_t n, float shift) {
  constexpr int kL = Isa::kLanes;
  const typename Isa::V vs = Isa::set1(shift);
  typename Isa::V acc = Isa::zero();
  int64_t j = 0;
  for (; j + kL <= n; j += kL) {
    const typename Isa::V e = exp<Isa>(Isa::sub(Isa::load(x + j), vs));
    Isa::store(x + j, e);
    acc = Isa::add(acc, e);
  }
  if (j < n) {  // the tail in one masked vector (exp(−inf) is 0)
    const int rest = static_cast<int>(n - j);
    Isa::store_first(x + j, exp<Isa>(Isa::sub(Isa::load_first(x + j, rest), vs)), rest);
    acc = Isa::add(acc, Isa::load_first(x + j, rest));
  }
  return Isa::reduce_add(acc);
}

template <class Isa>
void scale_row(float* x, int64_t n, float factor) {
  constexpr int kL = Isa::kLanes;
  const typename Isa::V f = Isa::set1(factor);
  int64_t j = 0;
  for (; j + kL <= n; j += kL) Isa::store(x + j, Isa::mul(Isa::load(x + j), f));
  for (; j < n; ++j) x[j] *= factor;
}

// Rows [row0, row0 + rows) of problem b's bfloat16 matrix m, widened to
// float32 into dst [rows, cols].
inline void widen_rows(const MatrixOperand& m, int64_t b, int64_t row0, int64_t rows, int64_t cols,
                       float* dst) {
  const uint16_t* src = static_cast<const uint16_t*>(m.base) + m.offsets[b] + row0 * m.row_stride;
  for (int64_t r = 0; r < rows; ++r, src += m.row_stride, dst += cols) {
    if (m.col_stride == 1) {
      for (int64_t c = 0; c < cols; ++c) dst[c] = bfloat16_to_float(src[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[c] = bfloat16_to_float(src[c * m.col_stride]);
    }
  }
}

// Rows [row0, row0 + rows) of problem b's matrix m as float32: read in place,
// or, for bfloat16 inputs, widened into `scratch` [rows, cols] first.
struct FloatRows {
  const float* data;
  int64_t row_stride, col_stride;
};
inline FloatRows float_rows(const SdpaProblem& p, const MatrixOperand& m, int64_t b, int64_t row0,
                            int64_t rows, int64_t cols, float* scratch) {
  if (p.dtype != DType::kBFloat16)
    return {static_cast<const float*>(m.base) + m.offsets[b] + row0 * m.row_stride, m.row_stride,
            m.col_stride};
  widen_rows(m, b, row0, rows, cols, scratch);
  return {scratch, cols, 1};
}

// The end of a forward tile: O = O / l into p.output, lse = m + log l into
// p.lse (−inf and output 0 for a row whose keys were all masked); raises
// p.nonfinite_output if an output is NaN or infinite.
// out_acc: [rows, Ev] unnormalised outputs; m, l: per row.
template <class Isa>
void finish_forward_rows(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                         const float* out_acc, const float* m, const float* l) {
  constexpr int kL = Isa::kLanes;
  // x − x is 0 for a finite x and NaN otherwise, and a sum of such terms is
  // NaN once any is: one test for the whole tile instead of one per element.
  typename Isa::V bad = Isa::zero();
  float bad_tail = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const float* acc = out_acc + r * p.Ev;
    if (p.dtype == DType::kBFloat16) {
      uint16_t* out = static_cast<uint16_t*>(p.output) + output_row_offset(p, b, q_begin + r);
      int64_t e = 0;
      if constexpr (kNativeBf16<Isa>) {
        for (; e + 32 <= p.Ev; e += 32)
          if (Isa::narrow_bf16_32(acc + e, inv, out + e))
            bad_tail = std::numeric_limits<float>::quiet_NaN();
      }
      for (; e < p.Ev; ++e) {
        const uint16_t o = float_to_bfloat16(acc[e] * inv);
        out[e] = o;
        if ((o & 0x7f80u) == 0x7f80u) bad_tail = std::numeric_limits<float>::quiet_NaN();
      }
    } else {
      float* out = static_cast<float*>(p.output) + output_row_offset(p, b, q_begin + r);
      const typename Isa::V scale = Isa::set1(inv);
      int64_t e = 0;
      for (; e + kL <= p.Ev; e += kL) {
        const typename Isa::V o = Isa::mul(Isa::load(acc + e), scale);
        Isa::store(out + e, o);
        bad = Isa::add(bad, Isa::sub(o, o));
      }
      for (; e < p.Ev; ++e) {
        out[e] = acc[e] * inv;
        bad_tail += out[e] - out[e];
      }
    }
  }
  const float any_bad = Isa::reduce_add(bad) + bad_tail;
  if (any_bad != any_bad && p.nonfinite_output)
    p.nonfinite_output->store(true, std::memory_order_relaxed);
  if (p.lse == nullptr) return;
  // The logs a vector of rows at a time (a float log: the backward recomputes
  // P in float from this anyway). l is 1 or more for a row that saw a key
  // (its maximum contributes exp(0)) and 0 for one that saw none.
  double* lse = p.lse + b * p.L + q_begin;
  float log_l[kL];
  for (int64_t r0 = 0; r0 < rows; r0 += kL) {
    const int n = static_cast<int>(std::min<int64_t>(kL, rows - r0));
    Isa::store(log_l, log<Isa>(Isa::load_first(l + r0, n)));
    for (int r = 0; r < n; ++r)
      lse[r0 + r] = l[r0 + r] > 0.0f ? static_cast<double>(m[r0 + r]) + log_l[r]
                                     : -std::numeric_limits<double>::infinity();
  }
}

// Weights of query i over keys [j0, j0 + keys) from its scores s[j·step] and
// the saved log-sum-exp: w = dropout(exp(s − lse)), into out[0 .. keys).
inline void weights_from_scores(const SdpaProblem& p, int64_t b, int64_t i, int64_t j0,
                                int64_t keys, const float* s, int64_t step, float* out) {
  const double lse = p.lse[b * p.L + i];
  if (lse == -std::numeric_limits<double>::infinity()) return;  // fully masked row: stays 0
  const double keep_scale = p.dropout_p > 0.0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  for (int64_t j = 0; j < keys; ++j) {
    const float x = s[j * step];
    const double prob = x == kNegInfF ? 0.0 : std::exp(static_cast<double>(x) - lse);
    out[j] = dropout_kept(p, b, i, j0 + j) ? static_cast<float>(prob * keep_scale) : 0.0f;
  }
}

// Hands out consecutive arrays from one scratch buffer, each rounded up to
// whole 16 floats (64 bytes) so that the next one stays aligned.
struct ScratchCarver {
  float* next;
  float* take(int64_t floats) {
    float* out = next;
    next += round_up(floats, 16);
    return out;
  }
  // An array of another 4- or 2-byte type in the room of `floats` floats.
  template <class T>
  T* take_as(int64_t floats) {
    return reinterpret_cast<T*>(take(floats));
  }
};

// The running softmax statistics of a query tile (per padded query) and its
// unnormalised output rows [rows, Ev]: the part of a forward tile's scratch
// that does not depend on how the products multiply.
struct SoftmaxState {
  float* m;      // running max
  float* l;      // running sum
  float* shift;  // in: this key tile's maxima (when known); then the shift used
  float* alpha;  // rescaling factor of this step
  float* out;

  // Floats of scratch for qp queries and out_floats outputs.
  static int64_t floats(int64_t qp, int64_t out_floats) {
    return round_up(out_floats, 16) + 4 * round_up(qp, 16);
  }
  void carve_from(ScratchCarver& carve, int64_t qp, int64_t out_floats) {
    out = carve.take(out_floats);
    m = carve.take(qp);
    l = carve.take(qp);
    shift = carve.take(qp);
    alpha = carve.take(qp);
  }
  // Before the first key tile: m = −inf and l = 0 for n queries, rows × ev
  // outputs 0.
  void start(int64_t n, int64_t rows, int64_t ev) const {
    std::fill_n(m, n, kNegInfF);
    std::fill_n(l, n, 0.0f);
    std::fill_n(out, rows * ev, 0.0f);
  }
};

// The scratch of one query tile, carved from one buffer: the softmax state
// (m, l, shift, alpha [query_pad]; out [block_q, Ev]) and the operands of the
// float32 products.
template <class Isa>
struct ForwardScratch : SoftmaxState {
  float* q_t;       // [E, query_pad] scale·Qᵀ as B panels
  float* s_t;       // [block_k, query_pad] Sᵀ, then Pᵀ
  float* v_packed;  // [block_k, round_up(Ev, nr)] when V cannot be read in place
  // bfloat16 inputs only (else empty): the tile's rows widened to float32
  float* q_rows;  // [block_q, E]
  float* k_rows;  // [block_k, E]
  float* v_rows;  // [block_k, Ev]

  // Columns of the transposed score tile for a tile of `rows` queries.
  static int64_t query_pad(int64_t rows) {
    constexpr int64_t kL = Isa::kLanes;
    if (rows <= 2 * kL) return round_up(rows, kL);
    if (rows > 3 * kL && rows <= 4 * kL) return 4 * kL;  // two two-vector panels
    return round_up(rows, ForwardShape<Isa>::kQueryPanel);
  }
  static int64_t query_pad(const FlashTiling& t) { return query_pad(t.block_q); }
  static int64_t widened_floats(const SdpaProblem& p, int64_t n) {
    return p.dtype == DType::kBFloat16 ? round_up(n, 16) : 0;
  }
  static int64_t floats(const SdpaProblem& p, const FlashTiling& t) {
    const int64_t qp = query_pad(t);
    return round_up(p.E * qp, 16) + round_up(t.block_k * qp, 16) +
           round_up(t.block_k * round_up(p.Ev, TileShape<Isa>::kNr), 16) +
           SoftmaxState::floats(qp, t.block_q * p.Ev) + widened_floats(p, t.block_q * p.E) +
           widened_floats(p, t.block_k * p.E) + widened_floats(p, t.block_k * p.Ev);
  }
  ForwardScratch(const SdpaProblem& p, const FlashTiling& t, float* base) {
    const int64_t qp = query_pad(t);
    ScratchCarver carve{base};
    q_t = carve.take(p.E * qp);
    s_t = carve.take(t.block_k * qp);
    v_packed = carve.take(t.block_k * round_up(p.Ev, TileShape<Isa>::kNr));
    carve_from(carve, qp, t.block_q * p.Ev);
    q_rows = carve.next;
    carve.next += widened_floats(p, t.block_q * p.E);
    k_rows = carve.next;
    carve.next += widened_floats(p, t.block_k * p.E);
    v_rows = carve.next;
  }
};

// Sᵀ[keys × qp] of the key tile [j0, j0 + keys) into w.s_t, adjusted (masks,
// biases), for either kind of product: Products::key_operand gives the keys
// as the product's A operand, Products::score_panel<Shape> the scores of one
// panel of queries over the keys they may see. col_max (optional, qp floats
// set to −inf) receives each query's maximum score when the product can track
// it; returns false when it could not (the adjustments changed the scores
// after the product) and the caller must scan.
template <class Isa, class Products>
bool transposed_scores(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows, int64_t j0,
                       int64_t keys, const typename Products::Scratch& w, int64_t qp,
                       float* col_max) {
  const bool diagonal = !tile_fully_visible(p, q_begin, rows, j0, keys);
  const bool adjusted =
      p.softcap > 0.0 || p.mask.base != nullptr || p.alibi_slopes != nullptr || diagonal;
  if (adjusted) col_max = nullptr;
  const auto k = Products::key_operand(p, b, j0, keys, w);
  with_query_panel<Isa>(qp, [&](auto shape) {
    using Shape = decltype(shape);
    constexpr int64_t kPanel = Shape::kQueryPanel;
    // A panel of queries past the diagonal of the tile is masked whole from
    // the first key its last query cannot see: not computed, only filled.
    for (int64_t c0 = 0; c0 < rows; c0 += kPanel) {
      const int64_t cols = std::min<int64_t>(kPanel, rows - c0);
      const int64_t extent = diagonal ? keys_seen_by(p, q_begin + c0 + cols - 1, j0, keys) : keys;
      Products::template score_panel<Shape>(p, k, w, qp, c0, cols, extent,
                                            col_max ? col_max + c0 : nullptr);
      for (int64_t j = extent; j < keys; ++j) std::fill_n(w.s_t + j * qp + c0, kPanel, kNegInfF);
    }
  });
  if (adjusted) adjust_scores(p, b, q_begin, rows, j0, keys, w.s_t, 1, qp);
  return col_max != nullptr;
}

// The micro-kernel shape of O += P V: kRows queries × kVecs vectors of values.
template <int kRowsOfQueries, int kVecsOfValues>
struct ValueShape {
  static constexpr int kRows = kRowsOfQueries;
  static constexpr int kVecs = kVecsOfValues;
};

// Runs f(ValueShape<…>{}) with the shape of O += P V for a tile padded to qp
// queries: panels of kKeyRows queries on a narrow tile (they divide it
// evenly), WideShape when `wide` (V in panels of its width), else TileShape.
template <class Isa, class F>
void with_value_shape(int64_t qp, bool wide, F&& f) {
  using Wide = WideShape<Isa>;
  if (qp <= 2 * Isa::kLanes) {
    f(ValueShape<ForwardShape<Isa>::kKeyRows, 2>{});
  } else if (wide) {
    f(ValueShape<Wide::kRows, Wide::kVecs>{});
  } else {
    f(ValueShape<TileShape<Isa>::kMr, 2>{});
  }
}

// O[rows × Ev] += P Vⱼ for the key tile [j0, j0 + keys), for either kind of
// product: product(r0, n, depth) adds P V for the queries [r0, r0 + n) over
// the first `depth` keys. One call covers the whole tile; on a diagonal tile
// P is 0 past the last key a panel's last query sees, so each panel of kRows
// queries stops there.
template <int kRows, class Product>
void accumulate_value_panels(const SdpaProblem& p, int64_t q_begin, int64_t rows, int64_t j0,
                             int64_t keys, bool diagonal, Product&& product) {
  if (!diagonal) {
    product(0, rows, keys);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const int64_t n = std::min<int64_t>(kRows, rows - r0);
    product(r0, n, keys_seen_by(p, q_begin + r0 + n - 1, j0, keys));
  }
}

// One key tile of the online softmax on the transposed tile s_t [keys, qp]
// of scores: Pᵀ = exp(Sᵀ − m') in place (with dropout applied), l and the
// output rows rescaled. `have_max`: st.shift already holds each query's
// maximum over the tile (else it is scanned here).
// The first half of online_softmax_step: each query's new maximum m', the
// shift of this tile's exponentials (st.shift) and the factor α = exp(m − m')
// for what came before (st.alpha). Returns whether some α differs from 1.
template <class Isa>
bool update_softmax_shift(int64_t rows, int64_t keys, int64_t qp, bool have_max, const float* s_t,
                          const SoftmaxState& st) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  if (!have_max) {
    // Online softmax, 16 (or 8, 4) queries per vector: the maximum per query.
    for (int64_t c = 0; c < qp; c += kL) {
      V mx = Isa::load(s_t + c);
      for (int64_t j = 1; j < keys; ++j) mx = Isa::max(mx, Isa::load(s_t + j * qp + c));
      Isa::store(st.shift + c, mx);
    }
  }
  bool rescale = false;
  for (int64_t i = 0; i < qp; ++i) {
    const float m_new = std::max(st.m[i], st.shift[i]);
    // Nothing visible yet: shift by 0 so exp(−inf − 0) = 0. Nothing seen
    // before: O and l are still 0, no rescaling needed.
    st.alpha[i] = st.m[i] == kNegInfF ? 1.0f : std::exp(st.m[i] - m_new);
    st.shift[i] = m_new == kNegInfF ? 0.0f : m_new;
    st.m[i] = m_new;
    rescale |= i < rows && st.alpha[i] != 1.0f;
  }
  return rescale;
}

// O rows times their α (after update_softmax_shift), where it is not 1.
template <class Isa>
void rescale_output_rows(const SdpaProblem& p, int64_t rows, const SoftmaxState& st) {
  for (int64_t r = 0; r < rows; ++r)
    if (st.alpha[r] != 1.0f) scale_row<Isa>(st.out + r * p.Ev, p.Ev, st.alpha[r]);
}

template <class Isa>
void online_softmax_step(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows, int64_t j0,
                         int64_t keys, int64_t qp, bool have_max, float* s_t,
                         const SoftmaxState& st) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  const bool rescale = update_softmax_shift<Isa>(rows, keys, qp, have_max, s_t, st);
  for (int64_t c = 0; c < qp; c += kL) {
    const V shift = Isa::load(st.shift + c);
    V sum = Isa::zero();
    for (int64_t j = 0; j < keys; ++j) {
      float* s = s_t + j * qp + c;
      const V e = exp<Isa>(Isa::sub(Isa::load(s), shift));
      Isa::store(s, e);
      sum = Isa::add(sum, e);
    }
    Isa::store(st.l + c, Isa::fmadd(Isa::load(st.l + c), Isa::load(st.alpha + c), sum));
  }
  if (rescale) rescale_output_rows<Isa>(p, rows, st);
  if (p.dropout_p > 0.0) {
    const float keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t r = 0; r < rows; ++r)
        s_t[j * qp + r] *= dropout_kept(p, b, q_begin + r, j0 + j) ? keep_scale : 0.0f;
  }
}

// The tiled forward pass of a query tile, written once for both kinds of
// products. `Products` (Float32Products below, Bf16Products in
// flash_forward_bf16.h) has the layout of the tile's scratch (Scratch) and
// the steps that depend on how the products multiply: pack the query tile
// (pack_query), the operands of the transposed scores of a key tile
// (key_operand, score_panel: see transposed_scores), the online softmax step
// on them (softmax_step) and O += P Vⱼ (accumulate_values).
template <class Isa, class Products>
void flash_forward_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                        int64_t rows, float* scratch) {
  const typename Products::Scratch w(p, t, scratch);
  const int64_t qp = ForwardScratch<Isa>::query_pad(rows);

  Products::pack_query(p, b, q_begin, rows, w, qp);
  w.start(qp, rows, p.Ev);

  int64_t key_begin, key_end;
  tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  for (int64_t j0 = key_begin, keys; j0 < key_end; j0 += keys) {
    keys = key_tile_end(p, t, q_begin, rows, j0, key_end) - j0;
    std::fill(w.shift, w.shift + qp, kNegInfF);
    const bool have_max =
        transposed_scores<Isa, Products>(p, b, q_begin, rows, j0, keys, w, qp, w.shift);
    Products::softmax_step(p, b, q_begin, rows, j0, keys, qp, have_max, w);
    const bool diagonal = !tile_fully_visible(p, q_begin, rows, j0, keys);
    Products::accumulate_values(p, b, q_begin, rows, j0, keys, qp, diagonal, w);
  }

  finish_forward_rows<Isa>(p, b, q_begin, rows, w.out, w.m, w.l);
}

// The attention weights of a query tile, rebuilt from the log-sum-exp the
// forward pass saved, with the scores computed as flash_forward_tile with the
// same Products computes them: w = dropout(exp(S − lse)), written to
// p.weights.
template <class Isa, class Products>
void flash_weights_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                        int64_t rows, float* scratch) {
  const typename Products::Scratch w(p, t, scratch);
  const int64_t qp = ForwardScratch<Isa>::query_pad(rows);
  float* weights = static_cast<float*>(p.weights) + (b * p.L + q_begin) * p.S;
  std::fill(weights, weights + rows * p.S, 0.0f);
  Products::pack_query(p, b, q_begin, rows, w, qp);
  int64_t key_begin, key_end;
  tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  for (int64_t j0 = key_begin, keys; j0 < key_end; j0 += keys) {
    keys = key_tile_end(p, t, q_begin, rows, j0, key_end) - j0;
    transposed_scores<Isa, Products>(p, b, q_begin, rows, j0, keys, w, qp, nullptr);
    for (int64_t r = 0; r < rows; ++r)
      weights_from_scores(p, b, q_begin + r, j0, keys, w.s_t + r, qp, weights + r * p.S + j0);
  }
}

// The products of the float32 forward: scale·Qᵀ packed once per query tile
// as float panels, K read in place, V read in place when its rows hold whole
// panels (else packed); bfloat16 inputs are widened to float32 first.
template <class Isa>
struct Float32Products {
  using Scratch = ForwardScratch<Isa>;

  // scale·Qᵀ of the tile, packed as panels of qp's width.
  static void pack_query(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                         const Scratch& w, int64_t qp) {
    const FloatRows q = float_rows(p, p.q, b, q_begin, rows, p.E, w.q_rows);
    const float scale = static_cast<float>(p.scale);
    // B element (e, i) = scale·Q[i, e]
    with_query_panel<Isa>(qp, [&](auto shape) {
      pack_b<Isa, decltype(shape)::kQueryPanel>(q.data, q.col_stride, q.row_stride, p.E, rows,
                                                scale, w.q_t);
    });
  }

  // Keys [j0, j0 + keys) as the A operand of Sᵀ = K (scale·Q)ᵀ, read in place.
  static AView key_operand(const SdpaProblem& p, int64_t b, int64_t j0, int64_t keys,
                           const Scratch& w) {
    const FloatRows k = float_rows(p, p.k, b, j0, keys, p.E, w.k_rows);
    return {k.data, k.row_stride, k.col_stride};
  }

  // Sᵀ of the queries [c0, c0 + cols), a panel of Shape's width, over the
  // first `extent` keys.
  template <class Shape>
  static void score_panel(const SdpaProblem& p, const AView& k, const Scratch& w, int64_t qp,
                          int64_t c0, int64_t cols, int64_t extent, float* panel_max) {
    constexpr int64_t kPanel = Shape::kQueryPanel;
    gemm_tiles<Isa, Shape::kKeyRows, Shape::kKeyVecs>(
        extent, cols, p.E, k, Shape::kKeyRows * k.row_stride, BView{w.q_t + c0 * p.E, kPanel},
        p.E * kPanel, w.s_t + c0, qp, false, panel_max);
  }

  static void softmax_step(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                           int64_t j0, int64_t keys, int64_t qp, bool have_max, const Scratch& w) {
    online_softmax_step<Isa>(p, b, q_begin, rows, j0, keys, qp, have_max, w.s_t, w);
  }

  // O[rows × Ev] += P Vⱼ, P read from the transposed tile (A element (i, j) =
  // Pᵀ[j, i], a packed panel with step qp).
  static void accumulate_values(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                                int64_t j0, int64_t keys, int64_t qp, bool diagonal,
                                const Scratch& w) {
    constexpr int kNr = TileShape<Isa>::kNr;
    using Wide = WideShape<Isa>;
    const FloatRows v = float_rows(p, p.v, b, j0, keys, p.Ev, w.v_rows);
    // Packed (into kNr-wide panels) only when V's rows do not hold whole
    // panels; then they cannot hold wide ones either, so the shape is kNr wide.
    const bool packed = !rows_hold_panels<kNr>(v.col_stride, p.Ev);
    if (packed) pack_b<Isa, kNr>(v.data, v.row_stride, v.col_stride, keys, p.Ev, 1.0f, w.v_packed);
    const bool wide = Wide::kUsable && rows_hold_panels<Wide::kNr>(v.col_stride, p.Ev);
    with_value_shape<Isa>(qp, wide, [&](auto shape) {
      using Shape = decltype(shape);
      constexpr int kVecs = Shape::kVecs, kWidth = kVecs * Isa::kLanes;
      const BView vb = packed ? BView{w.v_packed, kNr} : BView{v.data, v.row_stride};
      const int64_t v_panel_stride = packed ? keys * kNr : kWidth;
      accumulate_value_panels<Shape::kRows>(
          p, q_begin, rows, j0, keys, diagonal, [&](int64_t r0, int64_t n, int64_t depth) {
            gemm_tiles<Isa, Shape::kRows, kVecs>(n, p.Ev, depth, AView{w.s_t + r0, 1, qp},
                                                 Shape::kRows, vb, v_panel_stride,
                                                 w.out + r0 * p.Ev, p.Ev, true);
          });
    });
  }
};

}  // namespace
}  // namespace qkv::kernels::simd
