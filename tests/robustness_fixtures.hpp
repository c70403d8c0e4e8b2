// Small, valid calls of every operation, shared by the robustness suites (bad inputs,
// determinism, edge numerics): each fixture owns its buffers, fills them from a seed, and runs
// its op. A test breaks one argument of a fixture, or sets special values, and runs it.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::testing {

inline std::vector<uint32_t> offsets_of(const std::vector<int64_t>& seq_lens) {
  std::vector<uint32_t> offs(1, 0);
  for (int64_t n : seq_lens) offs.push_back(offs.back() + uint32_t(n));
  return offs;
}

// A cache for B sequences with `cache_lens` cached tokens and `seq_lens` new ones, pages
// reserved for both (shuffled by the seed).
inline PagedKVCache make_test_cache(PagedKVCacheConfig cfg, const std::vector<int64_t>& cache_lens,
                                    const std::vector<int64_t>& seq_lens, uint64_t seed) {
  cfg.batch_size = int64_t(cache_lens.size());
  int64_t pages = 0, max_pages = 1;
  for (size_t b = 0; b < cache_lens.size(); ++b) {
    const int64_t p = (cache_lens[b] + seq_lens[b] + cfg.page_size - 1) / cfg.page_size;
    pages += p;
    max_pages = std::max(max_pages, p);
  }
  cfg.max_pages_per_seq = max_pages;
  if (cfg.num_blocks == 0) cfg.num_blocks = pages + 1;
  PagedKVCache cache;
  Status st = PagedKVCache::create(cfg, seed, &cache);
  for (size_t b = 0; st.ok() && b < cache_lens.size(); ++b) {
    st = cache.reserve(int64_t(b), cache_lens[b] + seq_lens[b]);
    if (st.ok()) st = cache.set_cache_length(int64_t(b), cache_lens[b]);
  }
  if (!st.ok()) std::abort();
  return cache;
}

// ----------------------------------------------------------------- indexer
struct IndexerFixture {
  int64_t H = 2, D = 32, top_k = 4;
  std::vector<int64_t> cache_lens{3, 5}, seq_lens{2, 1};
  int64_t page_size = 4, num_layers = 2;
  uint32_t layer = 1;
  MaskType mask = MaskType::kCausal;
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  std::vector<int32_t> out;
  PagedKVCacheCollection kc;  // the view the call takes (tests may break it)

  int64_t rows = 0;  // T, fixed when built (tests may break offs afterwards)
  int64_t T() const { return rows; }
  // Random codes (no NaN) and positive scales from `seed`.
  void build(uint64_t seed) {
    PagedKVCacheConfig cfg;
    cfg.dtype = DType::kE4M3;
    cfg.kv_dim = 1;
    cfg.num_layers = num_layers;
    cfg.page_size = page_size;
    cfg.num_heads = 1;
    cfg.head_size = D;
    cfg.scale_granularity = D;
    cache = make_test_cache(cfg, cache_lens, seq_lens, seed);
    offs = offsets_of(seq_lens);
    rows = int64_t(offs.back());
    std::mt19937_64 rng(seed);
    auto code = [&] {
      uint8_t b = uint8_t(rng());
      return (b & 0x7F) == 0x7F ? uint8_t(b ^ 1) : b;
    };
    for (auto& b : cache.raw_blocks()) b = code();
    for (auto& s : cache.raw_scales()) s = float(rng() % 1000 + 1) / 4096.0f;
    q.resize(size_t(T() * H * D));
    for (auto& v : q) v.bits = code();
    q_s.resize(size_t(T() * H));
    for (auto& v : q_s) v = float(int(rng() % 2001) - 1000) / 1024.0f;
    out.assign(size_t(T() * top_k), -7);
    kc = cache.view();
  }
  TensorView<int32_t, 2> out_view() { return make_view(out.data(), T(), top_k); }
  TensorView<const float8_e4m3fn, 3> q_view() const {
    return make_view<const float8_e4m3fn>(q.data(), T(), H, D);
  }
  TensorView<const float, 2> qs_view() const { return make_view<const float>(q_s.data(), T(), H); }
  TensorView<const uint32_t, 1> offs_view() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
  Status run(const Context& ctx = {}) {
    return mla_indexer_ragged_float8_paged(out_view(), q_view(), qs_view(), offs_view(), kc, layer,
                                           mask, ctx);
  }
};

