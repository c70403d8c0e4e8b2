// The CUDA indexer and K store over the engines' layout (EngineIndexerKCache) and with global
// slots, against the CPU backend on exact inputs (small integers, power-of-two scales: every
// score is exact in fp32 whatever the summation order, so the indices must be identical, ties
// included). Needs a CUDA device; skips visibly without one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.hpp"
#include "engine_layout_util.hpp"
#include "quantkv/cuda.hpp"
#include "quantkv/engine_layout.hpp"
#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::DeviceArray;
using testing::TestRng;

struct EngineProblem {
  int64_t H = 0, D = 0, top_k = 0;
  MaskType mask = MaskType::kCausal;
  uint32_t layer = 1;
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  testing::EngineCopy engine;
  int64_t T() const { return int64_t(offs.back()); }
};

EngineProblem make_problem(TestRng& rng, int64_t H, int64_t D, int64_t top_k, int64_t page_size,
                           std::vector<int64_t> cache_lens, std::vector<int64_t> seq_lens,
                           MaskType mask) {
  EngineProblem p;
  p.H = H;
  p.D = D;
  p.top_k = top_k;
  p.mask = mask;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = 1;
  cfg.num_layers = 2;
  cfg.page_size = page_size;
  cfg.head_size = D;
  cfg.scale_granularity = D;
  p.cache = testing::make_test_cache(cfg, cache_lens, seq_lens, rng.engine()());
  p.offs = testing::offsets_of(seq_lens);
  for (uint8_t& b : p.cache.raw_blocks()) b = float_to_e4m3(float(rng.uniform_int(-2, 2)));
  for (float& s : p.cache.raw_scales()) s = std::ldexp(1.0f, int(rng.uniform_int(-1, 1)));
  p.q.resize(std::size_t(p.T() * H * D));
  for (auto& c : p.q) c.bits = float_to_e4m3(float(rng.uniform_int(-2, 2)));
  p.q_s.resize(std::size_t(p.T() * H));
  for (float& w : p.q_s) w = float(rng.uniform_int(-2, 3));
  p.engine = testing::make_engine_copy(p.cache.view(), p.layer);
  return p;
}

