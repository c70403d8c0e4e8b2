// Many host threads calling both operations on one shared cache at once (issue 15): the
// indexer's K cache is only read, and each fused QKV call writes its own sequence's pages of a
// shared KV cache (disjoint slots, the caller's contract), while every call reads the shared
// metadata. The ThreadSanitizer job (preset tsan, .ci/run) builds just this binary; each call
// runs with ctx.num_threads = 1 so that libgomp's (uninstrumented) barrier is not in play.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "quantkv/checkpoint.hpp"
#include "robustness_fixtures.hpp"
#include "safetensors_writer.hpp"

namespace quantkv {
namespace {

constexpr int kHostThreads = 6;
constexpr int kCallsPerThread = 20;
constexpr uint64_t kSeed = 4242;

Context one_thread() {
  Context c;
  c.num_threads = 1;
  return c;
}

TEST(Concurrency, IndexerCallsShareOneCache) {
  testing::IndexerFixture f;
  f.build(kSeed);
  ASSERT_TRUE(f.run(one_thread()).ok());
  const std::vector<int32_t> expected = f.out;
  std::vector<std::vector<int32_t>> outs(kHostThreads, std::vector<int32_t>(expected.size(), -7));
  std::vector<std::thread> threads;
  std::vector<Status> status(kHostThreads);
  for (int t = 0; t < kHostThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread && status[t].ok(); ++i) {
        status[t] = mla_indexer_ragged_float8_paged(make_view(outs[t].data(), f.T(), f.top_k),
                                                    f.q_view(), f.qs_view(), f.offs_view(), f.kc,
                                                    f.layer, f.mask, one_thread());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kHostThreads; ++t) {
    EXPECT_TRUE(status[t].ok()) << status[t].to_string();
    EXPECT_EQ(outs[t], expected) << "thread " << t;
  }
}

// Threads loading from one sharded checkpoint at once: its shards are opened on first read
// (under the checkpoint's mutex) while the others read the map and the opened shards.
TEST(Concurrency, LoadersShareOneShardedCheckpoint) {
  testing::TempDir dir;
  dir.write_sharded(testing::ct_qkv(32), 3);
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(dir.path(), &ckpt).ok());
  std::vector<QkvCheckpointWeights> loaded(kHostThreads);
  std::vector<Status> status(kHostThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kHostThreads; ++t) {
    threads.emplace_back([&, t] {
      const SafetensorsCheckpoint copy = ckpt;  // copies share the opened shards
      status[t] = load_qkv_weights(t % 2 ? copy : ckpt, "L", &loaded[t], one_thread());
    });
  }
  for (auto& th : threads) th.join();
  // The prepared buffers' contents (read-only accessors).
  const auto data = [](const PreparedQkvWeights& w) {
    return std::vector<uint8_t>(w.data(), w.data() + w.data_bytes());
  };
  const auto scales = [](const PreparedQkvWeights& w) {
    return std::vector<uint16_t>(w.scales(), w.scales() + w.scale_count());
  };
  for (int t = 0; t < kHostThreads; ++t) {
    ASSERT_TRUE(status[t].ok()) << status[t].to_string();
    EXPECT_EQ(data(loaded[t].weights), data(loaded[0].weights)) << "thread " << t;
    EXPECT_EQ(scales(loaded[t].weights), scales(loaded[0].weights)) << "thread " << t;
  }
}

TEST(Concurrency, IndexerAndFusedQkvShareCachesAcrossThreads) {
  // One KV cache of kHostThreads sequences; thread t projects rows of sequence t only.
  testing::QkvFixture f;
  f.cache_lens.assign(kHostThreads, 3);
  f.seq_lens.assign(kHostThreads, 2);
  f.build(kSeed);
  testing::IndexerFixture ix;
  ix.build(kSeed);
  ASSERT_TRUE(ix.run(one_thread()).ok());
  const std::vector<int32_t> ix_expected = ix.out;
  std::vector<std::thread> threads;
  std::vector<Status> status(2 * kHostThreads);
  for (int t = 0; t < kHostThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint32_t> offs(kHostThreads + 1, 0);
      for (int b = t; b < kHostThreads; ++b) offs[b + 1] = 2;  // sequence t has the 2 rows
      const int64_t row_bytes_k = row_bytes(f.format, f.K);
      std::vector<bfloat16> out(size_t(2 * f.q_dim));
      for (int i = 0; i < kCallsPerThread && status[t].ok(); ++i) {
        status[t] = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            make_view<const uint8_t>(f.hidden.data() + 2 * t * row_bytes_k, 2, row_bytes_k),
            make_view<const uint32_t>(offs.data(), int64_t(offs.size())), f.weight_view(),
            make_view<const uint8_t, 5>(f.input_scale.data(), swizzled_scale_shape(2, f.kb())),
            f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, make_view(out.data(), 2, f.q_dim),
            f.format, one_thread());
      }
    });
    threads.emplace_back([&, t] {
      std::vector<int32_t> out(ix_expected.size(), -7);
      for (int i = 0; i < kCallsPerThread && status[kHostThreads + t].ok(); ++i) {
        status[kHostThreads + t] = mla_indexer_ragged_float8_paged(
            make_view(out.data(), ix.T(), ix.top_k), ix.q_view(), ix.qs_view(), ix.offs_view(),
            ix.kc, ix.layer, ix.mask, one_thread());
      }
      if (out != ix_expected)
        status[kHostThreads + t] = Status{StatusCode::kInternal, "indexer result differs"};
    });
  }
  for (auto& th : threads) th.join();
  for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace quantkv
