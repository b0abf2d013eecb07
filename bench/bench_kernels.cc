// Google Benchmark micro-benchmarks of the attention kernels.
//
//   Fused/<isa>/<pass>/<shape>      the fused kernels of every ISA this CPU runs,
//                                   through the public op (what users get)
//   Reference/<pass>/<shape>        the float64-arithmetic reference, for scale
//   TileSweep/<pass>/<shape>/bq:bk  the fused kernel of the default ISA with
//                                   other tile sizes than src/kernels/dispatch.cc's
//   FewRowsLinear/<impl>/m<rows>_<out>x<in>
//                                   y = x Wᵀ for a few rows of x: qkv's linear
//                                   (W read in place, src/kernels/simd/gemv_rows.h)
//                                   against OpenBLAS's sgemm on the same call;
//                                   24 weight matrices in turn, so that W comes
//                                   from L3 as in a 6-layer forward pass
//
// Counters: FLOP/s (forward 4·B·H·L·S·E, half for causal; backward 2.5× the
// forward) and peak% (of the FP32 peak that the same ISA measures on every
// thread at start-up). Times are wall-clock: the kernels run on every thread.
//
//   build/bench/bench_kernels --benchmark_filter='Fused/avx512/forward'
//   build/bench/bench_kernels --benchmark_filter=TileSweep --benchmark_min_time=0.2
//   OPENBLAS_CORETYPE=SkylakeX build/bench/bench_kernels --benchmark_filter=FewRowsLinear
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/fused_attention.h"
#include "ops/sdpa_prepare.h"
#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t B, H, L, S, E;
  bool causal;

  std::string name() const {
    return "B" + std::to_string(B) + "_H" + std::to_string(H) + "_L" + std::to_string(L) + "_S" +
           std::to_string(S) + "_E" + std::to_string(E) + (causal ? "_causal" : "");
  }
  double forward_flops() const {
    const double f = 4.0 * B * H * L * S * E;
    return causal ? f / 2 : f;
  }
};

// From the grid of bench/attention_vs_torch.py (B·L = 4,096 tokens, H·E = 512)
// and its named points.
const Shape kFusedShapes[] = {
    {32, 16, 128, 128, 32, false},
    {8, 8, 512, 512, 64, false},
    {8, 8, 512, 512, 64, true},
    {2, 8, 2048, 2048, 64, false},
    {2, 8, 2048, 2048, 64, true},
    {4, 4, 1024, 1024, 128, false},
    {1, 16, 4096, 4096, 32, false},
    {8, 12, 512, 512, 64, false},  // BERT-base
    // the small shapes that the Python benchmark calls one at a time
    {1, 8, 32, 32, 64, false},
    {1, 8, 32, 32, 64, true},
    {1, 8, 128, 128, 64, false},
    {1, 8, 128, 128, 64, true},
};
const Shape kReferenceShapes[] = {{1, 8, 256, 256, 64, false}, {1, 8, 256, 256, 64, true}};
const Shape kSweepShapes[] = {{8, 8, 512, 512, 64, false},
                              {2, 8, 2048, 2048, 64, false},
                              {32, 16, 128, 128, 32, false},
                              {4, 4, 1024, 1024, 128, false}};
const int64_t kSweepBlockQ[] = {32, 48, 64, 96, 128, 192};
const int64_t kSweepBlockK[] = {64, 96, 128, 256, 512};

struct Inputs {
  qkv::Tensor q, k, v, grad_output;
};

Inputs make_inputs(const Shape& s) {
  qkv::Generator gen(42);
  return {
      qkv::Tensor::randn({s.B, s.H, s.L, s.E}, gen), qkv::Tensor::randn({s.B, s.H, s.S, s.E}, gen),
      qkv::Tensor::randn({s.B, s.H, s.S, s.E}, gen), qkv::Tensor::randn({s.B, s.H, s.L, s.E}, gen)};
}

qkv::SdpaOptions options_for(const Shape& s, qkv::SdpaBackend backend) {
  qkv::SdpaOptions o;
  o.causal = s.causal ? qkv::CausalMask::kTopLeft : qkv::CausalMask::kNone;
  o.backend = backend;
  return o;
}

// The FP32 peak of each kernel table on every thread, measured once.
double peak_gflops(const qkv::kernels::KernelTable* table) {
  static std::map<const qkv::kernels::KernelTable*, double> peaks;
  auto it = peaks.find(table);
  if (it != peaks.end()) return it->second;
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  total += table->fma_peak_gflops(0.3);
  return peaks[table] = total;
}

