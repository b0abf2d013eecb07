// The bfloat16 and int8 linear kernels (src/kernels/low_precision_gemm.h) of
// every table this CPU runs, against OpenBLAS's float32 cblas_sgemm on the
// same y = x · Wᵀ + bias, in one process: for each shape and thread count,
// every implementation runs once per repetition in turn (interleaved, so a
// busy neighbour slows all of them alike), and each reports the median.
//
//   build/bench/bench_low_precision_gemm [--reps 7] [--threads 1,2] [--portable]
//                                        [--shapes big|small|all] [--min-ms 20] [--wall]
//                                        [--m 4096,128,16] [--layers 0,1,2,3]
//
// Shapes: all-MiniLM-L6-v2's linear layers at 32 sentences × 128 tokens
// (m = 4096; (n, k) = (1152, 384) fused QKV, (384, 384) attention output,
// (1536, 384) FFN in, (384, 1536) FFN out; --layers picks them by index 0-3),
// and m = 16 and 128 for latency.
// GFLOP/s count 2·m·n·k (int8: operations) per second of the process's CPU
// time divided by the threads: on a shared machine, per second that the
// cores ran this benchmark (--wall: per second of wall time). "peak%" is of the instruction's
// peak measured in the same repetitions (independent chains of vfmadd231ps,
// vdpbf16ps or vpdpbusd on as many threads, interleaved with the kernels, so
// that it sees the same machine load); for the widening tables it is still
// the bf16 or int8 peak. The portable tables are skipped unless --portable.
// Built where CMake finds oneDNN (find_package(dnnl)), oneDNN's bf16 and int8
// matmul run alongside (OneDnnLinear below says what each call includes).
#include "kernels/low_precision_gemm.h"

#include <cblas.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "qkv/precision.h"

#ifdef QKV_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using qkv::Precision;
using qkv::kernels::AlignedAllocator;
using qkv::kernels::LowPrecisionKernels;
using qkv::kernels::PackedWeights;
using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t m, n, k;
};

// The instruction whose peak an implementation is measured against.
enum class Peak { kFp32, kBf16, kInt8 };

