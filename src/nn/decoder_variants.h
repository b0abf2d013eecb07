// Running the module a std::variant holds: the decoder's norms (RMSNorm or
// LayerNorm) and feed-forward networks (SwiGLU or GELU), with their records.
// Internal (not installed).
#pragma once

#include <variant>

#include "qkv/functional.h"
#include "qkv/nn/decoder_block.h"

namespace qkv::nn::detail {

using Norm = std::variant<RMSNorm, LayerNorm>;
using FeedForwardNet = std::variant<SwiGLUFeedForward, FeedForward>;
using FeedForwardRecordVariant = std::variant<SwiGLUFeedForwardRecord, FeedForwardRecord>;

// Each module kind with the record kind it fills; the variants' alternatives
// pair up in order, so a record always matches the module that made it.
inline Tensor recorded(const RMSNorm& n, const Tensor& x, NormRecord& r) {
  return n.forward(x, &r.emplace<RMSNormRecord>());
}
inline Tensor recorded(const LayerNorm& n, const Tensor& x, NormRecord& r) {
  return n.forward(x, &r.emplace<LayerNormRecord>());
}
inline Tensor recorded(const SwiGLUFeedForward& f, const Tensor& x, FeedForwardRecordVariant& r) {
  return f.forward(x, &r.emplace<SwiGLUFeedForwardRecord>());
}
inline Tensor recorded(const FeedForward& f, const Tensor& x, FeedForwardRecordVariant& r) {
  return f.forward(x, &r.emplace<FeedForwardRecord>());
}

inline Tensor back(RMSNorm& n, const Tensor& g, const NormRecord& r) {
  return n.backward(g, std::get<RMSNormRecord>(r));
}
inline Tensor back(LayerNorm& n, const Tensor& g, const NormRecord& r) {
  return n.backward(g, std::get<LayerNormRecord>(r));
}
inline Tensor back(SwiGLUFeedForward& f, const Tensor& g, const FeedForwardRecordVariant& r) {
  return f.backward(g, std::get<SwiGLUFeedForwardRecord>(r));
}
inline Tensor back(FeedForward& f, const Tensor& g, const FeedForwardRecordVariant& r) {
  return f.backward(g, std::get<FeedForwardRecord>(r));
}

// The held module's forward: inference (no record) or training (with one).
template <class Variant>
Tensor run(const Variant& module, const Tensor& x) {
  return std::visit([&](const auto& m) { return m.forward(x); }, module);
}
template <class Variant, class Record>
Tensor run(const Variant& module, const Tensor& x, Record& record) {
  return std::visit([&](const auto& m) { return recorded(m, x, record); }, module);
}
// With a record when one is given.
template <class Variant, class Record>
Tensor run(const Variant& module, const Tensor& x, Record* record) {
  return record ? run(module, x, *record) : run(module, x);
}
template <class Variant, class Record>
Tensor run_backward(Variant& module, const Tensor& grad, const Record& record) {
  return std::visit([&](auto& m) { return back(m, grad, record); }, module);
}

// A norm into a preallocated buffer (may be x itself), allocating nothing;
// with a record (training), out becomes the norm's new output instead.
inline void norm_into(Tensor& out, const Tensor& x, const Norm& norm,
                      NormRecord* record = nullptr) {
  if (record) {
    out = run(norm, x, *record);
    return;
  }
  std::visit([&](const auto& n) { n.forward_into(out, x); }, norm);
}

// The feed-forward network into `out` (may be x), through the preallocated
// hidden [and gate] rows; with a record (training), out becomes its new output.
inline void feed_forward_into(Tensor& out, const Tensor& x, const FeedForwardNet& ffn,
                              Tensor& hidden, Tensor& gate, FeedForwardRecordVariant* record) {
  if (record) {
    out = run(ffn, x, *record);
  } else if (const auto* swiglu = std::get_if<SwiGLUFeedForward>(&ffn)) {
    swiglu->forward_into(out, x, hidden, gate);
  } else {
    std::get<FeedForward>(ffn).forward_into(out, x, hidden);
  }
}

// The residual connection x = x + sublayer: in place, or (training) into a new
// tensor, since the sub-layers' records hold the old x.
inline void add_residual(Tensor& x, const Tensor& sublayer, bool training) {
  if (training)
    x = add(x, sublayer);
  else
    add_into(x, x, sublayer);
}

// The module a variant holds, for list_members().
template <class... Modules>
Module& module_of(std::variant<Modules...>& v) {
  return std::visit([](auto& m) -> Module& { return m; }, v);
}

// A norm of the kind `kind` over the last dim D.
inline Norm make_norm(NormKind kind, int64_t d_model, double eps, bool bias, DType dtype) {
  if (kind == NormKind::kLayerNorm)
    return LayerNorm({.normalized_shape = {d_model}, .eps = eps, .bias = bias, .dtype = dtype});
  return RMSNorm({.normalized_shape = {d_model}, .eps = eps, .dtype = dtype});
}

}  // namespace qkv::nn::detail
