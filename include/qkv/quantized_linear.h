// Linear layers on GGUF block-quantised weights, kept quantised in memory
// (issue 19): the Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and IQ4_NL
// blocks of llama.cpp's files, read in place (e.g. from the file's mmap) or from a copy.
//
//   QuantizedWeight w(QuantFormat::kQ4_1, out, in, bytes);   // [out, in]
//   Tensor y = linear(x, w, bias);        // = linear(x, w.dequantize(), bias)
//                                         //   up to float32 rounding (but see below)
//
// The products are float32 products with the dequantised weights: one or a
// few rows (decoding) decode each block in registers and stream W once; more
// rows (a prompt) dequantise panels of W and run sgemm, x not rounded.
// Except, by default, where the CPU has integer dot products (AVX2's
// vpmaddwd, AVX512_VNNI's vpdpwssd): there x is rounded to 16 bits per block
// of 32 (dx = max|x| / 32767, |x − x̂| ≤ 0.51·dx, ~1.6e-5 of the block's
// largest |x|) and int16 products are summed exactly, then scaled (SmolLM2's
// greedy choices unchanged; the bound in kernels/quant_gemm.h) — on the
// few-rows path for every format, and with AVX512_VNNI on the prompt path too.
// Opt-in, as llama.cpp does by default: with QKV_INT8_DECODE=1 in the
// environment the few-rows path rounds x to 8 bits instead (dx = max|x| /
// 127) and sums int8 products: faster still on the Q8_0 head, and its results
// differ from the prompt path's by that rounding (SmolLM2's logits by 2-5%,
// enough to change some greedy choices).
// NaN and Inf in x propagate to the outputs they meet.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "qkv/quant_format.h"
#include "qkv/tensor.h"

namespace qkv {

namespace kernels {
struct QuantMatrix;
}

// The reference dequantisation: out[0, n) from the n / block blocks at
// `blocks` (n a multiple of the block). Every weight is its exact value (fp16
// scales times small integers) rounded once to float32, as in ggml.
void dequantize_row(QuantFormat format, const void* blocks, float* out, int64_t n);

// W [out_features, in_features] in one block format: out_features rows of
// in_features / block blocks, row-major (GGUF: ne[0] = in_features, the
// contiguous dim; ne[1] = out_features). Immutable; copies share the bytes.
class QuantizedWeight {
 public:
  QuantizedWeight() = default;  // empty: no weight
  // A copy of `bytes`, which must be exactly out · in / block · block_bytes
  // long, in_features a positive multiple of the block, out_features > 0.
  // A block whose fp16 scale (or min) is NaN or Inf is rejected (it would
  // turn every output it meets into NaN or Inf).
  QuantizedWeight(QuantFormat format, int64_t out_features, int64_t in_features,
                  std::span<const std::byte> bytes);
  // The same checks, but reading `data` in place: `owner` keeps it alive (a
  // file's mapping); nothing is copied.
  QuantizedWeight(QuantFormat format, int64_t out_features, int64_t in_features, const void* data,
                  int64_t size_bytes, std::shared_ptr<const void> owner);

  bool empty() const { return state_ == nullptr; }
  QuantFormat format() const;
  int64_t in_features() const;
  int64_t out_features() const;
  int64_t bytes() const;  // the quantised bytes (held or referenced)
  const kernels::QuantMatrix& matrix() const;

  // float32 [out_features, in_features], bit-equal to dequantize_row.
  Tensor dequantize() const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

// y = x Wᵀ + b with float32 x, bias and result.
// x: [..., in]  bias: [out] or undefined  ->  [..., out]
Tensor linear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias = {});
// The same into a preallocated `out` not overlapping x: its rows evenly spaced
// with a contiguous last dim; x and bias contiguous. Allocates nothing on the
// few-rows route.
void linear_into(Tensor& out, const Tensor& x, const QuantizedWeight& weight,
                 const Tensor& bias = {});

// One product of linear_into_each: *out = x Wᵀ + bias, as linear_into's.
struct QuantizedLinearInto {
  Tensor* out = nullptr;
  const QuantizedWeight* weight = nullptr;
  const Tensor* bias = nullptr;  // null or undefined: none
};
// linear_into for up to kMaxLinearIntoEach weights meeting the same x (a
// decoding step's q, k and v projections): each out as linear_into gives it,
// with the threads shared among all the products in one fork/join on the
// few-rows route. Allocates nothing.
inline constexpr size_t kMaxLinearIntoEach = 8;
void linear_into_each(const Tensor& x, std::span<const QuantizedLinearInto> products);

// Rows of a quantised table (a token embedding), dequantised: as embedding()
// of functional.h. ids: shape `shape`, each in [0, out_features)
// -> shape + [in_features]
Tensor embedding(const std::vector<int64_t>& ids, const Shape& shape,
                 const QuantizedWeight& weight);
// The same into a contiguous float32 `out` [..., in_features] of ids.size() rows.
void embedding_into(Tensor& out, std::span<const int64_t> ids, const QuantizedWeight& weight);

}  // namespace qkv
