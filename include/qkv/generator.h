// qkv::Generator — a seeded random stream (xoshiro256**).
//
// Every random choice in qkv (initialisation, dropout) draws from a Generator
// passed in explicitly, or from default_generator() when none is given.
// The same seed gives the same numbers on every machine.
#pragma once

#include <cstdint>

namespace qkv {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Standard normal (Box-Muller).
  double normal();

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