struct Impl {
  std::string name;
  Peak peak;  // the instruction whose peak it is measured against
  std::function<void()> run;
  std::vector<double> gflops;  // one per repetition
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Seconds of CPU time of the whole process (every thread), or of wall time.
bool g_wall_clock = false;
double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
double wall_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// The seconds a run took on `threads` cores: wall time, or the process's CPU
// time divided by the threads (on a shared machine, the time the cores were
// ours; OpenMP's spin-waiting at barriers counts as ours).
struct Stopwatch {
  int threads;
  double wall0 = wall_seconds(), cpu0 = cpu_seconds();
  double wall() const { return wall_seconds() - wall0; }
  double seconds() const { return g_wall_clock ? wall() : (cpu_seconds() - cpu0) / threads; }
};

// GFLOP/s of `run`, called as often as it takes to fill min_ms of wall time
// (at least once).
double time_gflops(const std::function<void()>& run, double flops, double min_ms, int threads) {
  int calls = 0;
  const Stopwatch watch{threads};
  do {
    run();
    ++calls;
  } while (watch.wall() * 1e3 < min_ms);
  return flops * calls / (watch.seconds() * 1e9);
}

// The peak of one instruction on `threads` threads: 16 independent chains
// (more than latency × ports), `iterations` times; GFLOP/s by wall time.

// 16 chains of `op` (AT&T operand order: zmm16, zmm17 into zmm0..15), in asm
// so that the compiler neither merges nor spills the chains; zero operands,
// so that no denormal or NaN ever occurs.
#define QKV_PEAK_LOOP(op, iterations)                                                            \
  asm volatile(                                                                                  \
      "vpxord %%zmm16, %%zmm16, %%zmm16\n vpxord %%zmm17, %%zmm17, %%zmm17\n"                    \
      "1:\n" op " %%zmm16, %%zmm17, %%zmm0\n" op " %%zmm16, %%zmm17, %%zmm1\n" op                \
      " %%zmm16, %%zmm17, %%zmm2\n" op " %%zmm16, %%zmm17, %%zmm3\n" op                          \
      " %%zmm16, %%zmm17, %%zmm4\n" op " %%zmm16, %%zmm17, %%zmm5\n" op                          \
      " %%zmm16, %%zmm17, %%zmm6\n" op " %%zmm16, %%zmm17, %%zmm7\n" op                          \
      " %%zmm16, %%zmm17, %%zmm8\n" op " %%zmm16, %%zmm17, %%zmm9\n" op                          \
      " %%zmm16, %%zmm17, %%zmm10\n" op " %%zmm16, %%zmm17, %%zmm11\n" op                        \
      " %%zmm16, %%zmm17, %%zmm12\n" op " %%zmm16, %%zmm17, %%zmm13\n" op                        \
      " %%zmm16, %%zmm17, %%zmm14\n" op                                                          \
      " %%zmm16, %%zmm17, %%zmm15\n"                                                             \
      "dec %0\n jnz 1b\n"                                                                        \
      : "+r"(iterations)                                                                         \
      :                                                                                          \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "cc")

__attribute__((target("avx512f"))) void peak_chains(Peak which, int64_t iterations) {
  if (iterations <= 0) return;
  if (which == Peak::kFp32) QKV_PEAK_LOOP("vfmadd231ps", iterations);
  if (which == Peak::kBf16) QKV_PEAK_LOOP("vdpbf16ps", iterations);
  if (which == Peak::kInt8) QKV_PEAK_LOOP("vpdpbusd", iterations);
}

double peak_gflops(Peak which, int threads, int64_t iterations) {
  const Stopwatch watch{threads};
#pragma omp parallel num_threads(threads)
  {
    peak_chains(which, iterations);
  }
  const double s = watch.seconds();
  const double per_instruction = which == Peak::kFp32 ? 32 : (which == Peak::kBf16 ? 64 : 128);
  return threads * iterations * 16 * per_instruction / s / 1e9;
}

#ifdef QKV_BENCH_ONEDNN
// oneDNN's matmul on the same shape, for comparison: y = x · Wᵀ + bias with
// W reordered once into oneDNN's own layout. bf16: each call reorders x from
// float32 to bf16 and multiplies. int8: each call reorders x to s8 with one
// scale for the whole tensor (oneDNN 2.x matmul has no per-row scale of
// the source; ours is per row, dynamic, and its max|x| pass is not in this
// time: the scale is computed once, outside), s8 W with per-channel output
// scales.
struct OneDnnLinear {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::memory x_f32, x_low, w_low, b, y;
  dnnl::reorder to_low;
  dnnl::matmul matmul;

