// The forward pass of a handful of queries against many keys: decoding (one
// new token per head, or the query heads of a GQA group stacked), written
// once for every ISA.
//
// With one to four queries there is almost no arithmetic per byte: each key
// row and each value row is used by those few queries only, so the time is
// the time to read K and V once. The tiled kernel of flash_forward.h would
// pad the queries to a full vector and pack them into panels; here each key
// row is read in place and dotted with each query along E (vectors across
// the head dimension), and each value row is added into the few output rows
// kept in registers, so K and V are read once, prefetched a few rows ahead
// (a step's K and V are cold). The dot products of a vector of keys are
// summed together (one reduction tree for 16 keys, not 16 horizontal sums).
// Over a long cache, problems are split along their keys as well
// (few_query_key_chunks), so that one sequence's few KV heads share the
// threads evenly.
//
// Same mathematics as flash_forward_tile, per tile of keys j:
//   s = q·kⱼ (soft-capped, + ALiBi + mask, −inf outside causal/window)
//   m' = max(m, max s);  p = exp(s − m');  l = e^(m−m')·l + Σp;  o = e^(m−m')·o + Σ p vⱼ
#pragma once

#include "kernels/simd/flash_forward.h"
#include "kernels/simd/flash_forward_bf16.h"

namespace qkv::kernels::simd {
namespace {

// Up to this many queries per problem take the few-query path. With 4 the
// K/V rows are read once for all of them and the work per row is still small
// next to the read (bench/decode_vs_torch.py, bench/attention_vs_torch.py
// decode points).
constexpr int64_t kFewQueries = 4;
static_assert(kFewQueries == KeyChunkState::kRows);

// Whether a tile of `rows` queries takes the few-query path: K and V rows
// must be float32 and contiguous along the head dimension so they can be
// read in place. Float32 inputs with bf16_products take it only when the
// whole problem has few queries (decoding: K and V are read once either way,
// so it keeps float32 products); the last tile of a long prompt does not.
inline bool use_few_query_path(const SdpaProblem& p, int64_t rows) {
  return rows <= kFewQueries && (!p.bf16_products || p.L <= kFewQueries) && p.k.col_stride == 1 &&
         p.v.col_stride == 1 && p.dtype == DType::kFloat32;
}

// How many key (value) rows ahead each key (value) row of the loops below is
// prefetched. The K and V rows of a decoding step are cold: since this layer
// last ran, the rest of the model's weights streamed through the caches, and
// one row at a time leaves the loads waiting on memory (docs/benchmarks.md).
constexpr int64_t kRowsAhead = 8;

// Prefetches the n floats from `row` (each of their cache lines).
inline void prefetch_floats(const float* row, int64_t n) {
  for (int64_t e = 0; e < n; e += 16) __builtin_prefetch(row + e, 0, 3);
}

// Prefetches n floats of each of the first min(kRowsAhead, rows) rows.
inline void prefetch_first_rows(const float* first, int64_t step, int64_t rows, int64_t n) {
  for (int64_t j = 0; j < std::min(kRowsAhead, rows); ++j) prefetch_floats(first + j * step, n);
}

// Σₑ a[e]·b[e] over n floats.
template <class Isa>
float dot(const float* a, const float* b, int64_t n) {
  constexpr int kL = Isa::kLanes;
  typename Isa::V acc = Isa::zero();
  int64_t e = 0;
  for (; e + kL <= n; e += kL) acc = Isa::fmadd(Isa::load(a + e), Isa::load(b + e), acc);
  float sum = Isa::reduce_add(acc);
  for (; e < n; ++e) sum += a[e] * b[e];
  return sum;
}

// out[r, e0 + e] += Σⱼ p[r·ld + j] · v[j·v_step + e0 + e] over kVecs vectors of
// columns from e0, for kRows rows: the outputs stay in registers across all
// keys (updating them in memory per key chains every key behind the previous
// one's store).
template <class Isa, int kRows, int kVecs>
void add_weighted_values_block(const float* p, int64_t ld, const float* v, int64_t v_step,
                               int64_t keys, float* out, int64_t out_step, int64_t e0) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  prefetch_first_rows(v + e0, v_step, keys, kVecs * kL);
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) acc[r][c] = Isa::load(out + r * out_step + e0 + c * kL);
  for (int64_t j = 0; j < keys; ++j) {
    const float* vj = v + j * v_step + e0;
    if (j + kRowsAhead < keys) prefetch_floats(vj + kRowsAhead * v_step, kVecs * kL);
    V x[kVecs];
    for (int c = 0; c < kVecs; ++c) x[c] = Isa::load(vj + c * kL);
    for (int r = 0; r < kRows; ++r) {
      const V pr = Isa::set1(p[r * ld + j]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] = Isa::fmadd(pr, x[c], acc[r][c]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) Isa::store(out + r * out_step + e0 + c * kL, acc[r][c]);
}

// out[r, :] += Σⱼ p[r·ld + j] · v[j·v_step, :] for kRows rows and ev columns.
template <class Isa, int kRows>
void add_weighted_values_rows(const float* p, int64_t ld, const float* v, int64_t v_step,
                              int64_t keys, float* out, int64_t ev) {
  constexpr int kL = Isa::kLanes;
  int64_t e = 0;
  for (; e + 4 * kL <= ev; e += 4 * kL)
    add_weighted_values_block<Isa, kRows, 4>(p, ld, v, v_step, keys, out, ev, e);
  for (; e + kL <= ev; e += kL)
    add_weighted_values_block<Isa, kRows, 1>(p, ld, v, v_step, keys, out, ev, e);
  for (; e < ev; ++e)
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.0f;
      for (int64_t j = 0; j < keys; ++j) sum += p[r * ld + j] * v[j * v_step + e];
      out[r * ev + e] += sum;
    }
}

// O[rows, ev] += P[rows, keys] V[keys, ev] for 1 … kFewQueries rows.
template <class Isa>
void add_weighted_values(int64_t rows, const float* p, int64_t ld, const float* v, int64_t v_step,
                         int64_t keys, float* out, int64_t ev) {
  switch (rows) {
    case 1:
      return add_weighted_values_rows<Isa, 1>(p, ld, v, v_step, keys, out, ev);
    case 2:
      return add_weighted_values_rows<Isa, 2>(p, ld, v, v_step, keys, out, ev);
    case 3:
      return add_weighted_values_rows<Isa, 3>(p, ld, v, v_step, keys, out, ev);
    default:
      return add_weighted_values_rows<Isa, 4>(p, ld, v, v_step, keys, out, ev);
  }
}

template <class Isa>
float row_max(const float* x, int64_t n) {
  constexpr int kL = Isa::kLanes;
  typename Isa::V mx = Isa::set1(kNegInfF);
  int64_t j = 0;
  for (; j + kL <= n; j += kL) mx = Isa::max(mx, Isa::load(x + j));
  float m = Isa::reduce_max(mx);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// scale·q of rows [q_begin, q_begin + rows), row by row: q_scaled [rows, E].
inline void scaled_query_rows(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                              float* q_scaled) {
  const float* q = static_cast<const float*>(p.q.base) + p.q.offsets[b];
  const float scale = static_cast<float>(p.scale);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < p.E; ++e)
      q_scaled[r * p.E + e] = scale * q[(q_begin + r) * p.q.row_stride + e * p.q.col_stride];
}

// s[j, j + kL) = q·k_j … q·k_(j+kL−1) over n floats, for a vector of kL keys
// (rows k_step apart): each key's products summed in a vector, then the kL
// vectors reduced together (Isa::reduce_lanes), where one horizontal sum per
// key and query cost more than the products themselves. kVecs > 0: n =
// kVecs·kL, q held in registers; 0: any n.
template <class Isa, int kVecs>
void dot_vector_of_keys(const float* q, const float* k, int64_t k_step, int64_t n, float* s) {
  constexpr int kL = Isa::kLanes;
  using V = typename Isa::V;
  V acc[kL];
  if constexpr (kVecs > 0) {
    V qv[kVecs];
    for (int v = 0; v < kVecs; ++v) qv[v] = Isa::load(q + v * kL);
    for (int i = 0; i < kL; ++i) {
      const float* ki = k + i * k_step;
      V sum = Isa::mul(qv[0], Isa::load(ki));  // a·b + 0 = a·b: no zeroing
      for (int v = 1; v < kVecs; ++v) sum = Isa::fmadd(qv[v], Isa::load(ki + v * kL), sum);
      acc[i] = sum;
    }
  } else {
    for (int i = 0; i < kL; ++i) acc[i] = Isa::zero();
    for (int64_t e = 0; e < n; e += kL) {
      const int count = static_cast<int>(std::min<int64_t>(kL, n - e));
      const V qe = Isa::load_first(q + e, count);
      for (int i = 0; i < kL; ++i)
        acc[i] = Isa::fmadd(qe, Isa::load_first(k + i * k_step + e, count), acc[i]);
    }
  }
  Isa::store(s, Isa::reduce_lanes(acc));
}

using DotKeysKernel = void (*)(const float*, const float*, int64_t, int64_t, float*);

// dot_vector_of_keys for head dim n: q in registers where n is 1, 2, 4 or 8
// vectors.
template <class Isa>
DotKeysKernel dot_keys_kernel(int64_t n) {
  constexpr int kL = Isa::kLanes;
  switch (n % kL == 0 ? n / kL : 0) {
    case 1:
      return &dot_vector_of_keys<Isa, 1>;
    case 2:
      return &dot_vector_of_keys<Isa, 2>;
    case 4:
      return &dot_vector_of_keys<Isa, 4>;
    case 8:
      return &dot_vector_of_keys<Isa, 8>;
    default:
      return &dot_vector_of_keys<Isa, 0>;
  }
}

// s[r, j] = (scale·q_r)·k_(j0+j), adjusted (masks, biases, limits); s has row step ld.
template <class Isa>
void few_query_scores(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows, int64_t j0,
                      int64_t keys, const float* q_scaled, float* s, int64_t ld) {
  constexpr int kL = Isa::kLanes;
  const float* k = static_cast<const float*>(p.k.base) + p.k.offsets[b] + j0 * p.k.row_stride;
  const int64_t step = p.k.row_stride;
  prefetch_first_rows(k, step, keys, p.E);
  const DotKeysKernel dot_keys = dot_keys_kernel<Isa>(p.E);
  int64_t j = 0;
  for (; j + kL <= keys; j += kL) {
    for (int64_t i = j + kRowsAhead; i < std::min(j + kRowsAhead + kL, keys); ++i)
      prefetch_floats(k + i * step, p.E);
    for (int64_t r = 0; r < rows; ++r)
      dot_keys(q_scaled + r * p.E, k + j * step, step, p.E, s + r * ld + j);
  }
  for (; j < keys; ++j)
    for (int64_t r = 0; r < rows; ++r)
      s[r * ld + j] = dot<Isa>(q_scaled + r * p.E, k + j * step, p.E);
  if (p.softcap > 0.0 || p.mask.base != nullptr || p.alibi_slopes != nullptr ||
      !tile_fully_visible(p, q_begin, rows, j0, keys))
    adjust_scores(p, b, q_begin, rows, j0, keys, s, ld, 1);
}

// The keys [key_begin, key_end) of output rows [q_begin, q_begin + rows) of
// problem b (rows ≤ kFewQueries) into their running softmax state m, l
// [rows] and unnormalised outputs out [rows, Ev]: q_scaled holds scale·q row
// by row, s [rows, t.block_k] takes the scores.
template <class Isa>
void few_query_keys(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                    int64_t rows, int64_t key_begin, int64_t key_end, const float* q_scaled,
                    float* s_tile, float* m, float* l, float* out) {
  const int64_t ld = t.block_k;  // row step of the score tile
  const float keep_scale = p.dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 1.0f;
  const float* v = static_cast<const float*>(p.v.base) + p.v.offsets[b];
  for (int64_t j0 = key_begin; j0 < key_end; j0 += t.block_k) {
    const int64_t keys = std::min<int64_t>(t.block_k, key_end - j0);
    few_query_scores<Isa>(p, b, q_begin, rows, j0, keys, q_scaled, s_tile, ld);

    for (int64_t r = 0; r < rows; ++r) {
      float* s = s_tile + r * ld;
      const float m_new = std::max(m[r], row_max<Isa>(s, keys));
      // Nothing visible yet: shift by 0 so exp(−inf − 0) = 0, and keep o as is.
      const float alpha = m[r] == kNegInfF ? 1.0f : std::exp(m[r] - m_new);
      l[r] = alpha * l[r] + exp_shift_sum<Isa>(s, keys, m_new == kNegInfF ? 0.0f : m_new);
      m[r] = m_new;
      if (alpha != 1.0f) scale_row<Isa>(out + r * p.Ev, p.Ev, alpha);
      if (p.dropout_p > 0.0)
        for (int64_t j = 0; j < keys; ++j)
          s[j] *= dropout_kept(p, b, q_begin + r, j0 + j) ? keep_scale : 0.0f;
    }

    add_weighted_values<Isa>(rows, s_tile, ld, v + j0 * p.v.row_stride, p.v.row_stride, keys, out,
                             p.Ev);
  }
}

// Output rows [q_begin, q_begin + rows) of problem b, rows ≤ kFewQueries.
// Uses the scratch of ForwardScratch: q_t holds scale·q row by row, s_t the
// scores [rows, block_k], out the unnormalised outputs [rows, Ev].
template <class Isa>
void few_query_forward_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                            int64_t rows, float* scratch) {
  const ForwardScratch<Isa> w(p, t, scratch);
  scaled_query_rows(p, b, q_begin, rows, w.q_t);
  w.start(rows, rows, p.Ev);
  int64_t key_begin, key_end;
  tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  few_query_keys<Isa>(p, t, b, q_begin, rows, key_begin, key_end, w.q_t, w.s_t, w.m, w.l, w.out);
  finish_forward_rows<Isa>(p, b, q_begin, rows, w.out, w.m, w.l);
}

