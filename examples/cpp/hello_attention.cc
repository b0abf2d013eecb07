// The README's C++ example: multi-head self-attention on a [2, 4, 8] batch,
// then scaled dot-product attention with a padding mask.
#include <iostream>

#include <qkv/qkv.h>

int main() {
  qkv::Generator gen(0);
  qkv::Tensor x = qkv::Tensor::randn({2, 4, 8}, gen);  // [B, L, D]

  qkv::nn::MultiheadAttention mha({.embed_dim = 8, .num_heads = 2, .batch_first = true}, &gen);
  mha.eval();
  auto [out, weights] = mha.forward(x, x, x);
  std::cout << "output " << qkv::shape_str(out.shape()) << ", weights "
            << qkv::shape_str(weights.shape()) << "\n";  // [2, 4, 8], [2, 4, 4]

  // The second sequence has only 3 real tokens: mask the 4th key out.
  qkv::Tensor q = x.view({2, 4, 2, 4}).transpose(1, 2);  // [B, H, L, E]
  qkv::SdpaOptions options;
  options.attn_mask = qkv::key_mask_for_heads(qkv::keep_mask_from_lengths({4, 3}, 4));
  options.need_weights = true;
  qkv::SdpaResult r = qkv::scaled_dot_product_attention(q, q, q, options);
  std::cout << r.weights.select(0, 1).select(0, 0).to_string(2) << "\n";
  return r.weights.at({1, 0, 0, 3}) == 0.0 ? 0 : 1;  // the padded key got no weight
}
