// nn::TransformerDecoderCache and nn::TransformerDecoderSession: incremental
// decoding of nn::Transformer on the decoder's own step() (transformer_decoder.cc).
#include "qkv/nn/transformer_decoding.h"

#include "nn/transformer_common.h"
#include "qkv/masks.h"

namespace qkv::nn {

namespace {

// Checks what TransformerDecoderCache is given; the self-attention cache it needs.
KVCacheOptions self_attention_cache(TransformerDecoder& decoder, const Tensor& memory,
                                    int64_t max_len) {
  const char* fn = "TransformerDecoderCache";
  const TransformerLayerOptions& o = decoder.layers().front().options();
  QKV_CHECK(!decoder.is_training() || o.dropout == 0.0, fn,
            ": the decoder is in training mode with dropout ", o.dropout,
            "; call model.eval() before decoding");
  QKV_CHECK(max_len > 0, fn, ": max_len must be > 0, got ", max_len);
  QKV_CHECK(memory.defined() && memory.dim() == 3 && memory.size(2) == o.d_model, fn,
            ": memory must be batch-first [B, S, d_model=", o.d_model, "], got ",
            memory.defined() ? shape_str(memory.shape()) : std::string("undefined"));
  QKV_CHECK_TYPE(memory.dtype() == o.dtype, fn, ": memory must have the decoder's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(memory.dtype()));
  return {.num_layers = static_cast<int64_t>(decoder.layers().size()),
          .batch_size = memory.size(0),
          .num_kv_heads = o.nhead,
          .max_len = max_len,
          .head_dim = o.d_model / o.nhead,
          .dtype = o.dtype};
}

}  // namespace

TransformerDecoderCache::TransformerDecoderCache(TransformerDecoder& decoder, const Tensor& memory,
                                                 const Tensor& memory_key_padding_mask,
                                                 int64_t max_len)
    : self_attn(self_attention_cache(decoder, memory, max_len)) {
  const int64_t B = memory.size(0), S = memory.size(1);
  if (const Tensor& p = memory_key_padding_mask; p.defined()) {
    QKV_CHECK(p.shape() == Shape({B, S}),
              "TransformerDecoderCache: memory_key_padding_mask must be ", shape_str({B, S}),
              " (the memory's [B, S]), got ", shape_str(p.shape()));
    // torch's polarity (True = padding) -> SDPA's (True = take part), per key.
    const Tensor rows = p.reshape({B, 1, 1, S});
    memory_mask = p.dtype() == DType::kBool ? logical_not(rows) : rows.to(memory.dtype());
  }
  for (const TransformerDecoderLayer& layer : decoder.layers())
    this->memory.push_back(layer.project_memory(memory));
}

TransformerDecoderSession::TransformerDecoderSession(Transformer& model, int64_t max_len)
    : model_(model), max_len_(max_len) {
  QKV_CHECK(max_len > 0, "TransformerDecoderSession: max_len must be > 0, got ", max_len);
}

void TransformerDecoderSession::encode(const Tensor& src, const TransformerEncodeArgs& args) {
  const Tensor memory =
      model_.encoder().forward(src, {.mask = args.src_mask,
                                     .src_key_padding_mask = args.src_key_padding_mask,
                                     .is_causal = args.src_is_causal});
  set_memory(memory, args.memory_key_padding_mask);
}

void TransformerDecoderSession::set_memory(const Tensor& memory,
                                           const Tensor& memory_key_padding_mask) {
  const char* m = "TransformerDecoderSession";
  const bool batch_first = model_.options().batch_first;
  detail::check_sequence(m, "memory", memory, model_.decoder().layers().front().options());
  const bool unbatched = memory.dim() == 2;
  Tensor padding = memory_key_padding_mask;
  if (unbatched && padding.defined()) {
    QKV_CHECK(padding.shape() == Shape{memory.size(0)}, m,
              ": memory_key_padding_mask of an unbatched memory must be [S] = ",
              shape_str({memory.size(0)}), ", got ", shape_str(padding.shape()));
    padding = padding.unsqueeze(0);
  }
  cache_.reset();
  cache_.emplace(model_.decoder(),
                 unbatched ? memory.unsqueeze(0) : (batch_first ? memory : memory.transpose(0, 1)),
                 padding, max_len_);
  unbatched_ = unbatched;
}

Tensor TransformerDecoderSession::step(const Tensor& tgt) {
  const char* m = "TransformerDecoderSession::step";
  const bool batch_first = model_.options().batch_first;
  QKV_CHECK(cache_.has_value(), m, ": no memory yet; call encode(src) or set_memory() first");
  QKV_CHECK(tgt.defined() && tgt.dim() == (unbatched_ ? 2 : 3), m, ": tgt must be ",
            unbatched_ ? "[T, D]" : (batch_first ? "[B, T, D]" : "[T, B, D]"),
            " (batched as the memory), got ",
            tgt.defined() ? shape_str(tgt.shape()) : std::string("undefined"));
  if (unbatched_) return model_.decoder().step(tgt.unsqueeze(0), *cache_).squeeze(0);
  if (batch_first) return model_.decoder().step(tgt, *cache_);
  return model_.decoder().step(tgt.transpose(0, 1), *cache_).transpose(0, 1).contiguous();
}

}  // namespace qkv::nn
