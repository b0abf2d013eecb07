// Arguments that used to crash or answer wrongly without a word: sizes whose
// products wrap around 64 bits, NaN that the float64 path turned into zeros,
// and long attention calls that could not be stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"
#include "test_util.h"

using namespace qkv;

namespace {

using qkv_test::expect_error;

constexpr int64_t k2to31 = int64_t{1} << 31;
constexpr int64_t k2to62 = int64_t{1} << 62;

// --- Sizes -------------------------------------------------------------------

// 2^31 x 2^31 float32 is 2^64 bytes: the byte count wrapped to 0 and the
// buffer of 64 bytes was then written as if it were 16 EiB.
TEST(HostileSizes, ByteCountPast64BitsIsAnError) {
  expect_error([] { Tensor::empty({k2to31, k2to31}); }, ErrorKind::kValue, "2^63 bytes");
  expect_error(
      [] {
        Tensor::zeros({k2to31, k2to31}, DType::kFloat64);
      },
      ErrorKind::kValue, "[2147483648, 2147483648]");
  expect_error([] { nn::Linear({.in_features = k2to31, .out_features = k2to31}); },
               ErrorKind::kValue, "2^63 bytes");
  expect_error([] { nn::MultiheadAttention({.embed_dim = k2to31, .num_heads = 1}); },
               ErrorKind::kValue, "");
}

// An element count past int64 (the check of old) and one that fits in int64
// but whose allocation no machine has: a clean MemoryError-kind error. (Under
// AddressSanitizer a failed allocation ends the process by design.)
TEST(HostileSizes, ElementCountAndAllocationFailure) {
  expect_error([] { Tensor::empty({k2to62, 4}); }, ErrorKind::kValue, "64-bit size");
  if (!qkv_test::kSanitized)
    expect_error(
        [] {
          Tensor::empty({int64_t{1} << 44, 1 << 10});
        },
        ErrorKind::kMemory, "cannot allocate");
}

// [0, 2^62, 2^62] holds no element, but its strides overflow int64 (UBSan:
// signed overflow in contiguous_strides).
TEST(HostileSizes, StridesThatOverflowAreAnError) {
  expect_error([] { contiguous_strides({0, k2to62, k2to62}); }, ErrorKind::kValue, "64-bit");
  expect_error([] { Tensor::empty({0, k2to62, k2to62}); }, ErrorKind::kValue, "64-bit");
  EXPECT_EQ(contiguous_strides({0, 3, 4}), (Strides{12, 4, 1}));  // as torch
  EXPECT_EQ(Tensor::empty({0, k2to31, k2to31}).numel(), 0);
}

// Views: a broadcast to an overflowing or negative shape, a reshape whose
// known sizes overflow, a blob whose last element lies past int64.
TEST(HostileSizes, ViewsCheckTheirSizes) {
  const Tensor one = Tensor::zeros({1, 1});
  expect_error([&] { one.expand({k2to62, k2to62}); }, ErrorKind::kValue, "64-bit");
  expect_error([&] { one.expand({-5, 1}); }, ErrorKind::kValue, "non-negative");
  expect_error([&] { Tensor::zeros({0}).reshape({k2to62, k2to62, 0}); }, ErrorKind::kValue, "");
  float x = 0;
  expect_error(
      [&] {
        Tensor::from_blob(&x, {3, 2}, {k2to62, k2to62}, DType::kFloat32, nullptr);
      },
      ErrorKind::kValue, "offset");
  EXPECT_EQ(Tensor::from_blob(&x, {1, 1}, {k2to62, k2to62}, DType::kFloat32, nullptr).numel(), 1);
}

// --- The NaN/inf contract on every path and dtype ------------------------------

// float32 on the fused kernel always raised; float64 (the reference) wrote
// zeros for a query row with NaN, as if all its keys were masked.
TEST(HostileValues, NonFiniteInputsRaiseOnEveryBackendAndDtype) {
  Generator gen(1);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (SdpaBackend backend : {SdpaBackend::kAuto, SdpaBackend::kReference}) {
      for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
        for (int which = 0; which < 3; ++which) {
          Tensor t[3] = {Tensor::randn({1, 2, 5, 8}, gen, dtype),
                         Tensor::randn({1, 2, 6, 8}, gen, dtype),
                         Tensor::randn({1, 2, 6, 8}, gen, dtype)};
          t[which].select(2, 1).select(0, 0).select(0, 0).fill(bad);
          SdpaOptions options;
          options.backend = backend;
          const char* names[] = {"query", "key", "value"};
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + names[which]);
          expect_error([&] { scaled_dot_product_attention(t[0], t[1], t[2], options); },
                       ErrorKind::kValue, names[which]);
        }
      }
    }
  }
}

// bfloat16 inputs (widened to float32 inside) and finite inputs whose scores
// overflow float32 are errors too, not NaN in the output.
TEST(HostileValues, BFloat16NaNAndOverflowRaise) {
  Generator gen(4);
  Tensor q = Tensor::randn({1, 2, 5, 8}, gen).to(DType::kBFloat16);
  const Tensor k = Tensor::randn({1, 2, 6, 8}, gen).to(DType::kBFloat16);
  q.select(2, 4).fill(std::nan(""));
  expect_error([&] { scaled_dot_product_attention(q, k, k); }, ErrorKind::kValue,
               "query of shape [1, 2, 5, 8] contains NaN");
  const Tensor huge = Tensor::full({1, 1, 3, 4}, 1e30);
  expect_error([&] { scaled_dot_product_attention(huge, huge, huge); }, ErrorKind::kValue,
               "overflowed to NaN/inf although query, key and value are finite");
}

