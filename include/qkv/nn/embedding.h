// nn::Embedding — torch.nn.Embedding: a learned table, one row per token id
// (tutorial §8.2: "Embedding and the input representation").
//
//   nn::Embedding tok({.num_embeddings = 96, .embedding_dim = 64});
//   Tensor x = tok.forward({3, 1, 4, 1}, {2, 2});   // -> [2, 2, 64]
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/module.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  // This row is initialised to zeros (torch also keeps its gradient at 0).
  std::optional<int64_t> padding_idx;
  DType dtype = DType::kFloat32;
};

// What Embedding::forward saves for its backward: the looked-up ids.
struct EmbeddingRecord {
  std::vector<int64_t> ids;
  Shape shape;
};

class Embedding : public ModuleBase<Embedding, EmbeddingOptions> {
 public:
  // torch's initialisation: weight ~ N(0, 1), the padding row 0.
  explicit Embedding(const EmbeddingOptions& options, Generator* gen = nullptr);

  // ids: shape (row-major, each in [0, num_embeddings))  ->  [*shape, embedding_dim]
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const std::vector<int64_t>& ids, const Shape& shape,
                 EmbeddingRecord* record = nullptr) const;

  // Scatter-adds grad_output into the weight's gradient (never into the
  // padding_idx row, as torch). The ids have no gradient.
  // grad_output: [*record.shape, embedding_dim]
  void backward(const Tensor& grad_output, const EmbeddingRecord& record);

  const Tensor& weight() const { return weight_; }

 private:
  // "weight" [num_embeddings, embedding_dim].
  void list_members(MemberList& m) override;

  Tensor weight_;
};

}  // namespace qkv::nn
