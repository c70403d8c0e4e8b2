// fused_qk_rope_ragged on the GPU against the CPU path, bit for bit (skips without a device):
// bf16, f16, f32 and e4m3-with-scales caches, both layouts, leading/trailing, position ids.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_test_util.hpp"
#include "quantkv/rope.hpp"
#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::DeviceArray;
using testing::DeviceCache;
using testing::TestRng;

TEST(CudaFusedQkRope, MatchesTheCpuPathBitForBit) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  const std::vector<int64_t> cache_lens{5, 0, 17}, seq_lens{3, 0, 9};
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3}) {
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " variant " + std::to_string(variant));
      const int64_t D = 96, rope_dim = 64, Hq = 3, max_seq = 40;
      PagedKVCacheConfig cfg;
      cfg.dtype = dtype;
      cfg.num_layers = 2;
      cfg.page_size = 4;
      cfg.num_heads = 2;
      cfg.head_size = D;
      cfg.scale_granularity = dtype == DType::kE4M3 ? 32 : 0;
      PagedKVCache cache = testing::make_test_cache(cfg, cache_lens, seq_lens, rng.engine()());
      for (int64_t i = 0; i < int64_t(cache.raw_blocks().size() / dtype_size(dtype)); ++i) {
        store_from_float(cache.raw_blocks().data(), dtype, i, rng.normal(0.0f, 2.0f));
      }
      for (float& s : cache.raw_scales()) s = rng.uniform_float(0.5f, 2.0f);
      const std::vector<uint32_t> offs = testing::offsets_of(seq_lens);
      const int64_t T = offs.back();
      std::vector<bfloat16> q(size_t(T * Hq * D));
      for (auto& v : q) v.bits = float_to_bf16(rng.normal(0.0f, 2.0f));
      std::vector<float> freqs(size_t(max_seq * rope_dim));
      QUANTKV_ASSERT_OK(make_freqs_cis(make_view(freqs.data(), max_seq, rope_dim), 10000.0));
      std::vector<uint32_t> ids(static_cast<size_t>(T));
      for (auto& p : ids) p = uint32_t(rng.uniform_int(0, max_seq - 1));

      DeviceCache device_cache(cache);  // before the CPU call changes the host cache
      DeviceArray<bfloat16> dq(q), dout(q);
      DeviceArray<float> dfreqs(freqs);
      DeviceArray<uint32_t> doffs(offs), dids(ids);
      RopeOptions o;
      o.freqs_cis = make_view<const float>(freqs.data(), max_seq, rope_dim);
      o.layout = variant % 2 ? RopeLayout::kHalfSplit : RopeLayout::kInterleaved;
      o.placement = variant / 2 ? RopePlacement::kLeading : RopePlacement::kTrailing;
      if (variant == 3) o.position_ids = make_view<const uint32_t>(ids.data(), T);
      RopeOptions od = o;
      od.freqs_cis.data = dfreqs.get();
      if (variant == 3) od.position_ids.data = dids.get();

      std::vector<bfloat16> out(q.size());
      const auto host_offs = make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
      QUANTKV_ASSERT_OK(fused_qk_rope_ragged(make_view<const bfloat16>(q.data(), T, Hq, D),
                                             host_offs, cache.view(), o, 1,
                                             make_view(out.data(), T, Hq, D), Context{}));
      QUANTKV_ASSERT_OK(cuda::fused_qk_rope_ragged(
          make_view<const bfloat16>(dq.get(), T, Hq, D),
          make_view<const uint32_t>(doffs.get(), int64_t(offs.size())), device_cache.view(), od, 1,
          make_view(dout.get(), T, Hq, D), device_cache.host_ragged(host_offs), Context{}));
      QUANTKV_ASSERT_OK(cuda::synchronize(Context{}));
      const std::vector<bfloat16> got = dout.download();
      EXPECT_EQ(std::memcmp(got.data(), out.data(), out.size() * sizeof(bfloat16)), 0)
          << "q output differs";
      EXPECT_EQ(device_cache.blocks(), cache.raw_blocks()) << "K cache differs";
    }
  }
}

}  // namespace
}  // namespace quantkv
