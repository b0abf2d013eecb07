// qkv::Generator — a seeded random stream (xoshiro256**).
//
// Every random choice in qkv (initialisation, dropout) draws from a Generator
// passed in explicitly, or from default_generator() when none is given.
// The same seed gives the same numbers on every machine.
#pragma once

#include <array>
#include <cstdint>

namespace qkv {

// Everything a Generator's future draws depend on: a Generator given this
// state draws exactly what the one it came from would have drawn next
// (checkpoints save it so that a resumed run repeats an uninterrupted one).
struct GeneratorState {
  std::array<uint64_t, 4> words{};  // xoshiro256** state
  bool has_spare_normal = false;    // normal() makes two values and keeps one
  double spare_normal = 0.0;

  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Standard normal (Box-Muller).
  double normal();

  GeneratorState state() const;
  // The all-zero word state is xoshiro's fixed point (every draw 0): an Error.
  void set_state(const GeneratorState& state);

 private:
  uint64_t state_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

// The process-wide generator used when no Generator is passed (seed 0 until
// manual_seed is called). Not thread-safe: pass your own Generator in threads.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace qkv