// Runs `body` once per iteration, timing it with the wall clock, and sets the
// FLOP/s and peak% counters.
template <typename Body>
void timed_loop(benchmark::State& state, double flops, double peak, Body&& body) {
  double seconds = 0.0;
  for (auto _ : state) {
    const auto start = Clock::now();
    body();
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    state.SetIterationTime(t);
    seconds += t;
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0 && seconds > 0)
    state.counters["peak%"] = 100.0 * flops * iterations / seconds / (peak * 1e9);
}

// --- Fused and reference kernels through the public op ----------------------

void fused_forward(benchmark::State& state, const qkv::kernels::KernelTable* table, Shape s,
                   qkv::SdpaBackend backend) {
  qkv::kernels::override_kernel_table(table);
  const Inputs in = make_inputs(s);
  const qkv::SdpaOptions options = options_for(s, backend);
  const double peak = table ? peak_gflops(table) : 0.0;
  timed_loop(state, s.forward_flops(), peak, [&] {
    benchmark::DoNotOptimize(qkv::scaled_dot_product_attention(in.q, in.k, in.v, options));
  });
  qkv::kernels::override_kernel_table(nullptr);
}

void fused_backward(benchmark::State& state, const qkv::kernels::KernelTable* table, Shape s,
                    qkv::SdpaBackend backend) {
  qkv::kernels::override_kernel_table(table);
  const Inputs in = make_inputs(s);
  const qkv::SdpaOptions options = options_for(s, backend);
  const qkv::SdpaResult forward = qkv::scaled_dot_product_attention(in.q, in.k, in.v, options);
  const double peak = table ? peak_gflops(table) : 0.0;
  timed_loop(state, 2.5 * s.forward_flops(), peak, [&] {
    benchmark::DoNotOptimize(qkv::scaled_dot_product_attention_backward(in.grad_output, in.q, in.k,
                                                                        in.v, forward, options));
  });
  qkv::kernels::override_kernel_table(nullptr);
}

// --- Tile sweep: the kernel's tile functions driven with other tilings -------

struct Scratch {
  explicit Scratch(int64_t floats)
      : data(static_cast<float*>(
            ::operator new[](static_cast<size_t>(floats) * sizeof(float), std::align_val_t(64)))) {}
  ~Scratch() { ::operator delete[](data, std::align_val_t(64)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data;
};

// As sdpa_forward_fused: threads over (problem, query tile).
void forward_with_tiling(const qkv::kernels::SdpaProblem& p, const qkv::kernels::KernelTable& table,
                         const qkv::kernels::FlashTiling& t) {
  const int64_t q_tiles = (p.L + t.block_q - 1) / t.block_q;
  const int64_t scratch_floats = table.forward_scratch_floats(p, t);
#pragma omp parallel
  {
    Scratch scratch(scratch_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < p.problems * q_tiles; ++item) {
      const int64_t q_begin = (item % q_tiles) * t.block_q;
      table.forward_tile(p, t, item / q_tiles, q_begin, std::min<int64_t>(t.block_q, p.L - q_begin),
                         scratch.data);
    }
  }
}

// As sdpa_backward_fused when there are many (batch, head) problems and no
// GQA: every thread takes whole problems and writes their dQ directly.
void backward_with_tiling(const qkv::kernels::SdpaBackwardProblem& bp,
                          const qkv::kernels::KernelTable& table,
                          const qkv::kernels::FlashTiling& t, const std::vector<double>& row_dot) {
  const qkv::kernels::SdpaProblem& p = bp.forward;
  const int64_t k_tiles = (p.S + t.block_k - 1) / t.block_k;
  const int64_t scratch_floats = table.backward_scratch_floats(p, t);
#pragma omp parallel
  {
    Scratch scratch(scratch_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < p.problems; ++b)
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const int64_t j0 = kt * t.block_k;
        table.flash_backward_tile(bp, t, &b, 1, j0, std::min<int64_t>(t.block_k, p.S - j0),
                                  row_dot.data(), static_cast<float*>(bp.grad_q.base),
                                  scratch.data);
      }
  }
}

qkv::kernels::GradOperand grad_operand(qkv::Tensor& grad, const qkv::Shape& out_lead) {
  qkv::kernels::GradOperand g;
  g.base = grad.raw_data();
  g.offsets = qkv::matrix_offsets(grad, out_lead, 1);
  g.row_stride = grad.stride(-2);
  return g;
}

void tile_sweep(benchmark::State& state, Shape s, qkv::kernels::FlashTiling tiling, bool backward) {
  const qkv::kernels::KernelTable& table = qkv::kernels::active_kernel_table();
  const Inputs in = make_inputs(s);
  const qkv::SdpaOptions options = options_for(s, qkv::SdpaBackend::kFused);
  qkv::PreparedSdpa prepared = qkv::prepare_sdpa(in.q, in.k, in.v, options, "bench_kernels");
  qkv::kernels::SdpaProblem& p = prepared.problem;
  qkv::Tensor output = qkv::Tensor::empty(prepared.out_shape);
  std::vector<double> lse(static_cast<size_t>(p.problems * p.L));
  p.output = output.raw_data();
  p.lse = lse.data();
  const double peak = peak_gflops(&table);
  if (!backward) {
    timed_loop(state, s.forward_flops(), peak, [&] { forward_with_tiling(p, table, tiling); });
    return;
  }
  forward_with_tiling(p, table, tiling);
  qkv::kernels::SdpaBackwardProblem bp;
  bp.forward = p;
  bp.grad_output = qkv::matrix_operand(in.grad_output, prepared.out_lead);
  qkv::Tensor grad_q = qkv::Tensor::zeros(in.q.shape());
  qkv::Tensor grad_k = qkv::Tensor::zeros(in.k.shape());
  qkv::Tensor grad_v = qkv::Tensor::zeros(in.v.shape());
  bp.grad_q = grad_operand(grad_q, prepared.out_lead);
  bp.grad_k = grad_operand(grad_k, prepared.out_lead);
  bp.grad_v = grad_operand(grad_v, prepared.out_lead);
  // D = rowsum(dO ∘ O), as the driver computes it (outside the timing).
  std::vector<double> row_dot(static_cast<size_t>(p.problems * p.L));
  const float* go = in.grad_output.data<float>();
  const float* out = output.data<float>();
  for (size_t r = 0; r < row_dot.size(); ++r) {
    double d = 0.0;
    for (int64_t e = 0; e < p.Ev; ++e)
      d += static_cast<double>(go[r * p.Ev + e]) * out[r * p.Ev + e];
    row_dot[r] = d;
  }
  timed_loop(state, 2.5 * s.forward_flops(), peak,
             [&] { backward_with_tiling(bp, table, tiling, row_dot); });
}

// --- Linear layers over a few rows ------------------------------------------

void few_rows_linear(benchmark::State& state, bool blas, int64_t m, int64_t out, int64_t in) {
  qkv::Generator gen(7);
  std::vector<qkv::Tensor> weights;
  for (int i = 0; i < 24; ++i) weights.push_back(qkv::Tensor::randn({out, in}, gen));
  const qkv::Tensor x = qkv::Tensor::randn({m, in}, gen);
  qkv::Tensor y = qkv::Tensor::empty({m, out});
  size_t next = 0;
  timed_loop(state, 2.0 * m * out * in, 0.0, [&] {
    const qkv::Tensor& w = weights[next++ % weights.size()];
    if (blas) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, out, in, 1.0f, x.data<float>(), in,
                  w.data<float>(), in, 0.0f, y.data<float>(), out);
    } else {
      qkv::linear_into(y, x, w);
    }
  });
}

