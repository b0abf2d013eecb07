// The forward entries of the amx kernel table (kernels_avx512.cc): attention
// with bfloat16 products on AMX tiles (kernels/simd/amx_tiles.h), softmax and
// every sum in float32 — flash_forward_bf16.h's arithmetic with the two
// products on the tile unit:
//
//   S = scale · Q Kᵀ   a 32 × 32 block of scores per call: A = 32 query rows
//                      (bfloat16, E padded to 32), B = a panel of 32 keys,
//                      pairs along E
//   O += P V           A = 32 rows of P (bfloat16, keys padded to 32),
//                      B = a panel of 32 value columns, pairs along keys
//
// A query tile (the driver's, up to 512 rows: forward_query_block) walks the
// keys in blocks of up to 256; each key block's K and V are packed once into
// panels and then meet the tile's 32-row chunks. Per chunk the scores go
// through the same adjustments as the other kernels (flash_forward.h:
// soft-capping, ALiBi, the mask, causal and window limits), the online
// softmax (running max m and sum l per row, 16 rows to a vector; O rescaled
// when m grows) and P = exp(S − m) rounded to bfloat16; finish_forward_rows
// writes O / l and the log-sum-exp. While the last tile of a problem runs,
// the next problem's rows are asked for into L2 (NextProblemRows).
//
// Problems this does not cover run the avx512_bf16 entries: float32
// products, dropout, and tiles of at most four queries (the few-query
// kernel). The attention weights, when asked for, are rebuilt by
// avx512_bf16's weights_tile from the log-sum-exp written here.
#include <cstring>

#include "kernels/simd/amx_operand_rows.h"
#include "kernels/simd/amx_tiles.h"
#include "kernels/simd/flash_forward_bf16.h"

namespace qkv::kernels {

int64_t avx512_bf16_forward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling);
void avx512_bf16_forward_tile(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                              int64_t q_begin, int64_t rows, float* scratch);

namespace {

using simd::Avx512Bf16;
using V = __m512;
constexpr int64_t kBlock = amx::kBlock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using amx::bf16x16;
using amx::row_as_bf16;
using simd::round_up;

bool runs_on_tiles(const SdpaProblem& p) { return p.bf16_products && p.dropout_p == 0.0; }

// The work memory of a query tile, carved from the driver's scratch (64-byte
// aligned pieces, in floats).
struct Scratch {
  int64_t rows_p, ep, keys_p, evp;  // rows, E, keys of a block, Ev: padded to 32
  uint16_t* q;                      // [rows_p][ep] bfloat16: the tile's queries
  uint16_t* k;                      // [keys_p / 32][ep / 2][32][2]: key panels
  uint16_t* v;                      // [evp / 32][keys_p / 2][32][2]: value panels
  uint16_t* probs;                  // [32][keys_p] bfloat16: P of one chunk
  float* scores;                    // [32][keys_p]: S of one chunk
  float* out;                       // [rows_p][Ev]: unnormalised O
  float* m;                         // [rows_p] running max
  float* l;                         // [rows_p] running sum
  uint16_t* stage;                  // [16][max(ep, evp)] bfloat16 rows being packed

