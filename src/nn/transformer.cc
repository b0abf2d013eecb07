// nn::Transformer: encoder + decoder with final norms, as torch.nn.Transformer.
#include "qkv/nn/transformer.h"

#include <limits>

#include "nn/module_util.h"
#include "nn/transformer_common.h"

namespace qkv::nn {

namespace {

TransformerLayerOptions layer_options(const TransformerOptions& o) {
  return {.d_model = o.d_model,
          .nhead = o.nhead,
          .dim_feedforward = o.dim_feedforward,
          .dropout = o.dropout,
          .activation = o.activation,
          .layer_norm_eps = o.layer_norm_eps,
          .batch_first = o.batch_first,
          .norm_first = o.norm_first,
          .bias = o.bias,
          .dtype = o.dtype};
}

const TransformerOptions& checked(const TransformerOptions& o) {
  detail::checked_layer_options("Transformer", layer_options(o));
  QKV_CHECK(o.num_encoder_layers > 0 && o.num_decoder_layers > 0,
            "Transformer: num_encoder_layers and num_decoder_layers must be > 0, got ",
            o.num_encoder_layers, " and ", o.num_decoder_layers);
  return o;
}

}  // namespace

Transformer::Transformer(const TransformerOptions& options, Generator* gen)
    : ModuleBase("Transformer", checked(options)),
      encoder_(
          {.layer = layer_options(options), .num_layers = options.num_encoder_layers, .norm = true},
          gen),
      decoder_(
          {.layer = layer_options(options), .num_layers = options.num_decoder_layers, .norm = true},
          gen) {
  // torch's _reset_parameters: xavier_uniform_ on every parameter with dim > 1
  // (the attention projections and linear1/linear2 weights of every layer),
  // so that the cloned layers no longer share values.
  Generator& g = gen ? *gen : default_generator();
  // state_dict() shares the parameters: copying into its entries sets them.
  for (const auto& [name, p] : state_dict())
    if (p.dim() > 1) Tensor(p).copy_from(detail::xavier_uniform(p.shape(), g, p.dtype()));
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerForward& args,
                            TransformerRecord* record) {
  const TransformerLayerOptions o = layer_options(options_);
  detail::check_sequence("Transformer", "src", src, o);
  detail::check_sequence("Transformer", "tgt", tgt, o);
  QKV_CHECK(src.dim() == tgt.dim(), "Transformer: src and tgt must both be batched (3-D) or both ",
            "unbatched (2-D), got src ", shape_str(src.shape()), " and tgt ",
            shape_str(tgt.shape()));
  QKV_CHECK(detail::batch_size(src, o.batch_first) == detail::batch_size(tgt, o.batch_first),
            "Transformer: the batch number of src and tgt must be equal, got src ",
            shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()),
            (o.batch_first ? " (batch_first)" : " (batch is dim 1 unless batch_first)"));
  const Tensor memory = encoder_.forward(src,
                                         {.mask = args.src_mask,
                                          .src_key_padding_mask = args.src_key_padding_mask,
                                          .is_causal = args.src_is_causal},
                                         record ? &record->encoder : nullptr);
  return decoder_.forward(tgt, memory,
                          {.tgt_mask = args.tgt_mask,
                           .memory_mask = args.memory_mask,
                           .tgt_key_padding_mask = args.tgt_key_padding_mask,
                           .memory_key_padding_mask = args.memory_key_padding_mask,
                           .tgt_is_causal = args.tgt_is_causal,
                           .memory_is_causal = args.memory_is_causal},
                          record ? &record->decoder : nullptr);
}

TransformerInputGradients Transformer::backward(const Tensor& grad_output,
                                                const TransformerRecord& record) {
  // return decoder(tgt, memory = encoder(src))
  const TransformerDecoderInputGradients g = decoder_.backward(grad_output, record.decoder);
  return {encoder_.backward(g.memory, record.encoder), g.tgt};
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, DType dtype) {
  QKV_CHECK(sz >= 0, "Transformer::generate_square_subsequent_mask: sz must be >= 0, got ", sz);
  QKV_CHECK_TYPE(is_floating(dtype),
                 "Transformer::generate_square_subsequent_mask: dtype must be floating, got ",
                 dtype_name(dtype));
  Tensor mask = Tensor::zeros({sz, sz}, dtype);
  for (int64_t i = 0; i < sz; ++i)
    for (int64_t j = i + 1; j < sz; ++j) mask.set({i, j}, -std::numeric_limits<double>::infinity());
  return mask;
}

void Transformer::list_members(MemberList& m) {
  m.module("encoder", encoder_);
  m.module("decoder", decoder_);
}

}  // namespace qkv::nn
