// Absolute positional encodings added to the input: sinusoidal (§3.4) and learned.
#include "qkv/nn/positional_encoding.h"

#include <cmath>
#include <vector>

#include "nn/module_util.h"
#include "qkv/functional.h"

namespace qkv::nn {

namespace {

// dropout(x + table[offset : offset + L]) for x in [L, B, D], [B, L, D] or [L, D].
Tensor add_positions(const char* module, const Tensor& x, const Tensor& table, int64_t offset,
                     bool batch_first, double p, bool training, Generator* gen) {
  const int64_t max_len = table.size(0), D = table.size(1);
  QKV_CHECK(x.defined(), module, ": input is undefined");
  QKV_CHECK_TYPE(x.dtype() == table.dtype(), module, ": input must have the module's dtype ",
                 dtype_name(table.dtype()), ", got ", dtype_name(x.dtype()));
  QKV_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(-1) == D, module, ": input must be ",
            (batch_first ? "[B, L, D]" : "[L, B, D]"), " or unbatched [L, D] with D = ", D,
            ", got shape ", shape_str(x.shape()));
  const bool bf = x.dim() == 3 && batch_first;
  const int64_t L = bf ? x.size(1) : x.size(0);
  QKV_CHECK(offset >= 0 && offset + L <= max_len, module, ": positions [", offset, ", ", offset + L,
            ") of an input of length ", L, " at offset ", offset, " exceed max_len = ", max_len);
  Tensor pe = table.slice(0, offset, offset + L);  // [L, D]
  if (x.dim() == 3 && !bf) pe = pe.unsqueeze(1);   // [L, 1, D]
  return dropout(add(x, pe), p, training, gen);
}

}  // namespace

Tensor sinusoidal_encoding(int64_t length, int64_t d_model, int64_t offset, DType dtype) {
  QKV_CHECK(length >= 0 && d_model > 0 && offset >= 0,
            "sinusoidal_encoding: need length >= 0, d_model > 0 and offset >= 0, got length=",
            length, ", d_model=", d_model, ", offset=", offset);
  QKV_CHECK_TYPE(is_floating(dtype), "sinusoidal_encoding: dtype must be floating, got ",
                 dtype_name(dtype));
  std::vector<double> pe(static_cast<size_t>(length * d_model));
  for (int64_t row = 0; row < length; ++row) {
    const double pos = static_cast<double>(offset + row);
    for (int64_t c = 0; c < d_model; ++c) {
      // Columns 2i and 2i+1 share the frequency 1 / 10000^(2i / d_model).
      const int64_t two_i = c - c % 2;
      const double angle = pos / std::pow(10000.0, static_cast<double>(two_i) / d_model);
      pe[row * d_model + c] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
  return Tensor::from_vector({length, d_model}, std::span<const double>(pe)).to(dtype);
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(
    const SinusoidalPositionalEncodingOptions& options)
    : ModuleBase("SinusoidalPositionalEncoding", options) {
  const auto& o = options_;
  QKV_CHECK(o.d_model > 0 && o.max_len > 0,
            "SinusoidalPositionalEncoding: d_model and max_len must be > 0, got d_model=",
            o.d_model, " and max_len=", o.max_len);
  QKV_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0,
            "SinusoidalPositionalEncoding: dropout probability must be in [0, 1], got ", o.dropout);
  detail::check_floating_dtype("SinusoidalPositionalEncoding", o.dtype);
  table_ = sinusoidal_encoding(o.max_len, o.d_model, 0, o.dtype);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  return add_positions("SinusoidalPositionalEncoding", x, table_, offset, options_.batch_first,
                       options_.dropout, is_training(), generator());
}

LearnedPositionalEncoding::LearnedPositionalEncoding(
    const LearnedPositionalEncodingOptions& options, Generator* gen)
    : ModuleBase("LearnedPositionalEncoding", options) {
  const auto& o = options_;
  QKV_CHECK(o.d_model > 0 && o.max_len > 0,
            "LearnedPositionalEncoding: d_model and max_len must be > 0, got d_model=", o.d_model,
            " and max_len=", o.max_len);
  QKV_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0,
            "LearnedPositionalEncoding: dropout probability must be in [0, 1], got ", o.dropout);
  detail::check_floating_dtype("LearnedPositionalEncoding", o.dtype);
  weight_ = Tensor::randn({o.max_len, o.d_model}, gen ? *gen : default_generator(), o.dtype);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  return add_positions("LearnedPositionalEncoding", x, weight_, offset, options_.batch_first,
                       options_.dropout, is_training(), generator());
}

void SinusoidalPositionalEncoding::list_members(MemberList&) {}

void LearnedPositionalEncoding::list_members(MemberList& m) { m.parameter("weight", weight_); }

}  // namespace qkv::nn