// Decoding over a long cache with fewer problems than threads (one sequence's
// few KV heads) leaves threads idle: such problems are split along their
// keys instead. Chunk c of n takes the c-th n-th of the keys the tile sees,
// keeping its own softmax state (KeyChunkState), and the chunks are then
// merged as the key tiles of one pass would rescale each other:
//   m = max m_c,  l = Σ e^(m_c − m)·l_c,  o = Σ e^(m_c − m)·o_c.
// n depends on the problem only, never on the thread count, so the result
// is the same on any number of threads.

// Keys per chunk: fewer do not repay a chunk's own setup and merge.
constexpr int64_t kKeysPerChunk = 512;
constexpr int64_t kMaxKeyChunks = 16;
// At most this many (problem, chunk) items: many problems keep the threads
// busy without splits, and the chunk states stay small.
constexpr int64_t kMaxChunkItems = 256;

// Chunks for the problems p: more than 1 when every query tile takes the
// few-query path (at most kFewQueries queries, float32), the last query
// sees at least 2 · kKeysPerChunk keys and there are at most
// kMaxChunkItems / 2 problems; the attention weights, when asked for, keep
// the one-pass kernel.
template <class Isa>
int64_t few_query_key_chunks(const SdpaProblem& p) {
  if (p.problems < 1 || p.L > kFewQueries || !use_few_query_path(p, p.L) || p.weights != nullptr)
    return 1;
  int64_t begin, end;
  visible_keys(p, p.L - 1, &begin, &end);
  const int64_t most = std::min(kMaxKeyChunks, kMaxChunkItems / p.problems);
  return std::max<int64_t>(1, std::min((end - begin) / kKeysPerChunk, most));
}