// ----------------------------------------------------------------- indexer K store / Q prepare
struct KStoreFixture {
  int64_t D = 32, page_size = 4, num_layers = 2;
  uint32_t layer = 1;
  std::vector<int64_t> cache_lens{3, 5}, seq_lens{2, 1};
  ScaleMode mode = ScaleMode::kPowerOfTwo;
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<float> k;
  PagedKVCacheCollection kc;

  int64_t rows = 0;  // T, fixed when built
  int64_t T() const { return rows; }
  void build(uint64_t seed) {
    PagedKVCacheConfig cfg;
    cfg.dtype = DType::kE4M3;
    cfg.kv_dim = 1;
    cfg.num_layers = num_layers;
    cfg.page_size = page_size;
    cfg.num_heads = 1;
    cfg.head_size = D;
    cfg.scale_granularity = D;
    cache = make_test_cache(cfg, cache_lens, seq_lens, seed);
    offs = offsets_of(seq_lens);
    rows = int64_t(offs.back());
    std::mt19937_64 rng(seed);
    k.resize(size_t(T() * D));
    for (auto& v : k) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    kc = cache.view();
  }
  TensorView<const float, 2> k_view() const { return make_view<const float>(k.data(), T(), D); }
  TensorView<const uint32_t, 1> offs_view() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
  Status run(const Context& ctx = {}) {
    return indexer_k_store(k_view(), offs_view(), kc, layer, mode, ctx);
  }
};

struct QPrepareFixture {
  int64_t T = 3, H = 2, D = 32;
  ScaleMode mode = ScaleMode::kPowerOfTwo;
  std::vector<float> q, w, q_s;
  std::vector<float8_e4m3fn> q8;
  void build(uint64_t seed) {
    std::mt19937_64 rng(seed);
    q.resize(size_t(T * H * D));
    for (auto& v : q) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
    w.resize(size_t(T * H));
    for (auto& v : w) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    q8.assign(size_t(T * H * D), float8_e4m3fn{0x11});
    q_s.assign(size_t(T * H), -5.0f);
  }
  TensorView<const float, 3> q_view() const { return make_view<const float>(q.data(), T, H, D); }
  TensorView<const float, 2> w_view() const { return make_view<const float>(w.data(), T, H); }
  TensorView<float8_e4m3fn, 3> q8_view() { return make_view(q8.data(), T, H, D); }
  TensorView<float, 2> qs_view() { return make_view(q_s.data(), T, H); }
  Status run(const Context& ctx = {}) {
    return indexer_q_prepare(q_view(), w_view(), q8_view(), qs_view(), mode, ctx);
  }
};

// ----------------------------------------------------------------- quantize / fused QKV
struct QuantizeFixture {
  int64_t M = 3, K = 64;
  BlockFormat format = BlockFormat::kNVFP4;
  float global_scale = 448.0f * 6.0f / 8.0f;
  std::vector<float> x;
  std::vector<uint8_t> data, scales;
  void build(uint64_t seed) {
    std::mt19937_64 rng(seed);
    x.resize(size_t(M * K));
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    data.assign(size_t(M * row_bytes(format, K)), 0xA5);
    scales.assign(size_t(swizzled_scale_elements(M, K / sf_vector_size(format))), 0xA5);
  }
  TensorView<const float, 2> x_view() const { return make_view<const float>(x.data(), M, K); }
  TensorView<uint8_t, 2> data_view() { return make_view(data.data(), M, row_bytes(format, K)); }
  TensorView<uint8_t, 5> scales_view() {
    return make_view<uint8_t, 5>(scales.data(),
                                 swizzled_scale_shape(M, K / sf_vector_size(format)));
  }
  Status run(const Context& ctx = {}) {
    return quantize_dynamic_block_scaled(x_view(), global_scale, format, data_view(), scales_view(),
                                         ctx);
  }
};

