// FeedForward (torch's Transformer FFN) and SwiGLUFeedForward.
#include "qkv/nn/feed_forward.h"

#include "nn/module_util.h"

namespace qkv::nn {

namespace {

// The sizes (> 0) and the dropout probability (in [0, 1]) of either network,
// naming its hidden width `hidden_name`.
void check_sizes(const char* module, int64_t d_model, const char* hidden_name, int64_t hidden,
                 double dropout) {
  QKV_CHECK(d_model > 0 && hidden > 0, module, ": d_model and ", hidden_name,
            " must be > 0, got d_model=", d_model, " and ", hidden_name, "=", hidden);
  QKV_CHECK(dropout >= 0.0 && dropout <= 1.0, module,
            ": dropout probability must be in [0, 1], got ", dropout);
}

FeedForwardOptions checked(const FeedForwardOptions& o) {
  check_sizes("FeedForward", o.d_model, "dim_feedforward", o.dim_feedforward, o.dropout);
  return o;
}

SwiGLUFeedForwardOptions checked(const SwiGLUFeedForwardOptions& o) {
  check_sizes("SwiGLUFeedForward", o.d_model, "hidden_dim", o.hidden_dim, o.dropout);
  return o;
}

void check_input(const char* module, const Tensor& x, int64_t d_model, DType dtype) {
  QKV_CHECK(x.defined(), module, ": input is undefined");
  QKV_CHECK_TYPE(x.dtype() == dtype, module, ": input must have the module's dtype ",
                 dtype_name(dtype), ", got ", dtype_name(x.dtype()));
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == d_model, module,
            ": input must be [..., d_model=", d_model, "], got shape ", shape_str(x.shape()));
}

// One of the network's nn.Linear layers.
LinearOptions layer(int64_t in, int64_t out, bool bias, DType dtype) {
  return {.in_features = in, .out_features = out, .bias = bias, .dtype = dtype};
}

}  // namespace

FeedForward::FeedForward(const FeedForwardOptions& options, Generator* gen)
    : ModuleBase("FeedForward", checked(options)),
      linear1_(layer(options.d_model, options.dim_feedforward, options.bias, options.dtype), gen),
      linear2_(layer(options.dim_feedforward, options.d_model, options.bias, options.dtype), gen) {}

void FeedForward::update_precision() {
  if (precision() != Precision::kInt8) return;
  linear1_.set_precision(Precision::kBFloat16);
  linear2_.set_precision(Precision::kBFloat16);
}

Tensor FeedForward::forward(const Tensor& x, FeedForwardRecord* record) const {
  check_input("FeedForward", x, options_.d_model, options_.dtype);
  if (record) {
    record->hidden = linear1_.forward(x, &record->linear1);
    const Tensor dropped =
        detail::recorded_dropout(activate(record->hidden, options_.activation), options_.dropout,
                                 is_training(), generator(), &record->keep_mask);
    record->dropout_p = is_training() ? options_.dropout : 0.0;
    return linear2_.forward(dropped, &record->linear2);
  }
  const Tensor h = activate(linear1_.forward(x), options_.activation);
  return linear2_.forward(dropout(h, options_.dropout, is_training(), generator()));
}

void FeedForward::forward_into(Tensor& out, const Tensor& x, Tensor& hidden) const {
  QKV_CHECK(!is_training() || options_.dropout == 0.0,
            "FeedForward::forward_into: inference only; call eval() (dropout is ", options_.dropout,
            ")");
  linear1_.forward_into(hidden, x, options_.activation);
  linear2_.forward_into(out, hidden);
}

void FeedForward::list_members(MemberList& m) {
  m.module("linear1", linear1_);
  m.module("linear2", linear2_);
}

SwiGLUFeedForward::SwiGLUFeedForward(const SwiGLUFeedForwardOptions& options, Generator* gen)
    : ModuleBase("SwiGLUFeedForward", checked(options)),
      w1_(layer(options.d_model, options.hidden_dim, options.bias, options.dtype), gen),
      w2_(layer(options.hidden_dim, options.d_model, options.bias, options.dtype), gen),
      w3_(layer(options.d_model, options.hidden_dim, options.bias, options.dtype), gen) {}

Tensor SwiGLUFeedForward::forward(const Tensor& x, SwiGLUFeedForwardRecord* record) const {
  check_input("SwiGLUFeedForward", x, options_.d_model, options_.dtype);
  if (record) {
    record->gate = w1_.forward(x, &record->w1);
    record->up = w3_.forward(x, &record->w3);
    record->dropout_p = is_training() ? options_.dropout : 0.0;
    const Tensor gated = mul(activate(record->gate, options_.activation), record->up);
    return detail::recorded_dropout(w2_.forward(gated, &record->w2), options_.dropout,
                                    is_training(), generator(), &record->keep_mask);
  }
  // activation(x W1ᵀ) is the gate, x W3ᵀ the value it gates.
  const Tensor gated = mul(activate(w1_.forward(x), options_.activation), w3_.forward(x));
  return dropout(w2_.forward(gated), options_.dropout, is_training(), generator());
}

void SwiGLUFeedForward::forward_into(Tensor& out, const Tensor& x, Tensor& hidden,
                                     Tensor& gate) const {
  QKV_CHECK(!is_training() || options_.dropout == 0.0,
            "SwiGLUFeedForward::forward_into: inference only; call eval() (dropout is ",
            options_.dropout, ")");
  Linear::forward_into_each(x, {{{w1_, gate}, {w3_, hidden}}});
  activate_into(gate, gate, options_.activation);
  mul_into(hidden, gate, hidden);
  w2_.forward_into(out, hidden);
}

void SwiGLUFeedForward::list_members(MemberList& m) {
  m.module("w1", w1_);
  m.module("w2", w2_);
  m.module("w3", w3_);
}
}  // namespace qkv::nn