// Floats of per-thread scratch of few_query_key_chunk: scale·q and the scores.
template <class Isa>
int64_t few_query_chunk_scratch_floats(const SdpaProblem& p, const FlashTiling& t) {
  return round_up(kFewQueries * p.E, 16) + kFewQueries * t.block_k;
}

// Chunk `chunk` of `chunks` of the keys that rows [q_begin, q_begin + rows)
// of problem b see, into `state` (KeyChunkState's layout).
template <class Isa>
void few_query_key_chunk(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                         int64_t rows, int64_t chunk, int64_t chunks, float* scratch,
                         float* state) {
  const KeyChunkState s(p, state);
  float* q_scaled = scratch;
  float* s_tile = scratch + round_up(kFewQueries * p.E, 16);
  scaled_query_rows(p, b, q_begin, rows, q_scaled);
  std::fill_n(s.m, rows, kNegInfF);
  std::fill_n(s.l, rows, 0.0f);
  std::fill_n(s.out, rows * p.Ev, 0.0f);
  int64_t key_begin, key_end;
  tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  const int64_t keys = std::max<int64_t>(key_end - key_begin, 0);
  few_query_keys<Isa>(p, t, b, q_begin, rows, key_begin + keys * chunk / chunks,
                      key_begin + keys * (chunk + 1) / chunks, q_scaled, s_tile, s.m, s.l, s.out);
}

