// Choosing the kernel table once per process, and the threaded driver of the
// fused forward pass (OpenMP over (problem, query tile)).
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/fused_attention.h"
#include "kernels/interrupt.h"
#include "kernels/simd/tile_gemm.h"
#include "kernels/thread_policy.h"
#include "kernels/thread_scratch.h"
#include "qkv/error.h"

namespace qkv::kernels {

extern const KernelTable kAmxKernels;
extern const KernelTable kAvx512Bf16Kernels;
extern const KernelTable kAvx512Kernels;
extern const KernelTable kAvx2Kernels;
extern const KernelTable kPortableKernels;

namespace {
// Fastest first, with the level each needs.
constexpr std::array<IsaTable<KernelTable>, 5> kTables = {{{Isa::kAmx, &kAmxKernels},
                                                           {Isa::kAvx512Bf16, &kAvx512Bf16Kernels},
                                                           {Isa::kAvx512, &kAvx512Kernels},
                                                           {Isa::kAvx2, &kAvx2Kernels},
                                                           {Isa::kPortable, &kPortableKernels}}};

std::atomic<const KernelTable*> g_override{nullptr};
}  // namespace

std::vector<const KernelTable*> supported_kernel_tables() {
  return tables_within(kTables, supported_isas().front());
}

const KernelTable& active_kernel_table() {
  const KernelTable* forced = g_override.load(std::memory_order_relaxed);
  if (forced != nullptr) return *forced;
  static const auto by_level =
      first_within_each_level(kTables, [](const KernelTable&) { return true; });
  return *by_level[static_cast<int>(isa_ceiling())];
}

void override_kernel_table(const KernelTable* table) {
  g_override.store(table, std::memory_order_relaxed);
}

const RowKernels& active_row_kernels() { return *active_kernel_table().rows; }

namespace {

// Tile sizes: bench/bench_kernels.cc (tile sweep) chose 96 query rows and
// 256 keys: the score tile (96 KB) and packed K/V stay in L2.
constexpr int64_t kBlockQ = 96;
constexpr int64_t kBlockK = 256;
// Below this many multiply-adds a call runs on one thread: the fork/join of
// an OpenMP region costs more than it saves (bench/bench_kernels, small shapes).
constexpr double kParallelMinFlops = 5.0e5;

int64_t query_block(const SdpaProblem& p, const KernelTable& table) {
  return table.forward_query_block != nullptr ? table.forward_query_block(p) : kBlockQ;
}

FlashTiling choose_tiling(const SdpaProblem& p, int64_t block_q) {
  return {std::min<int64_t>(block_q, p.L), std::min<int64_t>(kBlockK, p.S)};
}

struct ScratchBuffer {
  explicit ScratchBuffer(int64_t floats)
      : data(static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t(64)))) {}
  ~ScratchBuffer() { ::operator delete[](data, std::align_val_t(64)); }
  float* data;
};

// The calling thread's buffer for the chunk states of sdpa_forward_key_chunks,
// kept from call to call (a warm decoding step allocates nothing).
float* chunk_states(int64_t floats) {
  thread_local std::unique_ptr<ScratchBuffer> buffer;
  thread_local int64_t size = 0;
  if (floats > size) {
    size = floats + floats / 2;
    buffer = std::make_unique<ScratchBuffer>(size);
  }
  return buffer->data;
}

