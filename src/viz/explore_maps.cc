// viz::attention_maps: each layer's attention run again through qkv's SDPA with
// need_weights, its masks found by the same kernel, its raw scores q·k.
#include <cmath>

#include "qkv/error.h"
#include "qkv/viz/explore.h"

namespace qkv::viz {

namespace {

// The options of a layer's attention, made to return the weights exactly as
// the layer multiplied them with v, without dropout.
SdpaOptions weights_options(const SdpaOptions& layer) {
  SdpaOptions o = layer;
  o.need_weights = true;
  o.dropout_p = 0.0;
  o.dropout_mask = Tensor();
  o.return_dropout_mask = false;
  return o;
}

// Copies `src` (any layout) into dst[0 .. numel) as float32.
void copy_floats(const Tensor& src, float* dst) {
  const Tensor c = src.to(DType::kFloat32).contiguous();
  const float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i) dst[i] = p[i];
}

}  // namespace

AttentionMaps attention_maps(std::span<const AttentionInputs> layers, int64_t row) {
  const char* fn = "viz::attention_maps";
  QKV_CHECK(!layers.empty(), fn, ": no layers");
  const AttentionInputs& first = layers.front();
  QKV_CHECK(first.q.dim() == 4 && first.k.dim() == 4 && first.v.dim() == 4, fn,
            ": q, k, v must be [B, H, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev], got ",
            shape_str(first.q.shape()), ", ", shape_str(first.k.shape()), ", ",
            shape_str(first.v.shape()));
  const int64_t B = first.q.size(0), H = first.q.size(1), L = first.q.size(2);
  const int64_t Hkv = first.k.size(1), S = first.k.size(2), E = first.q.size(3);
  const int64_t Ev = first.v.size(3);
  QKV_CHECK(row >= 0 && row < B, fn, ": row ", row, " is outside the batch [0, ", B, ")");
  const int64_t N = static_cast<int64_t>(layers.size());

  AttentionMaps maps;
  maps.weights = Tensor::empty({N, H, L, S});
  maps.scores = Tensor::empty({N, H, L, S});
  maps.allowed = Tensor::empty({N, H, L, S}, DType::kBool);
  maps.values = Tensor::empty({N, Hkv, S, Ev});
  const int64_t map_size = H * L * S;
  for (int64_t l = 0; l < N; ++l) {
    const AttentionInputs& in = layers[static_cast<size_t>(l)];
    QKV_CHECK(in.q.shape() == first.q.shape() && in.k.shape() == first.k.shape() &&
                  in.v.shape() == first.v.shape(),
              fn, ": layer ", l, " has q, k, v of shapes ", shape_str(in.q.shape()), ", ",
              shape_str(in.k.shape()), ", ", shape_str(in.v.shape()), "; layer 0 has ",
              shape_str(first.q.shape()), ", ", shape_str(first.k.shape()), ", ",
              shape_str(first.v.shape()));
    const SdpaOptions options = weights_options(in.sdpa);
    const SdpaResult attention = scaled_dot_product_attention(in.q, in.k, in.v, options);
    copy_floats(attention.weights.select(0, row), maps.weights.data<float>() + l * map_size);

    // Masked: no weight even when every score is 0 (ALiBi is a bias, not a mask).
    SdpaOptions probe = options;
    probe.alibi_slopes.clear();
    const Tensor uniform =
        scaled_dot_product_attention(Tensor::zeros(in.q.shape(), in.q.dtype()), in.k, in.v, probe)
            .weights.select(0, row)
            .to(DType::kFloat64)
            .contiguous();
    const double* u = uniform.data<double>();
    bool* allowed = maps.allowed.data<bool>() + l * map_size;
    for (int64_t i = 0; i < map_size; ++i) allowed[i] = u[i] > 0.0;

    // q·k of query head h against key/value head h / (H / Hkv) (GQA).
    const Tensor q = in.q.select(0, row).to(DType::kFloat64).contiguous();
    const Tensor k = in.k.select(0, row).to(DType::kFloat64).contiguous();
    const int64_t group = options.enable_gqa ? H / Hkv : 1;
    float* scores = maps.scores.data<float>() + l * map_size;
    for (int64_t h = 0; h < H; ++h) {
      const double* qh = q.data<double>() + h * L * E;
      const double* kh = k.data<double>() + (h / group) * S * E;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < E; ++e) dot += qh[i * E + e] * kh[j * E + e];
          scores[(h * L + i) * S + j] = static_cast<float>(dot);
        }
    }
    copy_floats(in.v.select(0, row), maps.values.data<float>() + l * Hkv * S * Ev);
    maps.scales.push_back(options.scale.value_or(1.0 / std::sqrt(static_cast<double>(E))));
  }
  return maps;
}

}  // namespace qkv::viz
