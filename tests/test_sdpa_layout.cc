// SdpaLayout::kLikeInputs: the output laid out like the query and the
// gradients like their inputs (the heads of [B, L, H, E] buffers, as Hugging
// Face passes them), written through the strides, bit-equal to the
// contiguous results.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "kernels/fused_attention.h"
#include "qkv/attention.h"
#include "qkv/masks.h"

using namespace qkv;

namespace {

// The heads of a fresh [B, L, H, E] buffer, as [B, H, L, E].
Tensor heads_of_buffer(int64_t B, int64_t H, int64_t L, int64_t E, Generator& gen,
                       DType dtype = DType::kFloat32) {
  Tensor x = Tensor::randn({B, L, H, E}, gen);
  if (dtype != DType::kFloat32) x = x.to(dtype);
  return x.transpose(1, 2);
}

// The strides of the heads of a [B, L, H, E] buffer.
Strides heads_strides(int64_t H, int64_t L, int64_t E) { return {L * H * E, E, H * E, 1}; }

struct Case {
  std::string name;
  Tensor q, k, v;
  SdpaOptions options;
};

std::vector<Case> strided_cases() {
  Generator gen(11);
  std::vector<Case> cases;
  auto add = [&](std::string name, int64_t B, int64_t H, int64_t Hkv, int64_t L, int64_t S,
                 int64_t E, int64_t Ev, SdpaOptions o, DType dtype = DType::kFloat32) {
    Case c{std::move(name), heads_of_buffer(B, H, L, E, gen, dtype),
           heads_of_buffer(B, Hkv, S, E, gen, dtype), heads_of_buffer(B, Hkv, S, Ev, gen, dtype),
           o};
    cases.push_back(std::move(c));
  };
  SdpaOptions plain;
  add("plain", 2, 3, 3, 37, 37, 32, 32, plain);
  SdpaOptions causal;
  causal.causal = CausalMask::kTopLeft;
  add("causal", 2, 4, 4, 70, 70, 16, 16, causal);
  SdpaOptions gqa = causal;
  gqa.enable_gqa = true;
  add("gqa", 2, 6, 2, 33, 33, 32, 32, gqa);
  add("value dim differs", 2, 3, 3, 19, 23, 32, 24, plain);
  SdpaOptions window = causal;
  window.window_left = 7;
  window.softcap = 30.0;
  add("window and softcap", 1, 4, 4, 50, 50, 64, 64, window);
  SdpaOptions masked;
  masked.attn_mask = key_mask_for_heads(keep_mask_from_lengths({29, 11}, 29));
  add("padding mask", 2, 3, 3, 29, 29, 32, 32, masked);
  SdpaOptions bf16_products = causal;
  bf16_products.precision = Precision::kBFloat16;
  add("bfloat16 products", 2, 3, 3, 41, 41, 64, 64, bf16_products);
  add("bfloat16 inputs", 2, 3, 3, 41, 41, 64, 64, causal, DType::kBFloat16);
  SdpaOptions reference = causal;
  reference.backend = SdpaBackend::kReference;
  add("reference float64", 2, 3, 3, 21, 21, 16, 16, reference, DType::kFloat64);
  add("one query", 3, 4, 4, 1, 40, 32, 32, plain);
  SdpaOptions decode_gqa;
  decode_gqa.enable_gqa = true;
  decode_gqa.causal = CausalMask::kBottomRight;
  add("one query, GQA", 2, 6, 2, 1, 300, 64, 64, decode_gqa);
  return cases;
}

SdpaOptions laid_out_like_inputs(SdpaOptions o) {
  o.layout = SdpaLayout::kLikeInputs;
  return o;
}

}  // namespace

TEST(SdpaLayout, OutputTakesTheQueryLayoutBitEqual) {
  for (const Case& c : strided_cases()) {
    SCOPED_TRACE(c.name);
    const SdpaResult contiguous = scaled_dot_product_attention(c.q, c.k, c.v, c.options);
    const SdpaResult laid_out =
        scaled_dot_product_attention(c.q, c.k, c.v, laid_out_like_inputs(c.options));
    EXPECT_TRUE(contiguous.output.is_contiguous());
    const int64_t H = c.q.size(1), L = c.q.size(2), Ev = c.v.size(3);
    if (L > 1) EXPECT_EQ(laid_out.output.strides(), heads_strides(H, L, Ev));
    EXPECT_EQ(laid_out.output.shape(), contiguous.output.shape());
    EXPECT_EQ(max_abs_diff(laid_out.output, contiguous.output), 0.0);
    EXPECT_EQ(max_abs_diff(laid_out.logsumexp, contiguous.logsumexp), 0.0);
  }
}

