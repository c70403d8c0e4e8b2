#include "test_util.hpp"

#include <cstdio>
#include <cstdlib>

namespace quantkv::testing {
namespace {

uint64_t pick_seed() {
  if (const char* env = std::getenv("QUANTKV_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

std::string seed_message(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with QUANTKV_TEST_SEED=" + std::to_string(seed) +
         ")";
}

}  // namespace

TestRng::TestRng(const char* file, int line)
    : seed_(pick_seed()), engine_(seed_), trace_(file, line, seed_message(seed_)) {
  std::printf("[ seed     ] %s at %s:%d\n", seed_message(seed_).c_str(), file, line);
}

int64_t TestRng::uniform_int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}
float TestRng::uniform_float(float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(engine_);
}
float TestRng::normal(float mean, float stddev) {
  return std::normal_distribution<float>(mean, stddev)(engine_);
}

std::vector<IsaLevel> supported_isa_levels() {
  std::vector<IsaLevel> levels;
  for (IsaLevel l : kAllIsaLevels) {
    if (isa_level_supported(l)) levels.push_back(l);
  }
  return levels;
}

ScopedIsa::ScopedIsa(IsaLevel level) : previous_(active_isa()) {
  const Status s = set_isa_level(level);
  if (!s.ok()) ADD_FAILURE() << s.to_string();
}
ScopedIsa::~ScopedIsa() { (void)set_isa_level(previous_); }

}  // namespace quantkv::testing