// Merges the `chunks` states from `states` (state_floats apart) into the
// first and finishes the rows from it (finish_forward_rows).
template <class Isa>
void few_query_finish_chunks(const SdpaProblem& p, int64_t b, int64_t q_begin, int64_t rows,
                             int64_t chunks, float* states, int64_t state_floats) {
  const KeyChunkState first(p, states);
  for (int64_t r = 0; r < rows; ++r) {
    float m = kNegInfF;
    for (int64_t c = 0; c < chunks; ++c)
      m = std::max(m, KeyChunkState(p, states + c * state_floats).m[r]);
    // The first chunk rescaled to m, then each other one added at its scale:
    // chunks that saw no key (m_c = −inf) add nothing; every other one is
    // added even where its factor underflows to 0, so that a NaN among its
    // outputs (a NaN value) or m_c reaches the row's output as in one pass.
    const auto factor = [&](float m_c) { return m_c == kNegInfF ? 0.0f : std::exp(m_c - m); };
    float* out = first.out + r * p.Ev;
    const float f0 = factor(first.m[r]);
    first.l[r] *= f0;
    scale_row<Isa>(out, p.Ev, f0);
    for (int64_t c = 1; c < chunks; ++c) {
      const KeyChunkState s(p, states + c * state_floats);
      if (s.m[r] == kNegInfF) continue;
      const float f = factor(s.m[r]);
      first.l[r] += f * s.l[r];
      const float* o = s.out + r * p.Ev;
      for (int64_t e = 0; e < p.Ev; ++e) out[e] += f * o[e];
    }
    first.m[r] = m;
  }
  finish_forward_rows<Isa>(p, b, q_begin, rows, first.out, first.m, first.l);
}

