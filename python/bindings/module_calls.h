// The forward arguments of qkv.nn's attention modules, read from the one
// tuple the Python classes pass (python/qkv/nn gives them torch's signatures
// and defaults). forward and forward_with_grad (module_backward.cc) read
// them here, in the order of the Python signature.
#pragma once

#include "bindings.h"
#include "convert.h"
#include "options.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/transformer.h"

namespace qkv::python {

inline Tensor sequence_field(Options& a, const char* name) {
  return a.tensor(name, Accept::kFloat);
}

// None, or a bool (True = masked out) or float mask (added).
inline Tensor mask_field(Options& a, const char* name) {
  return a.optional_tensor(name, Accept::kFloatOrBool);
}

// (query, key, value, key_padding_mask, need_weights, attn_mask,
//  average_attn_weights, is_causal)
struct MultiheadAttentionCall {
  Tensor query, key, value;
  nn::MultiheadAttentionForward args;
};
inline MultiheadAttentionCall read_mha_call(Options& a) {
  MultiheadAttentionCall c;
  c.query = sequence_field(a, "query");
  c.key = sequence_field(a, "key");
  c.value = sequence_field(a, "value");
  c.args.key_padding_mask = mask_field(a, "key_padding_mask");
  c.args.need_weights = a.flag("need_weights");
  c.args.attn_mask = mask_field(a, "attn_mask");
  c.args.average_attn_weights = a.flag("average_attn_weights");
  c.args.is_causal = a.flag("is_causal");
  a.done();
  return c;
}

// (src, src_mask, src_key_padding_mask, is_causal)
struct EncoderLayerCall {
  Tensor src;
  nn::TransformerEncoderLayerForward args;
};
inline EncoderLayerCall read_encoder_layer_call(Options& a) {
  EncoderLayerCall c;
  c.src = sequence_field(a, "src");
  c.args.src_mask = mask_field(a, "src_mask");
  c.args.src_key_padding_mask = mask_field(a, "src_key_padding_mask");
  c.args.is_causal = a.flag("is_causal");
  a.done();
  return c;
}

// (src, mask, src_key_padding_mask, is_causal or None)
struct EncoderCall {
  Tensor src;
  nn::TransformerEncoderForward args;
};
inline EncoderCall read_encoder_call(Options& a) {
  EncoderCall c;
  c.src = sequence_field(a, "src");
  c.args.mask = mask_field(a, "mask");
  c.args.src_key_padding_mask = mask_field(a, "src_key_padding_mask");
  c.args.is_causal = a.optional_flag("is_causal");
  a.done();
  return c;
}

// The four masks both decoder kinds take after (tgt, memory):
// tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask.
template <class Args>
void read_decoder_masks(Options& a, Args& args) {
  args.tgt_mask = mask_field(a, "tgt_mask");
  args.memory_mask = mask_field(a, "memory_mask");
  args.tgt_key_padding_mask = mask_field(a, "tgt_key_padding_mask");
  args.memory_key_padding_mask = mask_field(a, "memory_key_padding_mask");
}

// (tgt, memory, the four masks, tgt_is_causal, memory_is_causal); the layer
// takes tgt_is_causal as a bool, the stack also None.
template <class Args>
struct DecoderCall {
  Tensor tgt, memory;
  Args args;
};
template <class Args>
DecoderCall<Args> read_decoder_call(Options& a) {
  DecoderCall<Args> c;
  c.tgt = sequence_field(a, "tgt");
  c.memory = sequence_field(a, "memory");
  read_decoder_masks(a, c.args);
  if constexpr (std::is_same_v<decltype(c.args.tgt_is_causal), bool>)
    c.args.tgt_is_causal = a.flag("tgt_is_causal");
  else
    c.args.tgt_is_causal = a.optional_flag("tgt_is_causal");
  c.args.memory_is_causal = a.flag("memory_is_causal");
  a.done();
  return c;
}
using DecoderLayerCall = DecoderCall<nn::TransformerDecoderLayerForward>;
using DecoderStackCall = DecoderCall<nn::TransformerDecoderForward>;

}  // namespace qkv::python
