// Generator: xoshiro256** seeded through splitmix64, normals by Box-Muller.
#include "qkv/generator.h"

#include <cmath>
#include <numbers>

#include "qkv/error.h"

namespace qkv {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : state_) s = splitmix64(x);
  has_spare_normal_ = false;
}

uint64_t Generator::next_u64() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();  // log(0) is -inf
  const double u2 = uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_normal_ = true;
  return radius * std::cos(angle);
}

GeneratorState Generator::state() const {
  GeneratorState s;
  for (int i = 0; i < 4; ++i) s.words[i] = state_[i];
  s.has_spare_normal = has_spare_normal_;
  s.spare_normal = has_spare_normal_ ? spare_normal_ : 0.0;
  return s;
}

void Generator::set_state(const GeneratorState& s) {
  QKV_CHECK(s.words[0] | s.words[1] | s.words[2] | s.words[3],
            "Generator::set_state: the state words are all zero, which xoshiro256** never "
            "reaches (every draw would be 0)");
  for (int i = 0; i < 4; ++i) state_[i] = s.words[i];
  has_spare_normal_ = s.has_spare_normal;
  spare_normal_ = s.has_spare_normal ? s.spare_normal : 0.0;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace qkv
