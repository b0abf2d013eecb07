// Every weight type under every instruction-set level this CPU has
// (kernels/cpu_features.h): with the cap at that level, float32 (attention's
// fused kernels, a row op), bfloat16 and int8 rows (low_precision_gemm) and
// each GGUF block format (quant_gemm, both routes) run the fastest kernels at
// or below it, against their float64 references. And QKV_ISA reaches every
// family, or is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/fused_attention.h"
#include "kernels/low_precision_gemm.h"
#include "kernels/quant_gemm.h"
#include "low_precision_reference.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/generator.h"
#include "qkv/runtime.h"
#include "quant_reference.h"
#include "tensor_comparison.h"

namespace {

using qkv::Precision;
using qkv::kernels::Isa;

// The level a table's name belongs to: the longest level name it starts with
// ("amx_int8": amx, "avx512_vnni16": avx512_vnni, "avx512_bf16": avx512_bf16).
Isa level_of(const std::string& table_name) {
  Isa best = Isa::kPortable;
  size_t best_length = 0;
  for (int level = 0; level < qkv::kernels::kIsaCount; ++level) {
    const std::string name = qkv::kernels::isa_name(static_cast<Isa>(level));
    if (table_name.starts_with(name) && name.size() > best_length)
      best = static_cast<Isa>(level), best_length = name.size();
  }
  return best;
}

// The first of `tables` (fastest first) at or below `level` that `accept`s.
template <class Table, class Accept>
const Table* first_at_or_below(const std::vector<const Table*>& tables, Isa level, Accept accept) {
  for (const Table* t : tables)
    if (level_of(t->name) <= level && accept(*t)) return t;
  return nullptr;
}

class WeightTypesByIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { qkv::kernels::override_isa_ceiling(GetParam()); }
  void TearDown() override {
    qkv::kernels::reset_isa_ceiling();
    qkv::set_num_threads(threads_);
  }
  const int threads_ = qkv::num_threads();
};

// Each family runs its fastest table at or below the level.
TEST_P(WeightTypesByIsa, EveryFamilyRunsTheFastestTableAtOrBelowTheLevel) {
  const Isa level = GetParam();
  const auto any = [](const auto&) { return true; };
  EXPECT_EQ(&qkv::kernels::active_kernel_table(),
            first_at_or_below(qkv::kernels::supported_kernel_tables(), level, any));
  for (Precision p : {Precision::kBFloat16, Precision::kInt8})
    EXPECT_EQ(&qkv::kernels::active_low_precision_kernels(p),
              first_at_or_below(qkv::kernels::supported_low_precision_kernels(p), level, any))
        << qkv::precision_name(p);
  // (The 8-bit-x table only with QKV_INT8_DECODE=1, which this test leaves unset.)
  EXPECT_EQ(&qkv::kernels::active_quant_kernels(),
            first_at_or_below(qkv::kernels::supported_quant_kernels(), level,
                              [](const qkv::kernels::QuantKernels& t) { return t.x_bits != 8; }));
  if (level == Isa::kPortable || level == Isa::kAvx2) {
    const std::string name = qkv::kernels::isa_name(level);
    EXPECT_EQ(qkv::kernel_isa(), name);
    EXPECT_EQ(qkv::linear_kernel_isa(Precision::kBFloat16), name);
    EXPECT_EQ(qkv::linear_kernel_isa(Precision::kInt8), name);
    EXPECT_EQ(level_of(qkv::kernels::active_quant_kernels().name), level);  // avx2: avx2_int16
  }
}

// float32: fused attention and a row op (gelu) against float64.
TEST_P(WeightTypesByIsa, Float32AgainstFloat64) {
  qkv::Generator gen(3);
  const qkv::Tensor q = qkv::Tensor::randn({2, 3, 17, 24}, gen);
  const qkv::Tensor k = qkv::Tensor::randn({2, 3, 80, 24}, gen);
  const qkv::Tensor v = qkv::Tensor::randn({2, 3, 80, 20}, gen);
  qkv::SdpaOptions options;
  options.backend = qkv::SdpaBackend::kFused;
  options.causal = qkv::CausalMask::kBottomRight;
  const qkv::SdpaResult fused = qkv::scaled_dot_product_attention(q, k, v, options);
  EXPECT_EQ(fused.kernel, std::string("fused-") + qkv::kernels::active_kernel_table().name);
  options.backend = qkv::SdpaBackend::kReference;
  const qkv::SdpaResult ref = qkv::scaled_dot_product_attention(
      q.to(qkv::DType::kFloat64), k.to(qkv::DType::kFloat64), v.to(qkv::DType::kFloat64), options);
  EXPECT_LE(qkv::testing::relative_error(fused.output, ref.output), 1e-5);
  // gelu's rows: |error| ≤ 2e-7 · (|x| + 1), as test_isa_row_ops.
  const qkv::Tensor x = qkv::Tensor::randn({1000}, gen);
  const std::vector<double> xs = x.to_vector(), got = qkv::gelu(x).to_vector(),
                            want = qkv::gelu(x.to(qkv::DType::kFloat64)).to_vector();
  for (size_t i = 0; i < xs.size(); ++i)
    ASSERT_LE(std::abs(got[i] - want[i]), 2e-7 * (std::abs(xs[i]) + 1.0))
        << "gelu(" << xs[i] << ")";
}