  // base == nullptr: only counts the floats.
  Scratch(const SdpaProblem& p, const FlashTiling& t, float* base)
      : rows_p(round_up(t.block_q, kBlock)),
        ep(round_up(p.E, kBlock)),
        keys_p(round_up(t.block_k, kBlock)),
        evp(round_up(p.Ev, kBlock)) {
    int64_t at = 0;
    auto take = [&](int64_t count) {
      float* piece = base != nullptr ? base + at : nullptr;
      at += round_up(count, 16);
      return piece;
    };
    q = reinterpret_cast<uint16_t*>(take(rows_p * ep / 2));
    k = reinterpret_cast<uint16_t*>(take(keys_p * ep / 2));
    v = reinterpret_cast<uint16_t*>(take(keys_p * evp / 2));
    probs = reinterpret_cast<uint16_t*>(take(kBlock * keys_p / 2));
    scores = take(kBlock * keys_p);
    out = take(rows_p * p.Ev);
    m = take(rows_p);
    l = take(rows_p);
    stage = reinterpret_cast<uint16_t*>(take(16 * std::max(ep, evp) / 2));
    floats = at;
  }
  int64_t floats;
};

// Asks for the cache lines of row `row` of problem b's matrix m (n values):
// the rows of q, k and v are short (E values) and far apart (the heads of a
// [B, L, H, E] view), which the hardware prefetchers do not follow, so each
// row would otherwise wait on memory.
// (kToL2: into L2 only, for rows wanted later.)
template <bool kToL2 = false>
inline void prefetch_row(const MatrixOperand& m, DType dtype, int64_t b, int64_t row, int64_t n) {
  const int64_t size = dtype == DType::kBFloat16 ? 2 : 4;
  const char* at = static_cast<const char*>(m.base) + (m.offsets[b] + row * m.row_stride) * size;
  // A contiguous row a line at a time; a strided one (E a column) an element
  // at a time.
  const int64_t step = m.col_stride == 1 ? 64 : m.col_stride * size;
  for (int64_t i = 0; i < n * m.col_stride * size; i += step)
    _mm_prefetch(at + i, kToL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

// After the last query tile of problem b, the rows that the first tile of
// problem b + 1 reads (its queries, and keys and values where this tile's
// were), asked for into L2 a share at a time.
class NextProblemRows {
 public:
  NextProblemRows(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_end,
                  int64_t key_begin, int64_t key_end)
      : p_(p),
        b_(b + 1),
        rows_(std::min(p.L, t.block_q)),
        key_begin_(key_begin),
        keys_(key_end - key_begin),
        total_(b + 1 < p.problems && q_end == p.L ? rows_ + 2 * keys_ : 0) {}

  // Rows up to share / shares of them.
  void prefetch_share(int64_t share, int64_t shares) {
    const int64_t until = std::min(total_, total_ * share / std::max<int64_t>(shares, 1));
    for (; done_ < until; ++done_) {
      if (done_ < rows_) {
        prefetch_row<true>(p_.q, p_.dtype, b_, done_, p_.E);
      } else if (done_ < rows_ + keys_) {
        prefetch_row<true>(p_.k, p_.dtype, b_, key_begin_ + done_ - rows_, p_.E);
      } else {
        prefetch_row<true>(p_.v, p_.dtype, b_, key_begin_ + done_ - rows_ - keys_, p_.Ev);
      }
    }
  }

 private:
  const SdpaProblem& p_;
  int64_t b_, rows_, key_begin_, keys_, total_;
  int64_t done_ = 0;
};
// Rows ahead that the packing loops prefetch.
constexpr int64_t kPrefetchRows = 12;

// Keys [j0, j0 + keys) of problem b into key panels (B of S = Q Kᵀ: step =
// a pair of E, column = key) and value panels (B of O += P V: step = a pair
// of keys, column = a value element). Padding keys and elements are zero.
void pack_keys_values(const SdpaProblem& p, int64_t b, int64_t j0, int64_t keys, const Scratch& w) {
  const int64_t kp = round_up(keys, kBlock);
  const int64_t width = std::max(w.ep, w.evp);
  // K: pair s of key j at word (panel · ep/2 + s) · 32 + j % 32, 16 keys at a
  // time: their rows of pairs (ep apart in the stage), transposed.
  uint32_t* kw = reinterpret_cast<uint32_t*>(w.k);
  for (int64_t j16 = 0; j16 < kp; j16 += 16) {
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t j = j16 + r;
      if (j + kPrefetchRows < keys) prefetch_row(p.k, p.dtype, b, j0 + j + kPrefetchRows, p.E);
      if (j < keys) {
        row_as_bf16(p.k, p.dtype, b, j0 + j, p.E, w.ep, w.stage + r * w.ep);
      } else {
        std::fill(w.stage + r * w.ep, w.stage + (r + 1) * w.ep, uint16_t{0});
      }
    }
    amx::transpose_rows_into_panels(w.stage, 16, w.ep,
                                    kw + (j16 / kBlock) * (w.ep / 2) * kBlock + j16 % kBlock);
  }
  // V: keys j, j + 1 interleaved: value e of pair s at word
  // ((e / 32) · kp/2 + s) · 32 + e % 32.
  uint32_t* vw = reinterpret_cast<uint32_t*>(w.v);
  uint16_t* r0 = w.stage;
  uint16_t* r1 = w.stage + width;
  for (int64_t j = 0; j < kp; j += 2) {
    for (int t = 0; t < 2; ++t) {
      if (j + t + kPrefetchRows < keys)
        prefetch_row(p.v, p.dtype, b, j0 + j + t + kPrefetchRows, p.Ev);
      uint16_t* r = t == 0 ? r0 : r1;
      if (j + t < keys) {
        row_as_bf16(p.v, p.dtype, b, j0 + j + t, p.Ev, w.evp, r);
      } else {
        std::fill(r, r + w.evp, uint16_t{0});
      }
    }
    for (int64_t e = 0; e < w.evp; e += 16) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + e));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + e));
      // Word i = (lo[i], hi[i]): widen both to 32 bits, hi shifted up.
      const __m512i pairs = _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                            _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
      _mm512_storeu_si512(vw + ((e / kBlock) * (kp / 2) + j / 2) * kBlock + e % kBlock, pairs);
    }
  }
}

