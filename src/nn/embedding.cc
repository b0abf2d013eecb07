// nn::Embedding on qkv::embedding.
#include "qkv/nn/embedding.h"

#include "nn/module_util.h"
#include "qkv/functional.h"

namespace qkv::nn {

Embedding::Embedding(const EmbeddingOptions& options, Generator* gen)
    : ModuleBase("Embedding", options) {
  EmbeddingOptions& o = options_;
  QKV_CHECK_TYPE(is_floating(o.dtype), "Embedding: dtype must be float32 or float64, got ",
                 dtype_name(o.dtype));
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
  Generator& g = gen ? *gen : default_generator();
  weight_ = Tensor::randn({o.num_embeddings, o.embedding_dim}, g, o.dtype);
  if (o.padding_idx) weight_.select(0, *o.padding_idx).fill(0.0);
}

Tensor Embedding::forward(const std::vector<int64_t>& ids, const Shape& shape,
                          EmbeddingRecord* record) const {
  Tensor out = embedding(ids, shape, weight_);
  if (record) *record = {ids, shape};
  return out;
}

void Embedding::list_members(MemberList& m) { m.parameter("weight", weight_); }

}  // namespace qkv::nn