std::vector<int32_t> run_cpu(const EngineProblem& p, IndexOutput output) {
  std::vector<int32_t> out(std::size_t(p.T() * p.top_k));
  testing::poison(out);
  const Status st = mla_indexer_ragged_float8_paged(
      make_view(out.data(), p.T(), p.top_k),
      make_view<const float8_e4m3fn>(p.q.data(), p.T(), p.H, p.D),
      make_view<const float>(p.q_s.data(), p.T(), p.H),
      make_view<const uint32_t>(p.offs.data(), int64_t(p.offs.size())), p.engine.view, p.mask,
      Context{}, IndexerOptions{output, nullptr});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// The engine buffer, lengths and table on the device; the host copies for validation.
struct DeviceEngine {
  DeviceArray<float> storage;
  DeviceArray<uint32_t> lengths, table;
  EngineIndexerKCache view;
  cuda::HostRagged host;
  explicit DeviceEngine(const EngineProblem& p)
      : storage(p.engine.storage),
        lengths(std::vector<uint32_t>(
            p.engine.view.cache_lengths.data,
            p.engine.view.cache_lengths.data + p.engine.view.cache_lengths.numel())),
        table(std::vector<uint32_t>(
            p.engine.view.lookup_table.data,
            p.engine.view.lookup_table.data + p.engine.view.lookup_table.numel())) {
    view = p.engine.view;
    view.data = reinterpret_cast<uint8_t*>(storage.get());
    view.cache_lengths =
        testing::on_device<const uint32_t, 1>(lengths.get(), p.engine.view.cache_lengths);
    view.lookup_table =
        testing::on_device<const uint32_t, 2>(table.get(), p.engine.view.lookup_table);
    host = {make_view<const uint32_t>(p.offs.data(), int64_t(p.offs.size())),
            p.engine.view.cache_lengths, p.engine.view.lookup_table};
  }
};

std::vector<int32_t> run_gpu(const EngineProblem& p, IndexOutput output, Status* status) {
  std::vector<int32_t> out(std::size_t(p.T() * p.top_k));
  testing::poison(out);
  DeviceArray<int32_t> d_out(out);
  DeviceArray<float8_e4m3fn> d_q(p.q);
  DeviceArray<float> d_qs(p.q_s);
  DeviceArray<uint32_t> d_offs(p.offs);
  DeviceEngine d(p);
  *status = cuda::mla_indexer_ragged_float8_paged(
      make_view(d_out.get(), p.T(), p.top_k),
      make_view<const float8_e4m3fn>(d_q.get(), p.T(), p.H, p.D),
      make_view<const float>(d_qs.get(), p.T(), p.H),
      make_view<const uint32_t>(d_offs.get(), int64_t(p.offs.size())), d.view, p.mask, d.host,
      Context{}, IndexerOptions{output, nullptr});
  if (status->ok()) *status = cuda::synchronize(Context{});
  return d_out.download();
}

TEST(CudaEngineLayout, IndicesAndGlobalSlotsEqualTheCpu) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  struct Case {
    int64_t H, D, top_k, page;
    std::vector<int64_t> cache, seq;
    MaskType mask;
  };
  const Case cases[] = {
      {64, 128, 2048, 64, {3000, 0, 70}, {1, 130, 2}, MaskType::kCausal},
      {16, 64, 24, 16, {5, 40, 0}, {2, 1, 17}, MaskType::kNull},
      {80, 48, 300, 4, {140, 255}, {130, 3}, MaskType::kCausal},
  };
  for (const Case& c : cases) {
    const EngineProblem p = make_problem(rng, c.H, c.D, c.top_k, c.page, c.cache, c.seq, c.mask);
    for (IndexOutput output : {IndexOutput::kPositions, IndexOutput::kGlobalSlots}) {
      SCOPED_TRACE(std::string(index_output_name(output)) + " page " + std::to_string(c.page));
      Status st;
      const std::vector<int32_t> gpu = run_gpu(p, output, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(gpu, run_cpu(p, output));
    }
  }
}

TEST(CudaEngineLayout, MisalignedPagesAreUnimplementedNotWrong) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  const EngineProblem p =
      make_problem(rng, 4, 32, 8, 5, {7}, {3}, MaskType::kCausal);  // 5 * 36 bytes a page
  Status st;
  run_gpu(p, IndexOutput::kPositions, &st);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
  EXPECT_NE(st.message().find("k_cache.page_stride_bytes"), std::string::npos) << st.to_string();
}

TEST(CudaEngineLayout, KStoreMatchesTheCpuStoreBitForBit) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    EngineProblem p = make_problem(rng, 1, 48, 1, 4, {3, 9, 0}, {7, 0, 12}, MaskType::kCausal);
    std::vector<float> k(std::size_t(p.T() * 48));
    for (float& v : k) v = rng.normal(0.0f, 3.0f);
    DeviceArray<float> d_k(k);
    DeviceArray<uint32_t> d_offs(p.offs);
    DeviceEngine d(p);
    const auto offs = make_view<const uint32_t>(p.offs.data(), int64_t(p.offs.size()));
    QUANTKV_ASSERT_OK(indexer_k_store(make_view<const float>(k.data(), p.T(), int64_t(48)), offs,
                                      p.engine.view, mode, Context{}));
    QUANTKV_ASSERT_OK(
        cuda::indexer_k_store(make_view<const float>(d_k.get(), p.T(), int64_t(48)),
                              make_view<const uint32_t>(d_offs.get(), int64_t(p.offs.size())),
                              d.view, mode, d.host, Context{}));
    QUANTKV_ASSERT_OK(cuda::synchronize(Context{}));
    EXPECT_EQ(d.storage.download(), p.engine.storage) << "engine buffer differs from the CPU store";
  }
}

}  // namespace
}  // namespace quantkv
