// The forward calls of qkv.nn's attention modules. The Python classes
// (python/qkv/nn) give forward and forward_with_grad torch's signatures and
// defaults and pass all the arguments as one tuple; a Call reads it here, in
// the order of the Python signature, and runs the module's forward.
//
//   struct Call {
//     static Call read(Options&);                      // the tuple's fields
//     auto forward(Module&, Record* = nullptr) const;  // module.forward(inputs, args[, record])
//   };
#pragma once

#include <optional>
#include <type_traits>

#include "bindings.h"
#include "convert.h"
#include "module_common.h"
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

// A causal hint: a bool, or for the stacks also None (detect from the mask).
inline void read_hint(Options& a, const char* name, bool& hint) { hint = a.flag(name); }
inline void read_hint(Options& a, const char* name, std::optional<bool>& hint) {
  hint = a.optional_flag(name);
}

// (query, key, value, key_padding_mask, need_weights, attn_mask,
//  average_attn_weights, is_causal)
struct MultiheadAttentionCall {
  Tensor query, key, value;
  nn::MultiheadAttentionForward args;

  static MultiheadAttentionCall read(Options& a) {
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
  template <class Module, class... Record>
  auto forward(Module& m, Record*... record) const {
    return m.forward(query, key, value, args, record...);
  }
};

// The layer's (src, src_mask, src_key_padding_mask, is_causal) and the
// stack's (src, mask, src_key_padding_mask, is_causal or None).
template <class Args>
struct EncoderCall {
  Tensor src;
  Args args;

  static EncoderCall read(Options& a) {
    EncoderCall c;
    c.src = sequence_field(a, "src");
    if constexpr (requires { c.args.src_mask; })
      c.args.src_mask = mask_field(a, "src_mask");
    else
      c.args.mask = mask_field(a, "mask");
    c.args.src_key_padding_mask = mask_field(a, "src_key_padding_mask");
    read_hint(a, "is_causal", c.args.is_causal);
    a.done();
    return c;
  }
  template <class Module, class... Record>
  auto forward(Module& m, Record*... record) const {
    return m.forward(src, args, record...);
  }
};

// The four masks of a decoder, in the Python order.
template <class Args>
void read_decoder_masks(Options& a, Args& args) {
  args.tgt_mask = mask_field(a, "tgt_mask");
  args.memory_mask = mask_field(a, "memory_mask");
  args.tgt_key_padding_mask = mask_field(a, "tgt_key_padding_mask");
  args.memory_key_padding_mask = mask_field(a, "memory_key_padding_mask");
}

// (tgt, memory, the four masks, tgt_is_causal, memory_is_causal), the layer's
// and the stack's.
template <class Args>
struct DecoderCall {
  Tensor tgt, memory;
  Args args;

  static DecoderCall read(Options& a) {
    DecoderCall c;
    c.tgt = sequence_field(a, "tgt");
    c.memory = sequence_field(a, "memory");
    read_decoder_masks(a, c.args);
    read_hint(a, "tgt_is_causal", c.args.tgt_is_causal);
    c.args.memory_is_causal = a.flag("memory_is_causal");
    a.done();
    return c;
  }
  template <class Module, class... Record>
  auto forward(Module& m, Record*... record) const {
    return m.forward(tgt, memory, args, record...);
  }
};

// (src, tgt, src_mask, the decoder's four masks with src_key_padding_mask
// among them in torch's order, src_is_causal, tgt_is_causal, memory_is_causal)
struct TransformerCall {
  Tensor src, tgt;
  nn::TransformerForward args;

  static TransformerCall read(Options& a) {
    TransformerCall c;
    c.src = sequence_field(a, "src");
    c.tgt = sequence_field(a, "tgt");
    c.args.src_mask = mask_field(a, "src_mask");
    c.args.tgt_mask = mask_field(a, "tgt_mask");
    c.args.memory_mask = mask_field(a, "memory_mask");
    c.args.src_key_padding_mask = mask_field(a, "src_key_padding_mask");
    c.args.tgt_key_padding_mask = mask_field(a, "tgt_key_padding_mask");
    c.args.memory_key_padding_mask = mask_field(a, "memory_key_padding_mask");
    read_hint(a, "src_is_causal", c.args.src_is_causal);
    read_hint(a, "tgt_is_causal", c.args.tgt_is_causal);
    c.args.memory_is_causal = a.flag("memory_is_causal");
    a.done();
    return c;
  }
  template <class Module>
  auto forward(Module& m) const {
    return m.forward(src, tgt, args);
  }
};

// Dropout draws random numbers (from a generator shared with Python) only in
// training mode with p > 0; a stack's p is its layers'.
template <class Module>
bool draws_random(Module& m) {
  if constexpr (requires { m.layers(); })
    return m.is_training() && m.layers().front().options().dropout > 0.0;
  else
    return m.is_training() && m.options().dropout > 0.0;
}

// A forward's result for Python: numpy arrays; MultiheadAttention's is
// (output, weights or None).
inline py::object forward_result(const Tensor& output) { return to_numpy(output); }
inline py::object forward_result(const nn::MultiheadAttentionOutput& out) {
  return py::make_tuple(to_numpy(out.output), to_numpy_or_none(out.weights));
}

// forward(args): the module's forward on the tuple `Call` reads, without the
// GIL unless dropout draws from the shared generator. `function` names it in
// errors ("TransformerEncoderLayer.forward").
template <class Call, class PyClass>
void def_forward(PyClass& cls, const char* function) {
  using Module = typename PyClass::type;
  cls.def(
      "forward",
      [function](Module& self, py::handle args) {
        Options a(args, function);
        const Call c = Call::read(a);
        return forward_result(
            without_gil_unless(draws_random(self), [&] { return c.forward(self); }));
      },
      py::arg("args"));
}

}  // namespace qkv::python