void register_all() {
  using qkv::SdpaBackend;
  for (const qkv::kernels::KernelTable* table : qkv::kernels::supported_kernel_tables())
    for (const Shape& s : kFusedShapes) {
      const std::string suffix = std::string(table->name) + "/";
      benchmark::RegisterBenchmark(("Fused/" + suffix + "forward/" + s.name()).c_str(),
                                   fused_forward, table, s, SdpaBackend::kFused)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("Fused/" + suffix + "backward/" + s.name()).c_str(),
                                   fused_backward, table, s, SdpaBackend::kFused)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  for (const Shape& s : kReferenceShapes) {
    benchmark::RegisterBenchmark(("Reference/forward/" + s.name()).c_str(), fused_forward, nullptr,
                                 s, SdpaBackend::kReference)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("Reference/backward/" + s.name()).c_str(), fused_backward,
                                 nullptr, s, SdpaBackend::kReference)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (int64_t m : {1, 2, 8, 16, 32, 48})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{384, 384}, {1536, 384}, {384, 1536}})
      for (bool blas : {false, true}) {
        const std::string name = std::string("FewRowsLinear/") + (blas ? "openblas" : "qkv") +
                                 "/m" + std::to_string(m) + "_" + std::to_string(out) + "x" +
                                 std::to_string(in);
        benchmark::RegisterBenchmark(name.c_str(), few_rows_linear, blas, m, out, in)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  for (const char* pass : {"forward", "backward"})
    for (const Shape& s : kSweepShapes)
      for (int64_t bq : kSweepBlockQ)
        for (int64_t bk : kSweepBlockK) {
          const qkv::kernels::FlashTiling t{std::min(bq, s.L), std::min(bk, s.S)};
          const std::string name = std::string("TileSweep/") + pass + "/" + s.name() + "/" +
                                   std::to_string(bq) + ":" + std::to_string(bk);
          benchmark::RegisterBenchmark(name.c_str(), tile_sweep, s, t,
                                       std::string(pass) == "backward")
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::AddCustomContext("qkv_isa", qkv::kernel_isa());
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
