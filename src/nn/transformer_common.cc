#include "nn/transformer_common.h"

#include <cmath>

#include "nn/module_util.h"
namespace qkv::nn::detail {

const TransformerLayerOptions& checked_layer_options(const char* module,
                                                     const TransformerLayerOptions& o) {
  detail::check_floating_dtype(module, o.dtype);
  QKV_CHECK(o.d_model > 0 && o.nhead > 0 && o.dim_feedforward > 0, module,
            ": d_model, nhead and dim_feedforward must be > 0, got d_model=", o.d_model,
            ", nhead=", o.nhead, ", dim_feedforward=", o.dim_feedforward);
  QKV_CHECK(o.d_model % o.nhead == 0, module, ": d_model (", o.d_model,
            ") must be divisible by nhead (", o.nhead, ")");
  QKV_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0, module,
            ": dropout probability must be in [0, 1], got ", o.dropout);
  QKV_CHECK(o.layer_norm_eps >= 0.0 && std::isfinite(o.layer_norm_eps), module,
            ": layer_norm_eps must be finite and >= 0, got ", o.layer_norm_eps);
  return o;
}

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return {.embed_dim = o.d_model,
          .num_heads = o.nhead,
          .dropout = o.dropout,
          .bias = o.bias,
          .batch_first = o.batch_first,
          .dtype = o.dtype};
}

FeedForwardOptions feed_forward_options(const TransformerLayerOptions& o) {
  return {.d_model = o.d_model,
          .dim_feedforward = o.dim_feedforward,
          .dropout = o.dropout,
          .activation = o.activation,
          .bias = o.bias,
          .dtype = o.dtype};
}

LayerNormOptions layer_norm_options(const TransformerLayerOptions& o) {
  return {
      .normalized_shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias, .dtype = o.dtype};
}

void check_sequence(const char* module, const char* name, const Tensor& x,
                    const TransformerLayerOptions& o) {
  QKV_CHECK(x.defined(), module, ": ", name, " is undefined");
  QKV_CHECK_TYPE(x.dtype() == o.dtype, module, ": ", name, " must have the module's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(x.dtype()));
  QKV_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(-1) == o.d_model, module, ": ", name,
            " must be ", (o.batch_first ? "[B, L, d_model]" : "[L, B, d_model]"),
            " or unbatched [L, d_model] with d_model = ", o.d_model, ", got shape ",
            shape_str(x.shape()));
}

int64_t batch_size(const Tensor& x, bool batch_first) {
  return x.dim() == 3 ? x.size(batch_first ? 0 : 1) : 1;
}

int64_t sequence_length(const Tensor& x, bool batch_first) {
  return x.dim() == 3 && batch_first ? x.size(1) : x.size(0);
}

bool detect_is_causal_mask(const Tensor& mask, std::optional<bool> is_causal, int64_t size) {
  if (is_causal) return *is_causal;
  if (!mask.defined() || mask.shape() != Shape{size, size}) return false;
  const std::vector<double> m = mask.to_vector();
  const bool is_bool = mask.dtype() == DType::kBool;
  for (int64_t i = 0; i < size; ++i)
    for (int64_t j = 0; j < size; ++j) {
      const double x = m[i * size + j];
      const bool masked = is_bool ? x != 0.0 : x == -INFINITY;
      const bool open = x == 0.0;  // False or 0.0
      if (j > i ? !masked : !open) return false;
    }
  return true;
}

}  // namespace qkv::nn::detail

namespace qkv::nn {

std::optional<LayerNorm> transformer_stack_norm(const TransformerStackOptions& options) {
  if (!options.norm) return std::nullopt;
  return LayerNorm(detail::layer_norm_options(options.layer));
}

}  // namespace qkv::nn