// On every kernel table this machine runs (AVX-512, AVX2, portable, AMX).
TEST(SdpaLayout, EveryKernelTableWritesTheStridedOutput) {
  Generator gen(12);
  const Tensor q = heads_of_buffer(2, 4, 45, 64, gen), k = heads_of_buffer(2, 4, 45, 64, gen);
  const Tensor v = heads_of_buffer(2, 4, 45, 64, gen);
  for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
    SCOPED_TRACE(table->name);
    kernels::override_kernel_table(table);
    for (Precision precision : {Precision::kFloat32, Precision::kBFloat16}) {
      SdpaOptions o;
      o.causal = CausalMask::kTopLeft;
      o.precision = precision;
      const Tensor expected = scaled_dot_product_attention(q, k, v, o).output;
      const Tensor out = scaled_dot_product_attention(q, k, v, laid_out_like_inputs(o)).output;
      EXPECT_EQ(out.strides(), heads_strides(4, 45, 64));
      EXPECT_EQ(max_abs_diff(out, expected), 0.0);
    }
  }
  kernels::override_kernel_table(nullptr);
}

TEST(SdpaLayout, GradientsTakeTheirInputsLayoutBitEqual) {
  for (const Case& c : strided_cases()) {
    SCOPED_TRACE(c.name);
    Generator gen(13);
    const SdpaResult forward = scaled_dot_product_attention(c.q, c.k, c.v, c.options);
    Tensor grad_output = Tensor::randn(forward.output.shape(), gen);
    if (c.q.dtype() != DType::kFloat32) grad_output = grad_output.to(c.q.dtype());
    const SdpaGradients contiguous =
        scaled_dot_product_attention_backward(grad_output, c.q, c.k, c.v, forward, c.options);
    const SdpaOptions like = laid_out_like_inputs(c.options);
    const SdpaResult forward_laid_out = scaled_dot_product_attention(c.q, c.k, c.v, like);
    const SdpaGradients laid_out =
        scaled_dot_product_attention_backward(grad_output, c.q, c.k, c.v, forward_laid_out, like);
    for (const auto& [got, want, input] : {std::tuple{&laid_out.query, &contiguous.query, &c.q},
                                           std::tuple{&laid_out.key, &contiguous.key, &c.k},
                                           std::tuple{&laid_out.value, &contiguous.value, &c.v}}) {
      EXPECT_TRUE(want->is_contiguous());
      EXPECT_EQ(got->shape(), input->shape());
      EXPECT_EQ(got->strides(), input->strides());
      EXPECT_EQ(max_abs_diff(*got, *want), 0.0);
    }
  }
}

// Few (batch, head) problems over two threads: the fused backward sums dQ in
// per-thread buffers that reach one row stride past dQ's last element.
TEST(SdpaLayout, FewHeadsGradientsMatch) {
  Generator gen(14);
  const Tensor q = heads_of_buffer(1, 2, 300, 32, gen), k = heads_of_buffer(1, 2, 300, 32, gen);
  const Tensor v = heads_of_buffer(1, 2, 300, 32, gen);
  SdpaOptions o;
  o.causal = CausalMask::kTopLeft;
  const SdpaResult forward = scaled_dot_product_attention(q, k, v, o);
  const Tensor grad_output = Tensor::randn(forward.output.shape(), gen);
  const SdpaGradients want =
      scaled_dot_product_attention_backward(grad_output, q, k, v, forward, o);
  const SdpaGradients got =
      scaled_dot_product_attention_backward(grad_output, q, k, v, forward, laid_out_like_inputs(o));
  EXPECT_EQ(got.query.strides(), q.strides());
  EXPECT_LT(max_abs_diff(got.query, want.query), 1e-6);
  EXPECT_LT(max_abs_diff(got.key, want.key), 1e-6);
  EXPECT_LT(max_abs_diff(got.value, want.value), 1e-6);
}

// Where the layout cannot follow the query: contiguous inputs stay
// contiguous; a broadcast query, or one whose last dim is not innermost,
// gives a contiguous output. A slice of a packed [B, L, 3, H, E] buffer
// (not dense) gives the packed [B, L, H, E] order.
TEST(SdpaLayout, FallsBackOrPacks) {
  Generator gen(15);
  const SdpaOptions like = laid_out_like_inputs({});
  const Tensor q = Tensor::randn({2, 3, 9, 8}, gen), k = Tensor::randn({2, 3, 9, 8}, gen);
  EXPECT_TRUE(scaled_dot_product_attention(q, k, k, like).output.is_contiguous());
  const Tensor broadcast_q = Tensor::randn({1, 9, 3, 8}, gen).transpose(1, 2);
  EXPECT_TRUE(scaled_dot_product_attention(broadcast_q, k, k, like).output.is_contiguous());
  const Tensor columns_q = Tensor::randn({2, 3, 8, 9}, gen).transpose(2, 3);
  const SdpaResult columns = scaled_dot_product_attention(columns_q, k, k, like);
  EXPECT_TRUE(columns.output.is_contiguous());
  EXPECT_EQ(max_abs_diff(columns.output, scaled_dot_product_attention(columns_q, k, k).output),
            0.0);
  const Tensor packed = Tensor::randn({2, 9, 3, 3, 8}, gen);
  const Tensor sliced_q = packed.select(2, 0).transpose(1, 2);  // [2, 3, 9, 8]
  const SdpaResult sliced = scaled_dot_product_attention(sliced_q, k, k, like);
  EXPECT_EQ(sliced.output.strides(), heads_strides(3, 9, 8));
  EXPECT_EQ(max_abs_diff(sliced.output, scaled_dot_product_attention(sliced_q, k, k).output), 0.0);
}