TEST(HostileValues, BackwardChecksItsInputs) {
  Generator gen(2);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor q = Tensor::randn({1, 2, 5, 8}, gen, dtype);
    const Tensor k = Tensor::randn({1, 2, 6, 8}, gen, dtype);
    const Tensor v = Tensor::randn({1, 2, 6, 8}, gen, dtype);
    const SdpaResult forward = scaled_dot_product_attention(q, k, v);
    Tensor bad_k = k.clone();
    bad_k.select(2, 3).fill(std::nan(""));
    expect_error(
        [&] {
          scaled_dot_product_attention_backward(Tensor::ones(forward.output.shape(), dtype), q,
                                                bad_k, v, forward);
        },
        ErrorKind::kValue, "key");
  }
}

// bfloat16 tensors: on a table that reads them directly (amx) the inputs are
// checked through the gradients; a NaN anywhere the products meet is named.
TEST(HostileValues, BfloatBackwardNamesTheNonFiniteInput) {
  Generator gen(3);
  const Tensor q = Tensor::randn({1, 2, 7, 16}, gen).to(DType::kBFloat16);
  const Tensor k = Tensor::randn({1, 2, 9, 16}, gen).to(DType::kBFloat16);
  const Tensor v = Tensor::randn({1, 2, 9, 16}, gen).to(DType::kBFloat16);
  const SdpaResult forward = scaled_dot_product_attention(q, k, v);
  const Tensor grad = Tensor::ones(forward.output.shape(), DType::kBFloat16);
  auto with_nan = [](const Tensor& t) {
    Tensor bad = t.clone();
    bad.select(2, 3).fill(std::nan(""));
    return bad;
  };
  expect_error([&] { scaled_dot_product_attention_backward(grad, q, with_nan(k), v, forward); },
               ErrorKind::kValue, "key of shape");
  expect_error([&] { scaled_dot_product_attention_backward(grad, q, k, with_nan(v), forward); },
               ErrorKind::kValue, "value of shape");
  expect_error([&] { scaled_dot_product_attention_backward(with_nan(grad), q, k, v, forward); },
               ErrorKind::kValue, "grad_output of shape");
  const SdpaGradients ok = scaled_dot_product_attention_backward(grad, q, k, v, forward);
  EXPECT_EQ(ok.query.dtype(), DType::kBFloat16);
  for (double x : ok.key.to_vector()) EXPECT_TRUE(std::isfinite(x));
}

// --- Interrupting long calls ---------------------------------------------------

std::atomic<int> checks{0};
bool interrupt_now() {
  ++checks;
  return true;
}

// Installs `check` for the test's duration.
struct InterruptCheckScope {
  explicit InterruptCheckScope(InterruptCheck check) { set_interrupt_check(check); }
  ~InterruptCheckScope() { set_interrupt_check(nullptr); }
};

// Each call runs far longer than the 50 ms between checks, unless stopped:
// it must end with kInterrupted soon after the first check, and the next call
// (no check installed) must run to the end and be right.
TEST(Interrupt, LongAttentionCallsStopBetweenBlocks) {
  Generator gen(3);
  struct Case {
    const char* name;
    DType dtype;
    int64_t L;
    bool backward;
  };
  for (const Case c : {Case{"fused forward", DType::kFloat32, 8192, false},
                       Case{"fused backward", DType::kFloat32, 4096, true},
                       Case{"reference forward", DType::kFloat64, 1024, false},
                       Case{"reference backward", DType::kFloat64, 1024, true}}) {
    SCOPED_TRACE(c.name);
    const Tensor q = Tensor::randn({1, 2, c.L, 64}, gen, c.dtype);
    SdpaResult forward;
    if (c.backward) forward = scaled_dot_product_attention(q, q, q);
    auto run = [&] {
      if (c.backward)
        scaled_dot_product_attention_backward(forward.output, q, q, q, forward);
      else
        scaled_dot_product_attention(q, q, q);
    };
    checks = 0;
    {
      InterruptCheckScope scope(&interrupt_now);
      const auto start = std::chrono::steady_clock::now();
      expect_error(run, ErrorKind::kInterrupted, "interrupted");
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_EQ(checks.load(), 1);
      EXPECT_LT(seconds, 5.0);
    }
  }
  // Afterwards: a call runs through (its result held to the reference).
  const Tensor q = Tensor::randn({1, 2, 300, 16}, gen);
  const Tensor fused = scaled_dot_product_attention(q, q, q).output;
  SdpaOptions reference;
  reference.backend = SdpaBackend::kReference;
  const Tensor ref = scaled_dot_product_attention(q, q, q, reference).output;
  double worst = 0;
  for (int64_t i = 0; i < fused.numel(); ++i)
    worst = std::max<double>(worst, std::abs(fused.data<float>()[i] - ref.data<float>()[i]));
  EXPECT_LT(worst, 1e-5);
}

// Encoding a corpus is many short calls: the encoder polls between batches.
TEST(Interrupt, SentenceEncoderStopsBetweenBatches) {
  QKV_SKIP_WITHOUT_MINILM();
  const models::SentenceEncoder encoder(qkv_test::minilm_dir());
  const std::vector<std::string> texts(20000, "A sentence that takes a moment to embed.");
  checks = 0;
  InterruptCheckScope scope(&interrupt_now);
  const auto start = std::chrono::steady_clock::now();
  // Heard while tokenizing, between batches or between a batch's layers
  // (BertModel::forward), whichever check comes first.
  expect_error([&] { encoder.encode(texts, 8); }, ErrorKind::kInterrupted, ": interrupted");
  EXPECT_EQ(checks.load(), 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

}  // namespace