template <class Isa>
constexpr KeyChunkKernels kKeyChunkKernels = {
    &few_query_key_chunks<Isa>, &few_query_chunk_scratch_floats<Isa>, &few_query_key_chunk<Isa>,
    &few_query_finish_chunks<Isa>};

// The weights of those rows, rebuilt from the saved log-sum-exp with the
// scores computed exactly as few_query_forward_tile computed them (the same
// rounding as the log-sum-exp, so each row sums to 1 as closely as the tiled
// kernel's).
template <class Isa>
void few_query_weights_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                            int64_t rows, float* scratch) {
  const ForwardScratch<Isa> w(p, t, scratch);
  const int64_t ld = t.block_k;
  float* weights = static_cast<float*>(p.weights) + (b * p.L + q_begin) * p.S;
  std::fill(weights, weights + rows * p.S, 0.0f);
  scaled_query_rows(p, b, q_begin, rows, w.q_t);
  int64_t key_begin, key_end;
  tile_key_range(p, b, q_begin, rows, &key_begin, &key_end);
  for (int64_t j0 = key_begin; j0 < key_end; j0 += t.block_k) {
    const int64_t keys = std::min<int64_t>(t.block_k, key_end - j0);
    few_query_scores<Isa>(p, b, q_begin, rows, j0, keys, w.q_t, w.s_t, ld);
    for (int64_t r = 0; r < rows; ++r)
      weights_from_scores(p, b, q_begin + r, j0, keys, w.s_t + r * ld, 1, weights + r * p.S + j0);
  }
}

// Floats of per-thread scratch for forward_tile and weights_tile: a problem
// with bf16_products may also send tiles of few queries to the float32 path.
template <class Isa>
int64_t forward_scratch_floats(const SdpaProblem& p, const FlashTiling& t) {
  const int64_t f32 = ForwardScratch<Isa>::floats(p, t);
  return p.bf16_products ? std::max(f32, Bf16ForwardScratch<Isa>::floats(p, t)) : f32;
}

// The kernels of the path a query tile of `rows` queries takes: the
// few-query path for decoding-sized tiles, the tiled kernel otherwise (with
// bfloat16 products when asked). Its weights are rebuilt by the same path as
// its forward pass, so that they match the saved log-sum-exp.
using QueryTileKernel = void (*)(const SdpaProblem&, const FlashTiling&, int64_t b, int64_t q_begin,
                                 int64_t rows, float* scratch);
struct ForwardPath {
  QueryTileKernel forward, weights;
};
template <class Isa>
ForwardPath forward_path(const SdpaProblem& p, int64_t rows) {
  if (use_few_query_path(p, rows))
    return {few_query_forward_tile<Isa>, few_query_weights_tile<Isa>};
  if (p.bf16_products)
    return {flash_forward_tile<Isa, Bf16Products<Isa>>, flash_weights_tile<Isa, Bf16Products<Isa>>};
  return {flash_forward_tile<Isa, Float32Products<Isa>>,
          flash_weights_tile<Isa, Float32Products<Isa>>};
}

// The forward pass of a query tile.
template <class Isa>
void forward_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                  int64_t rows, float* scratch) {
  forward_path<Isa>(p, rows).forward(p, t, b, q_begin, rows, scratch);
}

// The weights of a query tile, by the same path as its forward pass.
template <class Isa>
void weights_tile(const SdpaProblem& p, const FlashTiling& t, int64_t b, int64_t q_begin,
                  int64_t rows, float* scratch) {
  forward_path<Isa>(p, rows).weights(p, t, b, q_begin, rows, scratch);
}

}  // namespace
}  // namespace qkv::kernels::simd