// bfloat16 and int8 rows: low_precision_gemm against float64 of the same
// rounded or quantised operands, on one and two threads.
TEST_P(WeightTypesByIsa, Bf16AndInt8RowsAgainstFloat64) {
  std::mt19937 gen(5);
  for (Precision precision : {Precision::kBFloat16, Precision::kInt8})
    for (int threads : {1, 2}) {
      qkv::set_num_threads(threads);
      for (auto [m, n, k] :
           {std::tuple<int64_t, int64_t, int64_t>{1, 100, 385}, {17, 33, 64}, {200, 70, 96}}) {
        SCOPED_TRACE(std::string(qkv::precision_name(precision)) +
                     " threads=" + std::to_string(threads));
        const qkv_test::lowp::Problem p = qkv_test::lowp::make_problem(m, n, k, 3, 2, true, gen);
        const qkv::kernels::PackedWeights w(p.w.data(), n, k, precision);
        qkv_test::lowp::check(p, w, qkv_test::lowp::run(p, w));
      }
    }
}

// Every GGUF block format: both routes (decoding rows: one, a few, every
// count of rows one pass over W meets and more, so every row-count case of
// the kernels runs; a prompt's sgemm).
TEST_P(WeightTypesByIsa, GgufBlocksAgainstFloat64) {
  std::mt19937 gen(7);
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    for (qkv::QuantFormat f : qkv_test::quant::kFormats) {
      const int64_t block = qkv::quant_block_elements(f);
      for (int64_t m : {1, 2, 3, 5, 8, 12, 16, 40})
        qkv_test::quant::check_quant_gemm(f, m, 37, 2 * block, m != 3, gen,
                                          std::string(qkv::kernels::active_quant_kernels().name) +
                                              " threads=" + std::to_string(threads));
    }
  }
}

std::string level_name(const ::testing::TestParamInfo<Isa>& info) {
  return qkv::kernels::isa_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, WeightTypesByIsa,
                         ::testing::ValuesIn(qkv::kernels::supported_isas()), level_name);

// A level this CPU lacks is refused, and the cap stays as it was.
TEST(IsaCeiling, RefusesALevelTheCpuLacks) {
  const Isa before = qkv::kernels::isa_ceiling();
  for (int level = 0; level < qkv::kernels::kIsaCount; ++level) {
    const Isa isa = static_cast<Isa>(level);
    if (qkv::kernels::cpu_has(isa)) continue;
    EXPECT_THROW(qkv::kernels::override_isa_ceiling(isa), qkv::Error);
    EXPECT_EQ(qkv::kernels::isa_ceiling(), before);
  }
}

// QKV_ISA in a child process (read once per process): QKV_ISA_CHILD says
// what the child checks.
std::string run_child(const std::string& isa, const std::string& check) {
  return "QKV_ISA=" + isa + " QKV_ISA_CHILD=" + check + " '" +
         std::filesystem::read_symlink("/proc/self/exe").string() +
         "' --gtest_filter=IsaEnvironment.Child >/dev/null 2>&1";
}

TEST(IsaEnvironment, Child) {
  const char* check = std::getenv("QKV_ISA_CHILD");
  if (check == nullptr) GTEST_SKIP() << "run by the tests below";
  const std::string wanted = std::getenv("QKV_ISA");
  if (std::string(check) == "reaches") {
    // Every family at or below the named level.
    const Isa level = qkv::kernels::isa_ceiling();
    EXPECT_EQ(qkv::kernels::isa_name(level), wanted);
    EXPECT_LE(level_of(qkv::kernels::active_kernel_table().name), level);
    for (Precision p : {Precision::kBFloat16, Precision::kInt8})
      EXPECT_LE(level_of(qkv::kernels::active_low_precision_kernels(p).name), level);
    EXPECT_LE(level_of(qkv::kernels::active_quant_kernels().name), level);
    if (wanted == "avx2" || wanted == "portable") {
      EXPECT_EQ(qkv::kernel_isa(), wanted);
      EXPECT_EQ(qkv::linear_kernel_isa(Precision::kInt8), wanted);
      EXPECT_EQ(qkv::kernels::isa_name(level_of(qkv::kernels::active_quant_kernels().name)),
                wanted);  // avx2: avx2_int16
    }
    return;
  }
  // "refused": every family's first call throws, naming QKV_ISA.
  const auto expect_refused = [&](auto call, const char* family) {
    try {
      call();
      ADD_FAILURE() << family << " ran with QKV_ISA=" << wanted;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("QKV_ISA=" + wanted), std::string::npos) << e.what();
    }
  };
  expect_refused([] { qkv::kernels::active_kernel_table(); }, "attention");
  expect_refused([] { qkv::kernels::active_low_precision_kernels(Precision::kInt8); }, "int8");
  expect_refused([] { qkv::kernels::active_quant_kernels(); }, "GGUF blocks");
}

TEST(IsaEnvironment, QkvIsaReachesEveryFamily) {
  for (Isa isa : qkv::kernels::supported_isas()) {
    const std::string command = run_child(qkv::kernels::isa_name(isa), "reaches");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
}

TEST(IsaEnvironment, UnknownOrUnsupportedQkvIsaIsAnError) {
  std::vector<std::string> refused = {"avx1024", "AVX2"};
  for (int level = 0; level < qkv::kernels::kIsaCount; ++level)
    if (!qkv::kernels::cpu_has(static_cast<Isa>(level)))
      refused.push_back(qkv::kernels::isa_name(static_cast<Isa>(level)));
  for (const std::string& isa : refused) {
    const std::string command = run_child(isa, "refused");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
}

}  // namespace
