// A small valid fused_qk_rope_ragged call and indexer front ends for the bad-input table
// (tests/cpu/bad_inputs_test.cpp) and the fuzz target: each row changes one thing.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "quantkv/indexer.hpp"
#include "quantkv/rope.hpp"
#include "robustness_fixtures.hpp"

namespace quantkv::testing {

// freqs_cis [max_seq_len, rope_dim] for theta 10000 (zeros when rope_dim is odd: the bad-input
// rows that need such a table expect it to be rejected before it is read).
inline std::vector<float> test_freqs(int64_t max_seq_len, int64_t rope_dim) {
  std::vector<float> f(size_t(max_seq_len * rope_dim));
  if (rope_dim % 2 == 0 &&
      !make_freqs_cis(make_view(f.data(), max_seq_len, rope_dim), 10000.0).ok())
    std::abort();
  return f;
}

struct RopeFixture {
  int64_t Hq = 2, Hk = 2, D = 32, rope_dim = 16, max_seq_len = 8;
  std::vector<int64_t> cache_lens{3, 5}, seq_lens{2, 1};
  uint32_t layer = 1;
  PagedKVCache cache;
  std::vector<uint32_t> offs, positions;
  std::vector<float> q, out, freqs;
  PagedKVCacheCollection kv;
  RopeOptions options;

  int64_t T() const { return int64_t(offs.back()); }
  void build(uint64_t seed) {
    PagedKVCacheConfig cfg;
    cfg.dtype = DType::kBF16;
    cfg.num_layers = 2;
    cfg.page_size = 4;
    cfg.num_heads = Hk;
    cfg.head_size = D;
    cache = make_test_cache(cfg, cache_lens, seq_lens, seed);
    offs = offsets_of(seq_lens);
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < int64_t(cache.raw_blocks().size() / 2); ++i) {
      store_from_float(cache.raw_blocks().data(), DType::kBF16, i,
                       std::normal_distribution<float>(0, 1)(rng));
    }
    q.resize(size_t(T() * Hq * D));
    for (auto& v : q) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    out.assign(q.size(), -7.0f);
    freqs = test_freqs(max_seq_len, rope_dim);
    positions.assign(size_t(T()), 1);
    kv = cache.view();
    options.freqs_cis = make_view<const float>(freqs.data(), max_seq_len, rope_dim);
  }
  Status run(const Context& ctx = {}) {
    return fused_qk_rope_ragged(make_view<const float>(q.data(), T(), Hq, D),
                                make_view<const uint32_t>(offs.data(), int64_t(offs.size())), kv,
                                options, layer, make_view(out.data(), T(), Hq, D), ctx);
  }
};

// DeepSeek-V3.2's front end over `freqs` [max_seq_len, rope_dim] with `positions` [T] (or none).
inline IndexerFrontEnd test_front_end(const std::vector<float>& freqs, int64_t rope_dim,
                                      const std::vector<uint32_t>* positions) {
  const int64_t rows = int64_t(freqs.size()) / rope_dim;
  return deepseek_v32_front_end(
      make_view<const float>(freqs.data(), rows, rope_dim),
      positions != nullptr
          ? make_view<const uint32_t>(positions->data(), int64_t(positions->size()))
          : TensorView<const uint32_t, 1>{});
}

}  // namespace quantkv::testing
