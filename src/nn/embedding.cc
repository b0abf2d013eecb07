// nn::Embedding on qkv::embedding.
#include "qkv/nn/embedding.h"

#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/nn/skip_weight_init.h"

namespace qkv::nn {

Embedding::Embedding(const EmbeddingOptions& options, Generator* gen)
    : ModuleBase("Embedding", options) {
  EmbeddingOptions& o = options_;
  detail::check_floating_dtype("Embedding", o.dtype);
  QKV_CHECK(o.num_embeddings > 0 && o.embedding_dim > 0,
            "Embedding: num_embeddings and embedding_dim must be > 0, got num_embeddings=",
            o.num_embeddings, " and embedding_dim=", o.embedding_dim);
  if (o.padding_idx) {
    // torch accepts a negative padding_idx counting from the end.
    int64_t& p = *o.padding_idx;
    QKV_CHECK(p >= -o.num_embeddings && p < o.num_embeddings, "Embedding: padding_idx must be in [",
              -o.num_embeddings, ", ", o.num_embeddings, "), got ", p);
    if (p < 0) p += o.num_embeddings;
  }
  if (SkipWeightInit::active()) return;
  Generator& g = gen ? *gen : default_generator();
  weight_ = Tensor::randn({o.num_embeddings, o.embedding_dim}, g, o.dtype);
  if (o.padding_idx) weight_.select(0, *o.padding_idx).fill(0.0);
}

Tensor Embedding::forward(const std::vector<int64_t>& ids, const Shape& shape,
                          EmbeddingRecord* record) const {
  check_weight();
  QKV_CHECK(!record || quantized_weight_.empty(),
            "Embedding::forward with a record: the table is quantized (inference only)");
  Tensor out = quantized_weight_.empty() ? embedding(ids, shape, weight_)
                                         : embedding(ids, shape, quantized_weight_);
  if (record) *record = {ids, shape};
  return out;
}

void Embedding::forward_into(Tensor& out, std::span<const int64_t> ids) const {
  check_weight();
  if (quantized_weight_.empty()) return embedding_into(out, ids, weight_);
  embedding_into(out, ids, quantized_weight_);
}

void Embedding::set_weight(Tensor weight) {
  detail::check_dense_weight(weight, options_.num_embeddings, options_.embedding_dim,
                             options_.dtype, "Embedding::set_weight", "table");
  weight_ = std::move(weight);
  quantized_weight_ = QuantizedWeight();
}

void Embedding::set_quantized_weight(QuantizedWeight weight) {
  const EmbeddingOptions& o = options_;
  detail::check_quantized_weight(weight, o.num_embeddings, o.embedding_dim, o.dtype,
                                 "Embedding::set_quantized_weight", "table");
  quantized_weight_ = std::move(weight);
  weight_ = Tensor();
}

void Embedding::check_weight() const {
  detail::check_has_weight(weight_.defined() || !quantized_weight_.empty(), "Embedding",
                           options_.num_embeddings, options_.embedding_dim, "table");
}

void Embedding::list_members(MemberList& m) { m.parameter("weight", weight_); }

}  // namespace qkv::nn
