// The GGUF block-quantised linear kernels (src/kernels/quant_gemm.h) of every
// table this CPU runs, against float32 linear_into on the dequantised weight,
// on SmolLM2-135M's shapes: for each shape, m and thread count, every
// implementation runs once per repetition in turn (interleaved, so that a
// busy neighbour slows all alike) and reports its median.
//
//   build/bench/bench_quantized_gemm [--reps 7] [--threads 1,2] [--m 1,512] [--portable]
//       [--formats Q4_1,Q8_0] [--impls avx512_vnni16,fp32]
//
// --formats and --impls keep only the named weight formats and tables (fp32:
// the float32 linear_into), for a quick A/B of one kernel.
// Weights are copied enough times to fill ≥ 64 MB and used in turn, so that
// each call reads W from memory as in a forward pass through the layers (not
// from cache). m = 1 reports GB/s of weight bytes read (quantised bytes for
// the kernels, 4·n·k for float32); m > 1 reports GFLOP/s (2·m·n·k).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_gemm.h"
#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/quantized_linear.h"
#include "qkv/runtime.h"

namespace {

using qkv::QuantFormat;
using qkv::Tensor;
using Clock = std::chrono::steady_clock;

struct Shape {
  QuantFormat format;
  int64_t n, k;
  const char* what;
};

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> v;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    v.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return v;
}