  OneDnnLinear(const float* x, const float* w, const float* bias, float* out, int64_t m, int64_t n,
               int64_t k, bool int8) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt low = int8 ? dt::s8 : dt::bf16;
    const dnnl::memory::desc x_md({m, k}, dt::f32, tag::ab), x_low_md({m, k}, low, tag::ab);
    const dnnl::memory::desc w_any({k, n}, low, tag::any);
    const dnnl::memory::desc b_md({1, n}, dt::f32, tag::ab), y_md({m, n}, dt::f32, tag::ab);
    float x_scale = 1.0f;
    dnnl::primitive_attr x_attr, mm_attr;
    // W as low-precision values in the plain layout ([n, k] = [k, n] "ba"),
    // then reordered into oneDNN's; int8: quantised here, per channel.
    std::vector<float> w_f32(w, w + n * k);
    std::vector<int8_t> w_s8(int8 ? n * k : 0);
    if (int8) {
      float max = 0.0f;
      for (int64_t i = 0; i < m * k; ++i) max = std::max(max, std::fabs(x[i]));
      x_scale = max > 0 ? max / 127.0f : 1.0f;
      x_attr.set_output_scales(0, {1.0f / x_scale});
      std::vector<float> out_scales(n);
      for (int64_t j = 0; j < n; ++j) {
        float mj = 0.0f;
        for (int64_t p = 0; p < k; ++p) mj = std::max(mj, std::fabs(w[j * k + p]));
        const float sw = mj > 0 ? mj / 127.0f : 1.0f;
        for (int64_t p = 0; p < k; ++p)
          w_s8[j * k + p] = static_cast<int8_t>(std::nearbyint(w[j * k + p] / sw));
        out_scales[j] = x_scale * sw;
      }
      mm_attr.set_output_scales(2, out_scales);  // mask 2: per column of y
    }
    const dnnl::memory::desc w_plain({k, n}, low == dt::s8 ? dt::s8 : dt::f32, tag::ba);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_low_md, w_any, b_md, y_md), mm_attr,
                                          engine);
    x_f32 = dnnl::memory(x_md, engine, const_cast<float*>(x));
    x_low = dnnl::memory(x_low_md, engine);
    w_low = dnnl::memory(pd.weights_desc(), engine);
    b = dnnl::memory(b_md, engine, const_cast<float*>(bias));
    y = dnnl::memory(y_md, engine, out);
    dnnl::memory w_src(w_plain, engine,
                       int8 ? static_cast<void*>(w_s8.data()) : static_cast<void*>(w_f32.data()));
    dnnl::reorder(w_src, w_low).execute(stream, w_src, w_low);
    to_low = dnnl::reorder(dnnl::reorder::primitive_desc(x_f32, x_low, x_attr));
    matmul = dnnl::matmul(pd);
    stream.wait();
  }
  void run() {
    to_low.execute(stream, x_f32, x_low);
    matmul.execute(
        stream,
        {{DNNL_ARG_SRC, x_low}, {DNNL_ARG_WEIGHTS, w_low}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    stream.wait();
  }
};
#endif

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  double min_ms = 20;
  bool portable = false;
  std::string which = "all";
  std::vector<int> thread_counts = {1, 2};
  std::vector<int> rows = {4096, 128, 16};
  std::vector<int> layer_indices = {0, 1, 2, 3};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts = parse_list(argv[++i]);
    } else if (a == "--m" && i + 1 < argc) {
      rows = parse_list(argv[++i]);
    } else if (a == "--layers" && i + 1 < argc) {
      layer_indices = parse_list(argv[++i]);
      for (int index : layer_indices)
        if (index < 0 || index > 3) {
          std::fprintf(stderr,
                       "--layers: indices are 0 to 3 (QKV, output, FFN in, FFN out), got %d\n",
                       index);
          return 2;
        }
    } else if (a == "--portable") {
      portable = true;
    } else if (a == "--shapes" && i + 1 < argc) {
      which = argv[++i];
    } else if (a == "--wall") {
      g_wall_clock = true;
    } else if (a == "--min-ms" && i + 1 < argc) {
      min_ms = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--threads 1,2] [--portable] [--shapes big|small|all] "
                   "[--min-ms MS] [--wall] [--m 4096,128,16] [--layers 0,1,2,3]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::pair<int64_t, int64_t> layers[] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
  std::vector<Shape> shapes;
  for (int64_t m : rows) {
    if ((which == "big" && m < 4096) || (which == "small" && m >= 4096)) continue;
    for (int index : layer_indices)
      shapes.push_back({m, layers[index].first, layers[index].second});
  }

  std::printf("%-22s %3s  %-22s %9s %9s %7s\n", "shape (m x n x k)", "thr", "impl", "GFLOP/s",
              "x sgemm", "peak%");
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    // 64-byte aligned, as qkv's tensors are (src/tensor/buffer_cache.cc).
    std::vector<float, AlignedAllocator<float>> x(s.m * s.k), w(s.n * s.k), bias(s.n), y(s.m * s.n);
    for (float& v : x) v = u(gen);
    for (float& v : w) v = u(gen);
    for (float& v : bias) v = u(gen);
    const PackedWeights bf16(w.data(), s.n, s.k, Precision::kBFloat16);
    const PackedWeights int8(w.data(), s.n, s.k, Precision::kInt8);
    const double flops = 2.0 * s.m * s.n * s.k;

    std::vector<Impl> impls;
    impls.push_back({"sgemm fp32 (OpenBLAS)",
                     Peak::kFp32,
                     [&] {
                       // y = bias, then y += x · Wᵀ: what a float32 linear does.
                       for (int64_t i = 0; i < s.m; ++i)
                         std::memcpy(&y[i * s.n], bias.data(), s.n * sizeof(float));
                       cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f,
                                   x.data(), s.k, w.data(), s.k, 1.0f, y.data(), s.n);
                     },
                     {}});
    for (Precision p : {Precision::kBFloat16, Precision::kInt8})
      for (const LowPrecisionKernels* t : qkv::kernels::supported_low_precision_kernels(p)) {
        if (!portable && std::strcmp(t->name, "portable") == 0) continue;
        const PackedWeights& packed = p == Precision::kInt8 ? int8 : bf16;
        impls.push_back({std::string(p == Precision::kInt8 ? "int8 " : "bf16 ") + t->name,
                         p == Precision::kInt8 ? Peak::kInt8 : Peak::kBf16,
                         [&, t, &packed = packed] {
                           qkv::kernels::override_low_precision_kernels(t);
                           qkv::kernels::low_precision_gemm(x.data(), s.k, s.m, packed, bias.data(),
                                                            y.data(), s.n);
                         },
                         {}});
      }