// The 16 row sums (kMax: maxima) of the 16 vectors part[i] (row i; rows past
// the group hold the identity), one row per lane: a transpose, then 15
// vertical operations instead of a horizontal reduction per row.
template <bool kMax>
V reduce_rows(__m512i part[16]) {
  amx::transpose_16x16_words(part);
  V total = _mm512_castsi512_ps(part[0]);
  for (int c = 1; c < 16; ++c)
    total = kMax ? _mm512_max_ps(total, _mm512_castsi512_ps(part[c]))
                 : _mm512_add_ps(total, _mm512_castsi512_ps(part[c]));
  return total;
}

// The online softmax over one chunk's block of scores: row r of `rows` has
// `keys` scores at s + r · ld, to be multiplied by scale > 0 (1 when they
// already are). Updates m, l, rescales out, writes P (zeros past keys up to
// kp). The exponentials are exp_nonpositive's (flash_forward_bf16.h): P is
// rounded to bfloat16 next. Rows go 16 at a time, their maxima, sums and
// running statistics one lane each.
void softmax_chunk(const float* s, int64_t ld, int rows, int64_t keys, int64_t kp, float scale,
                   float* m, float* l, float* out, int64_t ev, uint16_t* probs) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (keys % 16)) - 1);
  const V vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf);
  for (int g0 = 0; g0 < rows; g0 += 16) {
    const int group = std::min(16, rows - g0);
    const __mmask16 in_group = static_cast<__mmask16>((1u << group) - 1);
    // The maxima, and which rows hold a NaN: vmaxps (and clang's reductions,
    // IEEE maxNum) may drop a NaN, and a row of NaN scores must give NaN,
    // not a row that saw no key.
    __m512i part[16];
    __mmask16 nan_rows = 0;
    for (int i = 0; i < 16; ++i) {
      V vmax = neg_inf;
      if (i < group) {
        const float* row = s + (g0 + i) * ld;
        __mmask16 nan = 0;
        int64_t j = 0;
        for (; j + 16 <= keys; j += 16) {
          const V x = _mm512_loadu_ps(row + j);
          nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
          vmax = _mm512_max_ps(vmax, x);
        }
        if (j < keys) {
          const V x = _mm512_mask_loadu_ps(vmax, tail, row + j);
          nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
          vmax = _mm512_max_ps(vmax, x);
        }
        if (nan != 0) nan_rows |= static_cast<__mmask16>(1u << i);
      }
      part[i] = _mm512_castps_si512(vmax);
    }
    const V m_old = _mm512_mask_loadu_ps(neg_inf, in_group, m + g0);
    const V m_new = _mm512_mask_blend_ps(
        nan_rows, _mm512_max_ps(_mm512_mul_ps(reduce_rows<true>(part), vscale), m_old),
        _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    // α = exp(m_old − m_new), 0 for rows that saw no key before.
    const __mmask16 unseen = _mm512_cmp_ps_mask(m_old, neg_inf, _CMP_EQ_OQ);
    const V alpha = _mm512_maskz_mov_ps(static_cast<__mmask16>(~unseen),
                                        simd::exp<Avx512Bf16>(_mm512_sub_ps(m_old, m_new)));
    // Rows with every key so far hidden: P = 0, O and l stay 0.
    const __mmask16 empty = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ);
    alignas(64) float m_rows[16], alpha_rows[16];
    _mm512_store_ps(m_rows, m_new);
    _mm512_store_ps(alpha_rows, alpha);
    for (int i = 0; i < 16; ++i) {
      V sum = _mm512_setzero_ps();
      if (i < group) {
        const float* row = s + (g0 + i) * ld;
        uint16_t* prow = probs + (g0 + i) * kp;
        int64_t j = 0;
        if ((empty >> i & 1u) == 0) {
          const V shift = _mm512_set1_ps(-m_rows[i]);
          for (; j + 16 <= keys; j += 16) {
            const V e = simd::exp_nonpositive<Avx512Bf16>(
                _mm512_fmadd_ps(_mm512_loadu_ps(row + j), vscale, shift));
            sum = _mm512_add_ps(sum, e);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(prow + j), bf16x16(e));
          }
          if (j < keys) {
            const V x = _mm512_mask_loadu_ps(neg_inf, tail, row + j);
            const V e = simd::exp_nonpositive<Avx512Bf16>(_mm512_fmadd_ps(x, vscale, shift));
            sum = _mm512_add_ps(sum, e);  // (hidden lanes: exp(−inf) = 0)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(prow + j), bf16x16(e));
            j += 16;
          }
        }
        std::fill(prow + j, prow + kp, uint16_t{0});
      }
      part[i] = _mm512_castps_si512(sum);
    }
    const V l_old = _mm512_mask_loadu_ps(_mm512_setzero_ps(), in_group, l + g0);
    _mm512_mask_storeu_ps(l + g0, in_group,
                          _mm512_add_ps(_mm512_mul_ps(l_old, alpha), reduce_rows<false>(part)));
    _mm512_mask_storeu_ps(m + g0, in_group, m_new);
    for (int i = 0; i < group; ++i) {
      const float a = alpha_rows[i];
      if (a == 1.0f || (empty >> i & 1u) != 0) continue;
      float* o = out + (g0 + i) * ev;
      const V va = _mm512_set1_ps(a);
      int64_t e = 0;
      for (; e + 16 <= ev; e += 16)
        _mm512_storeu_ps(o + e, _mm512_mul_ps(_mm512_loadu_ps(o + e), va));
      for (; e < ev; ++e) o[e] *= a;
    }
  }
}