// Whether `name` is kept: listed in `names`, or `names` empty (keep all).
bool kept(const std::vector<std::string>& names, const std::string& name) {
  return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

// Random blocks with fp16 scales around 2^-6.
std::vector<uint8_t> random_blocks(QuantFormat f, int64_t n, int64_t k, std::mt19937& gen) {
  const int64_t bb = qkv::quant_block_bytes(f), blocks = n * k / qkv::quant_block_elements(f);
  std::vector<uint8_t> bytes(blocks * bb);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(gen());
  const bool has_min = f == QuantFormat::kQ4_1 || f == QuantFormat::kQ5_1 ||
                       f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K;
  const int offsets[2] = {f == QuantFormat::kQ6_K ? 208 : 0, has_min ? 2 : -1};
  for (int64_t i = 0; i < blocks; ++i)
    for (int o : offsets)
      if (o >= 0) {
        bytes[i * bb + o] = static_cast<uint8_t>(gen());
        bytes[i * bb + o + 1] = 0x24;  // 2^-6 · (1 + mantissa)
      }
  return bytes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  std::vector<int64_t> threads = {1, 2}, ms = {1, 512};
  bool portable = false;
  std::vector<std::string> formats, impls;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc)
      threads = parse_list(argv[++i]);
    else if (a == "--m" && i + 1 < argc)
      ms = parse_list(argv[++i]);
    else if (a == "--portable")
      portable = true;
    else if (a == "--formats" && i + 1 < argc)
      formats = parse_names(argv[++i]);
    else if (a == "--impls" && i + 1 < argc)
      impls = parse_names(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--threads 1,2] [--m 1,512] [--portable] "
                   "[--formats Q4_1,Q8_0] [--impls avx512_vnni16,fp32]\n",
                   argv[0]);
      return 2;
    }
  }
  // SmolLM2's Q4_1 layers, then Gemma 3 270M Q4_K_M's feed-forward (Q5_0) and the other
  // types of Q4_K_M files.
  const Shape shapes[] = {
      {QuantFormat::kQ4_1, 576, 576, "q/o proj"},  {QuantFormat::kQ4_1, 192, 576, "k/v proj"},
      {QuantFormat::kQ4_1, 1536, 576, "ffn up"},   {QuantFormat::kQ4_1, 576, 1536, "ffn down"},
      {QuantFormat::kQ8_0, 49152, 576, "lm head"}, {QuantFormat::kQ4_0, 1536, 576, "ffn up"},
      {QuantFormat::kQ4_K, 1536, 768, "(Q4_K)"},   {QuantFormat::kQ6_K, 1536, 768, "(Q6_K)"},
      {QuantFormat::kQ5_0, 2048, 640, "ffn up"},   {QuantFormat::kQ5_1, 1536, 576, "(Q5_1)"},
      {QuantFormat::kQ5_K, 1536, 768, "(Q5_K)"},   {QuantFormat::kIQ4_NL, 1536, 576, "(IQ4_NL)"},
  };
  std::vector<const qkv::kernels::QuantKernels*> tables;
  for (const auto* t : qkv::kernels::supported_quant_kernels())
    if ((portable || std::string(t->name) != "portable") && kept(impls, t->name))
      tables.push_back(t);
  const bool with_fp32 = kept(impls, "fp32");
  std::mt19937 gen(1);
  std::printf("%-6s %-9s %5s %5s %4s %3s  %-10s %10s %9s\n", "format", "layer", "n", "k", "m",
              "thr", "impl", "time_us", "rate");
  for (const Shape& s : shapes) {
    if (!kept(formats, qkv::quant_format_name(s.format))) continue;
    const int64_t qbytes =
        s.n * s.k / qkv::quant_block_elements(s.format) * qkv::quant_block_bytes(s.format);
    const int64_t fbytes = s.n * s.k * 4;
    const int64_t copies_q = std::max<int64_t>(1, (64 << 20) / qbytes);
    const int64_t copies_f = std::max<int64_t>(1, (64 << 20) / fbytes);
    std::vector<std::vector<uint8_t>> raw;
    std::vector<qkv::QuantizedWeight> qw;
    for (int64_t c = 0; c < copies_q; ++c) {
      raw.push_back(random_blocks(s.format, s.n, s.k, gen));
      qw.emplace_back(s.format, s.n, s.k, std::as_bytes(std::span(raw.back())));
    }
    std::vector<Tensor> fw;
    for (int64_t c = 0; with_fp32 && c < copies_f; ++c) fw.push_back(qw[c % copies_q].dequantize());
    for (int64_t m : ms) {
      qkv::Generator rng(2);
      const Tensor x = Tensor::rand({m, s.k}, rng, -1.0, 1.0);
      Tensor y = Tensor::empty({m, s.n});
      for (int64_t t : threads) {
        qkv::set_num_threads(static_cast<int>(t));
        // calls per timing: enough for ~20 ms at m = 1
        const int64_t calls = m == 1
                                  ? std::max<int64_t>(8, (256 << 20) / std::max(qbytes, fbytes) / 4)
                                  : std::max<int64_t>(2, (int64_t{4} << 30) / (2 * m * s.n * s.k));
        const int runs = static_cast<int>(tables.size()) + (with_fp32 ? 1 : 0);
        std::vector<std::vector<double>> times(runs);
        for (int rep = 0; rep < reps; ++rep)
          for (int i = 0; i < runs; ++i) {
            const bool fp32 = i == static_cast<int>(tables.size());
            if (!fp32) qkv::kernels::override_quant_kernels(tables[i]);
            const auto t0 = Clock::now();
            for (int64_t c = 0; c < calls; ++c) {
              if (fp32)
                qkv::linear_into(y, x, fw[c % copies_f]);
              else
                qkv::linear_into(y, x, qw[c % copies_q]);
            }
            times[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
          }
        qkv::kernels::override_quant_kernels(nullptr);
        for (int i = 0; i < runs; ++i) {
          const bool fp32 = i == static_cast<int>(tables.size());
          const double sec = median(times[i]);
          const double rate =
              m == 1 ? (fp32 ? fbytes : qbytes) / sec / 1e9 : 2.0 * m * s.n * s.k / sec / 1e9;
          std::printf("%-6s %-9s %5lld %5lld %4lld %3lld  %-10s %10.1f %7.1f %s\n",
                      qkv::quant_format_name(s.format), s.what, static_cast<long long>(s.n),
                      static_cast<long long>(s.k), static_cast<long long>(m),
                      static_cast<long long>(t), fp32 ? "fp32" : tables[i]->name, sec * 1e6, rate,
                      m == 1 ? "GB/s" : "GFLOP/s");
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
