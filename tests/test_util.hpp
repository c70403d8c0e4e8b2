// Test helpers: fresh seeds that are printed (and can be fixed with QUANTKV_TEST_SEED), a
// loop over every ISA level this CPU supports, and output poisoning.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quantkv/cpu_features.hpp"

namespace quantkv::testing {

// A random engine with a fresh seed (or QUANTKV_TEST_SEED), printed to stdout and attached
// to every failure in its scope:  TestRng rng;  std::uniform_int_distribution ... (rng.engine)
class TestRng {
 public:
  explicit TestRng(const char* file = __builtin_FILE(), int line = __builtin_LINE());
  uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }
  // Uniform helpers.
  int64_t uniform_int(int64_t lo, int64_t hi);  // inclusive
  float uniform_float(float lo, float hi);
  float normal(float mean = 0.0f, float stddev = 1.0f);

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
  ::testing::ScopedTrace trace_;
};

// Every ISA level the CPU supports, slowest first.
std::vector<IsaLevel> supported_isa_levels();

// Sets a level for its lifetime and restores the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(IsaLevel level);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  IsaLevel previous_;
};

// Runs `fn(level)` once per supported level, with the level active and named in failures.
template <typename Fn>
void for_each_isa(Fn&& fn) {
  for (IsaLevel level : supported_isa_levels()) {
    ScopedIsa scoped(level);
    SCOPED_TRACE(std::string("isa = ") + isa_level_name(level));
    fn(level);
  }
}

// Fills a buffer with a byte pattern so unwritten elements show.
template <typename T>
void poison(std::vector<T>& v, uint8_t byte = 0xA5) {
  if (!v.empty()) std::memset(static_cast<void*>(v.data()), byte, v.size() * sizeof(T));
}

}  // namespace quantkv::testing
