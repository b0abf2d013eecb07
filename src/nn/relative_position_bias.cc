// Position biases added to the attention scores: ALiBi and T5's bucketed
// relative position bias. Queries are aligned bottom-right: query i of L is at
// position i + S - L among S keys.
#include <cmath>
#include <limits>
#include <vector>

#include "nn/module_util.h"
#include "qkv/nn/positional_encoding.h"

namespace qkv::nn {

namespace {

void check_lengths(const char* module, int64_t L, int64_t S) {
  QKV_CHECK(L >= 0 && S >= 0 && L <= S, module,
            ": need 0 <= L <= S (queries are the last L of the S positions), got L=", L,
            " and S=", S);
}

// 2^(-8 (i+1) / n) for i in [0, n): the slopes for a power of two n.
std::vector<double> power_of_two_slopes(int64_t n) {
  std::vector<double> slopes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slopes[i] = std::exp2(-8.0 * static_cast<double>(i + 1) / n);
  return slopes;
}

}  // namespace

std::vector<double> alibi_slopes(int64_t num_heads) {
  QKV_CHECK(num_heads > 0, "alibi_slopes: num_heads must be > 0, got ", num_heads);
  int64_t n = 1;
  while (n * 2 <= num_heads) n *= 2;  // the largest power of two <= num_heads
  std::vector<double> slopes = power_of_two_slopes(n);
  if (n == num_heads) return slopes;
  // The remaining heads take every other slope of the next power of two,
  // which interleaves between the ones already chosen.
  const std::vector<double> finer = alibi_slopes(2 * n);
  for (int64_t i = 0; static_cast<int64_t>(slopes.size()) < num_heads; i += 2)
    slopes.push_back(finer[i]);
  return slopes;
}

Alibi::Alibi(const AlibiOptions& options) : ModuleBase("Alibi", options) {
  QKV_CHECK(options_.num_heads > 0, "Alibi: num_heads must be > 0, got ", options_.num_heads);
  detail::check_floating_dtype("Alibi", options_.dtype);
  slopes_ = alibi_slopes(options_.num_heads);
}

Tensor Alibi::forward(int64_t L, int64_t S) const {
  check_lengths("Alibi", L, S);
  const int64_t H = options_.num_heads;
  std::vector<double> bias(static_cast<size_t>(H * L * S));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t pos = i + S - L;
      for (int64_t j = 0; j < S; ++j) {
        const double distance = static_cast<double>(j - pos);  // <= 0 for earlier keys
        double& b = bias[(h * L + i) * S + j];
        if (options_.causal)
          b = j <= pos ? slopes_[h] * distance : -std::numeric_limits<double>::infinity();
        else
          b = -slopes_[h] * std::abs(distance);
      }
    }
  return Tensor::from_vector({H, L, S}, std::span<const double>(bias)).to(options_.dtype);
}

int64_t relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance) {
  QKV_CHECK(num_buckets >= (bidirectional ? 4 : 2) && max_distance > 0,
            "relative_position_bucket: need num_buckets >= ", (bidirectional ? 4 : 2),
            " and max_distance > 0, got num_buckets=", num_buckets,
            " and max_distance=", max_distance);
  int64_t bucket = 0;
  int64_t n = num_buckets;
  int64_t distance = 0;
  if (bidirectional) {
    n /= 2;
    if (relative_position > 0) bucket += n;  // keys after the query use the upper half
    distance = std::abs(relative_position);
  } else {
    distance = relative_position < 0 ? -relative_position : 0;
  }
  const int64_t max_exact = n / 2;
  QKV_CHECK(max_distance > max_exact, "relative_position_bucket: max_distance (", max_distance,
            ") must exceed the exact range num_buckets/", (bidirectional ? 4 : 2), " = ",
            max_exact);
  if (distance < max_exact) return bucket + distance;
  // Log-spaced buckets from max_exact to max_distance, in float32 as
  // transformers' T5 (the truncation must land on the same bucket).
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float log_range = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(n - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), n - 1);
  return bucket + large;
}

RelativePositionBias::RelativePositionBias(const RelativePositionBiasOptions& options,
                                           Generator* gen)
    : ModuleBase("RelativePositionBias", options) {
  const auto& o = options_;
  QKV_CHECK(o.num_heads > 0, "RelativePositionBias: num_heads must be > 0, got ", o.num_heads);
  detail::check_floating_dtype("RelativePositionBias", o.dtype);
  relative_position_bucket(0, o.bidirectional, o.num_buckets, o.max_distance);  // checks
  weight_ = Tensor::randn({o.num_buckets, o.num_heads}, gen ? *gen : default_generator(), o.dtype);
}

Tensor RelativePositionBias::forward(int64_t L, int64_t S) const {
  check_lengths("RelativePositionBias", L, S);
  const auto& o = options_;
  const int64_t H = o.num_heads;
  const std::vector<double> table = weight_.to_vector();  // [num_buckets, H]
  // The bucket depends on j - pos only: compute each distance's once.
  std::vector<int64_t> bucket_of(static_cast<size_t>(L + S));
  for (int64_t d = -(S - 1); d <= L; ++d)
    bucket_of[d + S - 1] =
        relative_position_bucket(d, o.bidirectional, o.num_buckets, o.max_distance);
  std::vector<double> bias(static_cast<size_t>(H * L * S));
  for (int64_t i = 0; i < L; ++i) {
    const int64_t pos = i + S - L;
    for (int64_t j = 0; j < S; ++j) {
      const int64_t bucket = bucket_of[j - pos + S - 1];
      for (int64_t h = 0; h < H; ++h) bias[(h * L + i) * S + j] = table[bucket * H + h];
    }
  }
  return Tensor::from_vector({H, L, S}, std::span<const double>(bias)).to(o.dtype);
}

void Alibi::list_members(MemberList&) {}

void RelativePositionBias::list_members(MemberList& m) {
  m.parameter("relative_attention_bias.weight", weight_);
}

}  // namespace qkv::nn