// Few-query problems split into `chunks` along their keys (KeyChunkKernels):
// the threads share the (problem, chunk) items, each into its own state, then
// the problems, merging their chunks and writing their rows.
void sdpa_forward_key_chunks(const SdpaProblem& p, const KeyChunkKernels& k, const FlashTiling& t,
                             int64_t chunks) {
  const int64_t state_floats = KeyChunkState::floats(p);
  const int64_t items = p.problems * chunks;
  float* states = chunk_states(items * state_floats);
  const int64_t scratch_floats = k.scratch_floats(p, t);
  auto forward = [&](int64_t item, float* scratch) {
    k.forward(p, t, item / chunks, 0, p.L, item % chunks, chunks, scratch,
              states + item * state_floats);
  };
  auto finish = [&](int64_t b) {
    k.finish(p, b, 0, p.L, chunks, states + b * chunks * state_floats, state_floats);
  };
  const double flops = static_cast<double>(p.problems) * p.L * p.S * (p.E + p.Ev);
  if (flops < kParallelMinFlops) {
    float* scratch = thread_scratch(scratch_floats);
    for (int64_t item = 0; item < items; ++item) forward(item, scratch);
    for (int64_t b = 0; b < p.problems; ++b) finish(b);
    return;
  }
  InterruptPoll poll;
#pragma omp parallel
  {
    float* scratch = thread_scratch(scratch_floats);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item)
      if (!poll.stop()) forward(item, scratch);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < p.problems; ++b)
      if (!poll.stop()) finish(b);
  }
  poll.throw_if_stopped("scaled_dot_product_attention");
}

}  // namespace

// The query tiles of one problem: whole blocks, then the rest cut at a
// multiple of the panel, so that the last tile pads its score panel as little
// as possible (80 queries: 48 + 32, not 80 padded to 96). A rest of up to four
// vectors (a third more than a panel: 64 queries on AVX-512) stays one tile,
// which the kernel pads to whole vectors. Computed, not stored: a decoding
// step allocates nothing.
struct QueryTiles {
  int64_t L, block_q, whole_blocks, split;  // split: rows of the panel-cut tile, or 0

  QueryTiles(int64_t L, int64_t block_q, int64_t panel)
      : L(L), block_q(block_q), whole_blocks(L / block_q) {
    const int64_t rest = L - whole_blocks * block_q;
    split = rest <= panel + panel / 3 ? 0 : rest / panel * panel;
    // Nor is a sliver of less than a vector (a third of the panel) cut off:
    // it would not save its padding.
    if (rest - split < panel / 3) split = 0;
  }
  int64_t count() const { return whole_blocks + (split > 0) + (L > whole_blocks * block_q); }
  // Tile i as (first query, rows).
  std::pair<int64_t, int64_t> operator[](int64_t i) const {
    if (i < whole_blocks) return {i * block_q, block_q};
    const int64_t begin = whole_blocks * block_q;
    if (split > 0 && i == whole_blocks) return {begin, split};
    return {begin + split, L - begin - split};
  }
};

void sdpa_forward_fused(const SdpaProblem& p, const KernelTable& table) {
  adapt_default_threads();
  const int64_t block_q = query_block(p, table);
  const FlashTiling t = choose_tiling(p, block_q);
  const QueryTiles tiles(p.L, block_q, table.query_panel);
  const int64_t q_tiles = tiles.count();
  const int64_t chunks = table.key_chunks != nullptr ? table.key_chunks->chunks(p) : 1;
  if (chunks > 1) {
    sdpa_forward_key_chunks(p, *table.key_chunks, t, chunks);
    return;
  }
  const int64_t items = p.problems * q_tiles;
  const int64_t scratch_floats = table.forward_scratch_floats(p, t);
  const double flops = static_cast<double>(p.problems) * p.L * p.S * (p.E + p.Ev);
  auto run = [&](int64_t item, float* scratch) {
    const int64_t b = item / q_tiles;
    const auto [q_begin, rows] = tiles[item % q_tiles];
    table.forward_tile(p, t, b, q_begin, rows, scratch);
    if (p.weights != nullptr) table.weights_tile(p, t, b, q_begin, rows, scratch);
  };
  if (flops < kParallelMinFlops) {
    // Not even an inactive OpenMP region: a decoding step is a few microseconds.
    float* scratch = thread_scratch(scratch_floats);
    for (int64_t item = 0; item < items; ++item) run(item, scratch);
    return;
  }
  InterruptPoll poll;
#pragma omp parallel if (items > 1)
  {
    float* scratch = thread_scratch(scratch_floats);
    // Guided: runs of consecutive items, shorter towards the end for the
    // balance, so that a kernel may prefetch the next item's rows.
#pragma omp for schedule(guided)
    for (int64_t item = 0; item < items; ++item)
      if (!poll.stop()) run(item, scratch);
  }
  poll.throw_if_stopped("scaled_dot_product_attention");
}

}  // namespace qkv::kernels