// One chunk of up to 32 queries (rows of the tile from r0) against the
// packed key block [j0, j0 + keys).
template <bool kTwoHalves>
void chunk_step(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t r0, int rows, int64_t j0,
                int64_t keys, bool adjust, const Scratch& w) {
  const int64_t kp = round_up(keys, kBlock);
  const int64_t ld = w.keys_p;
  const char* q = reinterpret_cast<const char*>(w.q + r0 * w.ep);
  for (int64_t c0 = 0; c0 < kp; c0 += kBlock)
    amx::multiply_block<false, kTwoHalves>(q, w.ep * 2,
                                           reinterpret_cast<const char*>(w.k + c0 * w.ep),
                                           w.ep / kBlock, w.scores + c0, ld * 4);
  // Scores that need no adjusting take the scale inside the softmax's
  // exponent (one pass fewer over them); the adjustments see scaled scores.
  const float scale = static_cast<float>(p.scale);
  const bool fold_scale = !adjust && scale > 0.0f;
  if (!fold_scale) {
    const V vscale = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kp; j += 16)
        _mm512_storeu_ps(w.scores + r * ld + j,
                         _mm512_mul_ps(_mm512_loadu_ps(w.scores + r * ld + j), vscale));
    if (adjust) simd::adjust_scores(p, b, q_begin + r0, rows, j0, keys, w.scores, ld, 1);
  }
  softmax_chunk(w.scores, ld, rows, keys, kp, fold_scale ? scale : 1.0f, w.m + r0, w.l + r0,
                w.out + r0 * p.Ev, p.Ev, w.probs);
  alignas(64) float c[kBlock * kBlock];
  for (int64_t e0 = 0; e0 < w.evp; e0 += kBlock) {
    amx::multiply_block<false, kTwoHalves>(reinterpret_cast<const char*>(w.probs), kp * 2,
                                           reinterpret_cast<const char*>(w.v + e0 * kp),
                                           kp / kBlock, c);
    // O[r, e0:e0 + 32] += c[r]: the columns below Ev, 16 lanes at a time.
    for (int r = 0; r < rows; ++r) {
      float* o = w.out + (r0 + r) * p.Ev + e0;
      for (int h = 0; h < 2 && e0 + 16 * h < p.Ev; ++h) {
        const int lanes = static_cast<int>(std::min<int64_t>(16, p.Ev - e0 - 16 * h));
        Avx512Bf16::store_first(o + 16 * h,
                                _mm512_add_ps(Avx512Bf16::load_first(o + 16 * h, lanes),
                                              _mm512_load_ps(c + r * kBlock + 16 * h)),
                                lanes);
      }
    }
  }
}

}  // namespace

