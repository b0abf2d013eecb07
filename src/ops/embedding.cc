// Embedding lookup: one row of the table per id.
#include <cstring>
#include <span>

#include "ops/checks.h"
#include "qkv/functional.h"

namespace qkv {

namespace {

// Every id names a row of the table; the message is the same for both entry points.
void check_ids(std::span<const int64_t> ids, const Tensor& weight) {
  const int64_t N = weight.size(0);
  for (size_t i = 0; i < ids.size(); ++i)
    QKV_CHECK(ids[i] >= 0 && ids[i] < N, "embedding: id ", ids[i], " at flat index ", i,
              " is out of range [0, ", N, ") of the table ", shape_str(weight.shape()));
}

}  // namespace

Tensor embedding(const std::vector<int64_t>& ids, const Shape& shape, const Tensor& weight) {
  const char* fn = "embedding";
  check_floating(weight, fn, "weight");
  check_dim(weight, 2, fn, "weight", "[num_embeddings, embedding_dim]");
  for (int64_t s : shape) QKV_CHECK(s >= 0, fn, ": ids shape ", shape_str(shape), " is invalid");
  QKV_CHECK(shape_numel(shape) == static_cast<int64_t>(ids.size()), fn, ": ", ids.size(),
            " ids do not form the shape ", shape_str(shape), " (", shape_numel(shape),
            " elements)");
  check_ids(ids, weight);
  const int64_t D = weight.size(1);
  Shape out_shape = shape;
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  const Tensor w = weight.contiguous();
  const size_t row_bytes = static_cast<size_t>(D) * dtype_size(weight.dtype());
  const auto* src = static_cast<const std::byte*>(w.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(ids[i]) * row_bytes, row_bytes);
  return out;
}

void embedding_into(Tensor& out, std::span<const int64_t> ids, const Tensor& weight) {
  const char* fn = "embedding_into";
  check_floating(weight, fn, "weight");
  check_dim(weight, 2, fn, "weight", "[num_embeddings, embedding_dim]");
  const int64_t D = weight.size(1);
  check_defined(out, fn, "out");
  QKV_CHECK_TYPE(out.dtype() == weight.dtype(), fn, ": out dtype ", dtype_name(out.dtype()),
                 " differs from weight dtype ", dtype_name(weight.dtype()));
  const int64_t n = static_cast<int64_t>(ids.size());
  QKV_CHECK(out.dim() >= 1 && out.size(-1) == D && out.numel() == n * D, fn, ": out must be [..., ",
            D, "] with ", n, " rows (one per id), got ", shape_str(out.shape()));
  QKV_CHECK(out.is_contiguous() && weight.is_contiguous(), fn,
            ": out and weight must be contiguous");
  check_ids(ids, weight);
  const size_t row_bytes = static_cast<size_t>(D) * dtype_size(weight.dtype());
  const auto* src = static_cast<const std::byte*>(weight.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(ids[i]) * row_bytes, row_bytes);
}

}  // namespace qkv