namespace qkv::kernels {

namespace {

// Backward tiles: 96 queries × 192 keys (four 48-wide panels), for float32
// and for bfloat16 on tables without a key block of their own (AMX has one).
// Each key tile streams all of Q, dO and dQ once, so long sequences want wide
// key tiles; 192 keeps one step's tiles within L2 up to E = 128
// (docs/benchmarks.md).
constexpr int64_t kBackwardBlockQ = 96;
constexpr int64_t kBackwardBlockK = 192;

// D = rowsum(dO ∘ O) for every query row, in float64. Eight partial sums: one
// running sum would make every addition wait for the one before (~4 cycles).
// T: float, or uint16_t for bfloat16 operands (O then is bfloat16 too).
template <class T>
std::vector<double> output_gradient_dots(const SdpaBackwardProblem& bp) {
  const SdpaProblem& p = bp.forward;
  std::vector<double> row_dot(static_cast<size_t>(p.problems * p.L));
  const T* out = static_cast<const T*>(p.output);
  const T* go_base = static_cast<const T*>(bp.grad_output.base);
  const int64_t cs = bp.grad_output.col_stride;
  auto value = [](T x) -> double {
    if constexpr (std::is_same_v<T, float>) {
      return x;
    } else {
      return bfloat16_to_float(x);
    }
  };
  const int64_t rows = p.problems * p.L;
#pragma omp parallel for schedule(static) if (rows * p.Ev >= kParallelMinFlops)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / p.L, i = row % p.L;
    const T* go = go_base + bp.grad_output.offsets[b] + i * bp.grad_output.row_stride;
    const T* o = out + output_row_offset(p, b, i);
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t e = 0;
    for (; e + 8 <= p.Ev; e += 8)
      for (int j = 0; j < 8; ++j) part[j] += value(go[(e + j) * cs]) * value(o[e + j]);
    for (int j = 0; e < p.Ev; ++e, ++j) part[j] += value(go[e * cs]) * value(o[e]);
    row_dot[row] =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  }
  return row_dot;
}

std::atomic<int> bf16_backward_override{-1};

bool bf16_backward_enabled() {
  const int forced = bf16_backward_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced != 0;
  static const bool enabled = [] {
    const char* env = std::getenv("QKV_BF16_BACKWARD");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

}  // namespace

bool runs_bf16_backward(const SdpaBackwardProblem& bp, const KernelTable& table) {
  const SdpaProblem& p = bp.forward;
  // A float32 problem of at most four queries (kFewQueries) with contiguous
  // K and V rows ran the forward's few-query kernel in float32 products: its
  // log-sum-exp belongs to those scores, so the backward keeps them too.
  const bool float32_forward = p.L <= 4 && p.k.col_stride == 1 && p.v.col_stride == 1;
  const bool operands = p.dtype == DType::kFloat32 ||
                        (p.dtype == DType::kBFloat16 && table.bf16_backward_reads_bfloat16);
  return p.bf16_products && operands && !float32_forward && p.dropout_p == 0.0 &&
         bp.grad_scores == nullptr && bf16_backward_enabled();
}

void override_bf16_backward(int enabled) { bf16_backward_override.store(enabled); }

void sdpa_backward_fused(const SdpaBackwardProblem& bp, const KernelTable& table) {
  const SdpaProblem& p = bp.forward;
  const bool bf16 = runs_bf16_backward(bp, table);
  if (p.dtype != DType::kFloat32 && !bf16)
    throw Error(ErrorKind::kValue, std::string("sdpa_backward_fused: kernel table ") + table.name +
                                       " cannot run this bfloat16 problem (the op widens it)");
  const int64_t block_k = bf16 && table.bf16_backward_key_block != nullptr
                              ? table.bf16_backward_key_block(p)
                              : kBackwardBlockK;
  const FlashTiling t{std::min<int64_t>(kBackwardBlockQ, p.L), std::min<int64_t>(block_k, p.S)};

  const std::vector<double> row_dot = p.dtype == DType::kBFloat16
                                          ? output_gradient_dots<uint16_t>(bp)
                                          : output_gradient_dots<float>(bp);

  // Problems that share one K/V matrix (GQA groups, broadcast batch dims)
  // form a group: one thread owns each (group, key tile).
  std::vector<std::vector<int64_t>> groups;
  {
    std::vector<std::pair<std::pair<int64_t, int64_t>, int64_t>> keyed;
    for (int64_t b = 0; b < p.problems; ++b)
      keyed.push_back({{bp.grad_k.offsets[b], bp.grad_v.offsets[b]}, b});
    std::sort(keyed.begin(), keyed.end());
    for (size_t i = 0; i < keyed.size(); ++i) {
      if (i == 0 || keyed[i].first != keyed[i - 1].first) groups.emplace_back();
      groups.back().push_back(keyed[i].second);
    }
  }
  const int64_t k_tiles = (p.S + t.block_k - 1) / t.block_k;
  const int64_t n_groups = static_cast<int64_t>(groups.size());
  const int threads = omp_get_max_threads();
  // When there are plenty of groups, a thread takes whole groups and writes
  // dQ directly (no two threads touch one problem); otherwise key tiles of
  // one group are spread over threads, each adding dQ into its own buffer.
  std::vector<int64_t> q_offsets = bp.grad_q.offsets;
  std::sort(q_offsets.begin(), q_offsets.end());
  const bool q_shared = std::adjacent_find(q_offsets.begin(), q_offsets.end()) != q_offsets.end();
  const bool whole_groups = !q_shared && (threads == 1 || n_groups >= 2 * threads);
  const int64_t items = whole_groups ? n_groups : n_groups * k_tiles;
  const int64_t grad_q_floats =
      (*std::max_element(bp.grad_q.offsets.begin(), bp.grad_q.offsets.end())) +
      (p.L - 1) * bp.grad_q.row_stride + p.E;  // rows of E contiguous elements
  const auto backward_tile = bf16 ? table.flash_backward_bf16_tile : table.flash_backward_tile;
  const int64_t scratch_floats =
      bf16 ? table.backward_bf16_scratch_floats(p, t) : table.backward_scratch_floats(p, t);
  float* grad_q = static_cast<float*>(bp.grad_q.base);

  InterruptPoll poll;
#pragma omp parallel if (items > 1)
  {
    ScratchBuffer buffer(scratch_floats);
    std::unique_ptr<ScratchBuffer> private_q;
    float* my_grad_q = grad_q;
    if (!whole_groups && omp_get_num_threads() > 1) {
      private_q = std::make_unique<ScratchBuffer>(grad_q_floats);
      my_grad_q = private_q->data;
      std::fill(my_grad_q, my_grad_q + grad_q_floats, 0.0f);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const std::vector<int64_t>& group = groups[whole_groups ? item : item / k_tiles];
      const int64_t first_tile = whole_groups ? 0 : item % k_tiles;
      const int64_t last_tile = whole_groups ? k_tiles : first_tile + 1;
      for (int64_t kt = first_tile; kt < last_tile && !poll.stop(); ++kt) {
        const int64_t j0 = kt * t.block_k;
        backward_tile(bp, t, group.data(), static_cast<int64_t>(group.size()), j0,
                      std::min<int64_t>(t.block_k, p.S - j0), row_dot.data(), my_grad_q,
                      buffer.data);
      }
    }
    if (private_q) {
      // Add the private dQ buffers into the gradient, one thread at a time.
#pragma omp critical(qkv_grad_q)
      for (int64_t i = 0; i < grad_q_floats; ++i) grad_q[i] += my_grad_q[i];
    }
  }
  poll.throw_if_stopped("scaled_dot_product_attention backward");
}

}  // namespace qkv::kernels