#ifdef QKV_BENCH_ONEDNN
    // Made again for each thread count below: a oneDNN primitive is made for
    // the threads OpenMP has when it is created (run with fewer, it slows
    // down by up to 100x at m = 16).
    std::unique_ptr<OneDnnLinear> dnnl_bf16, dnnl_int8;
    impls.push_back({"bf16 oneDNN matmul", Peak::kBf16, [&] { dnnl_bf16->run(); }, {}});
    impls.push_back({"int8 oneDNN matmul", Peak::kInt8, [&] { dnnl_int8->run(); }, {}});
#endif

    for (int threads : thread_counts) {
      omp_set_num_threads(threads);
      openblas_set_num_threads(threads);
#ifdef QKV_BENCH_ONEDNN
      dnnl_bf16 = std::make_unique<OneDnnLinear>(x.data(), w.data(), bias.data(), y.data(), s.m,
                                                 s.n, s.k, false);
      dnnl_int8 = std::make_unique<OneDnnLinear>(x.data(), w.data(), bias.data(), y.data(), s.m,
                                                 s.n, s.k, true);
#endif
      for (Impl& impl : impls) {
        impl.gflops.clear();
        impl.run();  // warm: packs nothing, but touches W and the buffers
      }
      std::vector<double> peaks[3];
      for (int r = 0; r < reps; ++r) {
        for (Impl& impl : impls)
          impl.gflops.push_back(time_gflops(impl.run, flops, min_ms, threads));
        // ~min_ms / 2 each at 16 instructions per iteration and ~3.5 GHz.
        const int64_t iterations = static_cast<int64_t>(min_ms * 1e-3 / 2 * 3.5e9 / 16);
        for (Peak p : {Peak::kFp32, Peak::kBf16, Peak::kInt8})
          peaks[static_cast<int>(p)].push_back(peak_gflops(p, threads, iterations));
      }
      const double base = median(impls[0].gflops);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ld x %ld x %ld", static_cast<long>(s.m),
                    static_cast<long>(s.n), static_cast<long>(s.k));
      for (const Impl& impl : impls) {
        const double g = median(impl.gflops);
        std::printf("%-22s %3d  %-22s %9.1f %9.2f %6.0f%%\n", shape, threads, impl.name.c_str(), g,
                    g / base, 100 * g / median(peaks[static_cast<int>(impl.peak)]));
      }
      std::printf("%-22s %3d  measured peaks: fp32 %.0f, bf16 %.0f, int8 %.0f GFLOP/s\n", shape,
                  threads, median(peaks[0]), median(peaks[1]), median(peaks[2]));
      std::fflush(stdout);
    }
  }
  qkv::kernels::override_low_precision_kernels(nullptr);
  return 0;
}