// Each query tile packs the keys and values it meets: tiles of up to 512
// queries pack them once per 512 queries, while at least eight tiles keep
// both cores busy (small batches take smaller tiles).
int64_t amx_forward_query_block(const SdpaProblem& problem) {
  if (!runs_on_tiles(problem)) return 96;
  int64_t block = 512;
  auto tiles = [&](int64_t rows) { return problem.problems * ((problem.L + rows - 1) / rows); };
  while (block > 128 && tiles(block) < 8) block /= 2;
  return block;
}

int64_t amx_forward_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling) {
  return std::max(avx512_bf16_forward_scratch_floats(problem, tiling),
                  Scratch(problem, tiling, nullptr).floats);
}

void amx_forward_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                      int64_t rows, float* scratch) {
  if (!runs_on_tiles(p) || rows <= 4)
    return avx512_bf16_forward_tile(p, t, b, q_begin, rows, scratch);
  const Scratch w(p, t, scratch);
  for (int64_t r = 0; r < round_up(rows, kBlock); ++r) {
    if (r + kPrefetchRows < rows) prefetch_row(p.q, p.dtype, b, q_begin + r + kPrefetchRows, p.E);
    if (r < rows) {
      row_as_bf16(p.q, p.dtype, b, q_begin + r, p.E, w.ep, w.q + r * w.ep);
    } else {
      std::fill(w.q + r * w.ep, w.q + (r + 1) * w.ep, uint16_t{0});
    }
  }
  std::fill(w.out, w.out + rows * p.Ev, 0.0f);
  std::fill(w.m, w.m + rows, kNegInf);
  std::fill(w.l, w.l + rows, 0.0f);
  const bool always_adjust = p.softcap > 0.0 || p.mask.base != nullptr || p.alibi_slopes != nullptr;

  amx::configure_tiles();
  int64_t key_begin, key_end;
  simd::tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  // The next problem's rows, a share per chunk: the driver hands out runs of
  // consecutive items, so this thread most likely takes it next.
  NextProblemRows next(p, t, b, q_begin + rows, key_begin, key_end);
  const int64_t chunks =
      (rows + kBlock - 1) / kBlock * ((key_end - key_begin + t.block_k - 1) / t.block_k);
  int64_t chunk_index = 0;
  for (int64_t j0 = key_begin, keys; j0 < key_end; j0 += keys) {
    keys = simd::key_tile_end(p, t, q_begin, rows, j0, key_end) - j0;
    pack_keys_values(p, b, j0, keys, w);
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
      next.prefetch_share(++chunk_index, chunks);
      const int chunk = static_cast<int>(std::min<int64_t>(kBlock, rows - r0));
      const bool adjust =
          always_adjust || !simd::tile_fully_visible(p, q_begin + r0, chunk, j0, keys);
      if (chunk > 16) {
        chunk_step<true>(p, b, q_begin, r0, chunk, j0, keys, adjust, w);
      } else {
        chunk_step<false>(p, b, q_begin, r0, chunk, j0, keys, adjust, w);
      }
    }
  }
  _tile_release();
  simd::finish_forward_rows<Avx512Bf16>(p, b, q_begin, rows, w.out, w.m, w.l);
}

}  // namespace qkv::kernels
