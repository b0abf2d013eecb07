// nn::Embedding — torch.nn.Embedding: a learned table, one row per token id
// (tutorial §8.2: "Embedding and the input representation").
//
//   nn::Embedding tok({.num_embeddings = 96, .embedding_dim = 64});
//   Tensor x = tok.forward({3, 1, 4, 1}, {2, 2});   // -> [2, 2, 64]
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/module.h"
#include "qkv/quantized_linear.h"
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
  // torch's initialisation: weight ~ N(0, 1), the padding row 0. Under
  // nn::SkipWeightInit: no table (set one before use).
  explicit Embedding(const EmbeddingOptions& options, Generator* gen = nullptr);

  // ids: shape (row-major, each in [0, num_embeddings))  ->  [*shape, embedding_dim]
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const std::vector<int64_t>& ids, const Shape& shape,
                 EmbeddingRecord* record = nullptr) const;

  // Scatter-adds grad_output into the weight's gradient (never into the
  // padding_idx row, as torch). The ids have no gradient.
  // grad_output: [*record.shape, embedding_dim]
  void backward(const Tensor& grad_output, const EmbeddingRecord& record);

  // Inference into a preallocated contiguous `out` [ids.size(), embedding_dim].
  void forward_into(Tensor& out, std::span<const int64_t> ids) const;

  // A new table [num_embeddings, embedding_dim] of the module's dtype (held,
  // not copied); drops a quantized one.
  void set_weight(Tensor weight);
  // Looks rows up in `weight` [num_embeddings, embedding_dim] kept quantized
  // (float32 modules only; dequantized row by row as they are read): the
  // float table is released and the module is for inference (forward with a
  // record and backward throw).
  void set_quantized_weight(QuantizedWeight weight);

  // Undefined when the table is quantized (or not set yet).
  const Tensor& weight() const { return weight_; }
  // Empty unless set_quantized_weight was called.
  const QuantizedWeight& quantized_weight() const { return quantized_weight_; }

 private:
  // "weight" [num_embeddings, embedding_dim].
  void list_members(MemberList& m) override;

  // Throws naming the module when there is no table of either kind.
  void check_weight() const;

  Tensor weight_;
  QuantizedWeight quantized_weight_;  // used instead of weight_ when set
};

}  // namespace qkv::nn
