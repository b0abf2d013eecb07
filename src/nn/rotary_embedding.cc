// RoPE: rotate coordinate pairs of q and k by position-dependent angles;
// the backward rotates the gradient back.
#include <omp.h>

#include <cmath>
#include <span>
#include <vector>

#include "qkv/nn/positional_encoding.h"

namespace qkv::nn {

namespace {

// Rotates pair i of a row of E values by the angle of cosine c and sine s:
// the coordinates (2i, 2i+1) or (i, i + E/2), in float64, one rounding each.
template <class T>
void rotate_pair(T* row, int64_t i, int64_t E, RopeStyle style, double c, double s) {
  const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
  const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + E / 2;
  const double a = row[ia], b = row[ib];
  row[ia] = static_cast<T>(a * c - b * s);
  row[ib] = static_cast<T>(b * c + a * s);
}

// Rotates rows of E values in place of `y` (a contiguous copy of the input).
// cos_sin holds, for each of the L positions, E/2 (cos, sin) pairs.
template <class T>
void rotate(T* y, int64_t batches, int64_t L, int64_t E, RopeStyle style,
            const std::vector<double>& cos_sin) {
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const double* cs = cos_sin.data() + l * E;
      for (int64_t i = 0; i < E / 2; ++i)
        rotate_pair(y + (b * L + l) * E, i, E, style, cs[2 * i], cs[2 * i + 1]);
    }
}

// cs[2i], cs[2i + 1] = cos, sin of turn · θ_i for the E/2 frequencies θ (turn:
// the position, negated for the backward): every rotation takes its angles here.
void angles(double turn, const std::vector<double>& theta, double* cs) {
  for (size_t i = 0; i < theta.size(); ++i) {
    const double angle = turn * theta[i];
    cs[2 * i] = std::cos(angle);
    cs[2 * i + 1] = std::sin(angle);
  }
}

// Rows [first, first + count) of E values of t (contiguous, float32 or
// float64), all rotated in place by the angles of cs.
void rotate_rows(Tensor& t, int64_t first, int64_t count, int64_t E, RopeStyle style,
                 const std::vector<double>& cs) {
  auto apply = [&](auto* data) { rotate(data + first * E, count, 1, E, style, cs); };
  if (t.dtype() == DType::kFloat64)
    apply(t.data<double>());
  else
    apply(t.data<float>());
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const RotaryEmbeddingOptions& options)
    : ModuleBase("RotaryEmbedding", options) {
  QKV_CHECK(options_.head_dim > 0 && options_.head_dim % 2 == 0,
            "RotaryEmbedding: head_dim must be positive and even (coordinates are rotated in "
            "pairs), got ",
            options_.head_dim);
  QKV_CHECK(options_.base > 1.0 && std::isfinite(options_.base),
            "RotaryEmbedding: base must be finite and > 1, got ", options_.base);
  const std::vector<double>& f = options_.freq_factors;
  QKV_CHECK(f.empty() || static_cast<int64_t>(f.size()) == options_.head_dim / 2,
            "RotaryEmbedding: freq_factors must be empty or hold head_dim / 2 = ",
            options_.head_dim / 2, " values (one per rotated pair), got ", f.size());
  for (size_t i = 0; i < f.size(); ++i)
    QKV_CHECK(std::isfinite(f[i]) && f[i] > 0.0, "RotaryEmbedding: freq_factors[", i,
              "] must be finite and > 0 (it divides a frequency), got ", f[i]);
  theta_ = inverse_frequencies();
}

std::vector<double> RotaryEmbedding::inverse_frequencies() const {
  const int64_t E = options_.head_dim;
  const std::vector<double>& f = options_.freq_factors;
  std::vector<double> theta(static_cast<size_t>(E / 2));
  for (int64_t i = 0; i < E / 2; ++i) {
    theta[i] = std::pow(options_.base, -2.0 * static_cast<double>(i) / static_cast<double>(E));
    if (!f.empty()) theta[i] /= f[i];  // llama.cpp's ggml_rope_ext: theta / freq_factors[i]
  }
  return theta;
}

Tensor RotaryEmbedding::rotated(const Tensor& x, int64_t offset, double direction,
                                const char* fn) const {
  const int64_t E = options_.head_dim;
  QKV_CHECK(x.defined(), fn, ": input is undefined");
  QKV_CHECK_TYPE(is_floating(x.dtype()), fn, ": input must be float32 or float64, got ",
                 dtype_name(x.dtype()));
  QKV_CHECK(x.dim() >= 2 && x.size(-1) == E, fn,
            ": input must be [..., L, E] with E = ", "head_dim = ", E, ", got shape ",
            shape_str(x.shape()));
  QKV_CHECK(offset >= 0, fn, ": position offset must be >= 0, got ", offset);
  const int64_t L = x.size(-2);
  const int64_t batches = L == 0 ? 0 : x.numel() / (L * E);

  std::vector<double> cos_sin(static_cast<size_t>(L * E));
  for (int64_t l = 0; l < L; ++l)
    angles(direction * static_cast<double>(offset + l), theta_, cos_sin.data() + l * E);

  Tensor y = x.clone();
  if (y.dtype() == DType::kFloat64)
    rotate<double>(y.data<double>(), batches, L, E, options_.style, cos_sin);
  else
    rotate<float>(y.data<float>(), batches, L, E, options_.style, cos_sin);
  return y;
}

void RotaryEmbedding::rotate_in_place(Tensor& rows, int64_t position) const {
  const int64_t E = options_.head_dim;
  QKV_CHECK(rows.defined() && rows.is_contiguous() && rows.dim() >= 1 && rows.size(-1) % E == 0,
            "RotaryEmbedding::rotate_in_place: rows must be contiguous [..., ", E, "], got ",
            rows.defined() ? shape_str(rows.shape()) : "undefined");
  thread_local std::vector<double> cos_sin;  // kept: a decoding step allocates nothing
  cos_sin.resize(static_cast<size_t>(E));
  angles(static_cast<double>(position), theta_, cos_sin.data());
  rotate_rows(rows, 0, rows.numel() / E, E, options_.style, cos_sin);
}

void RotaryEmbedding::rotate_in_place(Tensor& q, Tensor& k,
                                      std::span<const int64_t> positions) const {
  const int64_t E = options_.head_dim;
  const auto n = static_cast<int64_t>(positions.size());
  const int64_t B = q.defined() && q.dim() >= 3 ? q.size(0) : 0,
                T = q.defined() && q.dim() >= 3 ? q.size(1) : 0;
  for (const Tensor* rows : {&q, &k})
    QKV_CHECK(rows->defined() && rows->is_contiguous() && rows->dim() >= 3 &&
                  rows->size(-1) % E == 0 && rows->size(0) == B && rows->size(1) == T &&
                  (n == 1 || n == B),
              "RotaryEmbedding::rotate_in_place: q and k must be contiguous [B, T, ..., ", E,
              "] with the same B and T, and one position or B, got q ",
              q.defined() ? shape_str(q.shape()) : "undefined", ", k ",
              k.defined() ? shape_str(k.shape()) : "undefined", " and ", n, " positions");
  for (int64_t p : positions)
    QKV_CHECK(p >= 0, "RotaryEmbedding::rotate_in_place: positions must be >= 0, got ", p);
  if (B * T == 0) return;
  // A prompt's tokens split among the threads; a decoding step's few stay on this one.
#pragma omp parallel for schedule(static) if (B * T >= 64 && !omp_in_parallel())
  for (int64_t token = 0; token < B * T; ++token) {
    const int64_t b = token / T, t = token % T;
    thread_local std::vector<double> cos_sin;  // kept: a decoding step allocates nothing
    cos_sin.resize(static_cast<size_t>(E));
    angles(static_cast<double>(positions[n == 1 ? 0 : b] + t), theta_, cos_sin.data());
    for (Tensor* rows : {&q, &k}) {
      const int64_t rows_per_token = rows->numel() / (B * T * E);
      rotate_rows(*rows, (b * T + t) * rows_per_token, rows_per_token, E, options_.style, cos_sin);
    }
  }
}

Tensor RotaryEmbedding::forward(const Tensor& x, int64_t offset) const {
  return rotated(x, offset, 1.0, "RotaryEmbedding");
}

// A rotation's transpose is the rotation by the opposite angle: with
// a' = a cos − b sin, b' = b cos + a sin, ∂/∂a = g_a' cos + g_b' sin and
// ∂/∂b = g_b' cos − g_a' sin.
Tensor RotaryEmbedding::backward(const Tensor& grad_output, int64_t offset) const {
  return rotated(grad_output, offset, -1.0, "RotaryEmbedding::backward");
}

std::pair<Tensor, Tensor> RotaryEmbedding::forward(const Tensor& q, const Tensor& k,
                                                   int64_t offset) const {
  return {forward(q, offset), forward(k, offset)};
}

void RotaryEmbedding::list_members(MemberList&) {}

}  // namespace qkv::nn