// M rows of `seq_lens` into a paged cache, q_dim output columns, K hidden; data and scales are
// random (no NaN codes) unless a test sets them.
struct QkvFixture {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t K = 64, q_dim = 8, num_kv_heads = 1, head_size = 8, kv_dim = 2;
  DType cache_dtype = DType::kBF16;
  std::vector<int64_t> cache_lens{3, 5}, seq_lens{2, 1};
  int64_t page_size = 4, num_layers = 2;
  uint32_t layer = 1;
  float tensor_sf = 0.5f;
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<uint8_t> hidden, weight, input_scale, weight_scale;
  std::vector<bfloat16> out;
  PagedKVCacheCollection kv;

  int64_t rows = 0;  // M, fixed when built (tests may break offs afterwards)
  int64_t M() const { return rows; }
  int64_t N() const { return q_dim + kv_dim * num_kv_heads * head_size; }
  int64_t kb() const { return K / sf_vector_size(format); }
  void build(uint64_t seed) {
    PagedKVCacheConfig cfg;
    cfg.dtype = cache_dtype;
    cfg.kv_dim = kv_dim;
    cfg.num_layers = num_layers;
    cfg.page_size = page_size;
    cfg.num_heads = num_kv_heads;
    cfg.head_size = head_size;
    cache = make_test_cache(cfg, cache_lens, seq_lens, seed);
    offs = offsets_of(seq_lens);
    rows = int64_t(offs.back());
    if (format == BlockFormat::kMXFP8) tensor_sf = 1.0f;
    std::mt19937_64 rng(seed);
    auto data_byte = [&] {
      uint8_t b = uint8_t(rng());
      return format == BlockFormat::kMXFP8 && (b & 0x7F) == 0x7F ? uint8_t(b ^ 1) : b;
    };
    auto scale_byte = [&] {
      return has_e8m0_scales(format) ? uint8_t(120 + rng() % 12) : uint8_t(0x20 + rng() % 0x30);
    };
    hidden.resize(size_t(M() * row_bytes(format, K)));
    for (auto& b : hidden) b = data_byte();
    weight.resize(size_t(N() * row_bytes(format, K)));
    for (auto& b : weight) b = data_byte();
    input_scale.assign(size_t(swizzled_scale_elements(M(), kb())), 0);
    weight_scale.assign(size_t(swizzled_scale_elements(N(), kb())), 0);
    for (int64_t r = 0; r < M(); ++r)
      for (int64_t c = 0; c < kb(); ++c)
        input_scale[swizzled_scale_offset(r, c, kb())] = scale_byte();
    for (int64_t r = 0; r < N(); ++r)
      for (int64_t c = 0; c < kb(); ++c)
        weight_scale[swizzled_scale_offset(r, c, kb())] = scale_byte();
    out.assign(size_t(M() * q_dim), bfloat16{0xBEEF});
    kv = cache.view();
  }
  TensorView<const uint8_t, 2> hidden_view() const {
    return make_view<const uint8_t>(hidden.data(), M(), row_bytes(format, K));
  }
  TensorView<const uint8_t, 2> weight_view() const {
    return make_view<const uint8_t>(weight.data(), N(), row_bytes(format, K));
  }
  TensorView<const uint8_t, 5> input_scale_view() const {
    return make_view<const uint8_t, 5>(input_scale.data(), swizzled_scale_shape(M(), kb()));
  }
  TensorView<const uint8_t, 5> weight_scale_view() const {
    return make_view<const uint8_t, 5>(weight_scale.data(), swizzled_scale_shape(N(), kb()));
  }
  TensorView<const uint32_t, 1> offs_view() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
  TensorView<bfloat16, 2> out_view() { return make_view(out.data(), M(), q_dim); }
  Status run(const Context& ctx = {}) {
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hidden_view(), offs_view(), weight_view(), input_scale_view(), weight_scale_view(),
        tensor_sf, kv, layer, out_view(), format, ctx);
  }
};

}  // namespace quantkv::testing
