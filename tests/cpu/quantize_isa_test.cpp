// The companion quantisers' vector paths (src/cpu/quantize_avx512.cpp) against the scalar
// path, bit for bit, on random rows full of extremes (NaN, inf, signed zeros, subnormals,
// huge values, whole blocks near the float range's ends), all three block formats, f32 and
// bf16 input, K not a multiple of the vector width where the op allows it; and thread-count
// independence for tiny (one thread by the work rule) and large (two threads) calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/threads.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::ScopedIsa;
using testing::TestRng;
constexpr BlockFormat kFormats[] = {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8};

float special_value(TestRng& rng) {
  switch (rng.uniform_int(0, 11)) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return -std::numeric_limits<float>::quiet_NaN();
    case 2:
      return std::numeric_limits<float>::infinity();
    case 3:
      return -std::numeric_limits<float>::infinity();
    case 4:
      return 0.0f;
    case 5:
      return -0.0f;
    case 6:
      return detail::bits_float(uint32_t(rng.uniform_int(1, 0x7FFFFF)));  // subnormal
    case 7:
      return -std::numeric_limits<float>::max();
    case 8:
      return 3e38f;
    case 9:
      return std::numeric_limits<float>::min();
    // Exact e2m1 / e4m3 rounding ties once scaled by a power-of-two block scale.
    case 10:
      return float(rng.uniform_int(-13, 13)) * 0.25f;
    default:
      return 448.0f + float(rng.uniform_int(-16, 16));
  }
}

// Rows with ~1/8 special values; some whole 32-blocks tiny (subnormal) or huge.
std::vector<float> extreme_rows(TestRng& rng, int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = rng.normal() * std::exp2(float(rng.uniform_int(-20, 20)));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block_kind = (i / 32) % 9;
    if (block_kind == 2) x[i] *= 1e-39f;
    if (block_kind == 5) x[i] *= 1e34f;
    if (rng.uniform_int(0, 7) == 0) x[i] = special_value(rng);
  }
  return x;
}

struct Quantized {
  std::vector<uint8_t> data, scales;
};

template <typename T>
Quantized quantize(const std::vector<T>& x, int64_t m, int64_t k, float g, BlockFormat f,
                   int threads = 0) {
  const int64_t kb = k / sf_vector_size(f);
  Quantized q;
  q.data.assign(static_cast<std::size_t>(m * row_bytes(f, k)), 0xA5);
  q.scales.assign(static_cast<std::size_t>(swizzled_scale_elements(m, kb)), 0xA5);
  Context ctx;
  ctx.num_threads = threads;
  const Status s = quantize_dynamic_block_scaled(
      make_view<const T>(x.data(), m, k), g, f, make_view(q.data.data(), m, row_bytes(f, k)),
      make_view<uint8_t, 5>(q.scales.data(), swizzled_scale_shape(m, kb)), ctx);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return q;
}

TEST(QuantizeIsa, EveryPathEqualsScalarBitForBitOnExtremes) {
  TestRng rng;
  for (BlockFormat f : kFormats) {
    const int sfv = sf_vector_size(f);
    for (int64_t m : {1, 3, 130}) {
      for (int64_t blocks : {1, 2, 3, 7, 17}) {
        const int64_t k = sfv * blocks;
        SCOPED_TRACE(std::string(block_format_name(f)) + " M=" + std::to_string(m) +
                     " K=" + std::to_string(k));
        const std::vector<float> x = extreme_rows(rng, m * k);
        std::vector<bfloat16> xb(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) xb[i].bits = float_to_bf16(x[i]);
        for (float g : {1.0f, rng.uniform_float(1e-3f, 1e3f), 3e-30f, 2e30f}) {
          Quantized want_f, want_b;
          {
            ScopedIsa scalar(IsaLevel::kScalar);
            want_f = quantize(x, m, k, g, f);
            want_b = quantize(xb, m, k, g, f);
          }
          testing::for_each_isa([&](IsaLevel) {
            const Quantized got_f = quantize(x, m, k, g, f), got_b = quantize(xb, m, k, g, f);
            EXPECT_TRUE(got_f.data == want_f.data) << "f32 data, g=" << g;
            EXPECT_TRUE(got_f.scales == want_f.scales) << "f32 scales, g=" << g;
            EXPECT_TRUE(got_b.data == want_b.data) << "bf16 data, g=" << g;
            EXPECT_TRUE(got_b.scales == want_b.scales) << "bf16 scales, g=" << g;
          });
        }
      }
    }
  }
}

struct Prepared {
  std::vector<float8_e4m3fn> q8;
  std::vector<float> qs;
};

Prepared q_prepare(const std::vector<float>& q, const std::vector<float>& w, int64_t T, int64_t H,
                   int64_t D, ScaleMode mode, int threads = 0) {
  Prepared p;
  p.q8.resize(q.size());
  p.qs.resize(w.size());
  testing::poison(p.q8);
  testing::poison(p.qs);
  Context ctx;
  ctx.num_threads = threads;
  const Status s = indexer_q_prepare(
      make_view<const float>(q.data(), T, H, D), make_view<const float>(w.data(), T, H),
      make_view(p.q8.data(), T, H, D), make_view(p.qs.data(), T, H), mode, ctx);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return p;
}

bool same_bits(const Prepared& a, const Prepared& b) {
  return a.q8.size() == b.q8.size() && a.qs.size() == b.qs.size() &&
         std::memcmp(a.q8.data(), b.q8.data(), a.q8.size()) == 0 &&
         std::memcmp(a.qs.data(), b.qs.data(), a.qs.size() * sizeof(float)) == 0;
}

TEST(IndexerQPrepareIsa, EveryPathEqualsScalarBitForBitOnExtremes) {
  TestRng rng;
  for (int64_t D : {1, 7, 16, 17, 64, 128, 131}) {
    const int64_t T = 3, H = 5;
    SCOPED_TRACE("D=" + std::to_string(D));
    const std::vector<float> q = extreme_rows(rng, T * H * D);
    std::vector<float> w(static_cast<std::size_t>(T * H));
    for (float& v : w) v = rng.normal(0, 2);
    for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
      Prepared want;
      {
        ScopedIsa scalar(IsaLevel::kScalar);
        want = q_prepare(q, w, T, H, D, mode);
      }
      testing::for_each_isa(
          [&](IsaLevel) { EXPECT_TRUE(same_bits(q_prepare(q, w, T, H, D, mode), want)); });
    }
  }
}

// A tiny call runs on one thread whatever ctx.num_threads says, a large one on two (the
// work rule of threads_for_work); both give the same bits as ctx.num_threads = 1.
TEST(CompanionThreads, TinyAndLargeCallsAreThreadCountIndependent) {
  TestRng rng;
  for (int64_t m : {3, 200}) {
    const int64_t k = 4096;
    const std::vector<float> x = extreme_rows(rng, m * k);
    for (BlockFormat f : kFormats) {
      const Quantized one = quantize(x, m, k, 2.5f, f, 1), two = quantize(x, m, k, 2.5f, f, 2);
      EXPECT_TRUE(one.data == two.data && one.scales == two.scales)
          << block_format_name(f) << " M=" << m;
    }
    const int64_t H = 8, D = 128, T = m;
    const std::vector<float> q = extreme_rows(rng, T * H * D);
    std::vector<float> w(static_cast<std::size_t>(T * H));
    for (float& v : w) v = rng.normal(0, 2);
    EXPECT_TRUE(same_bits(q_prepare(q, w, T, H, D, ScaleMode::kFloat, 1),
                          q_prepare(q, w, T, H, D, ScaleMode::kFloat, 2)))
        << "T=" << T;
  }
}

TEST(CompanionThreads, ThreadsForWorkFollowsTheGrain) {
  Context ctx;
  ctx.num_threads = 4;
  const int max_threads = std::min(4, max_num_threads());  // 4 <= the cap's floor of 16
  EXPECT_EQ(threads_for_work(ctx, 0.0, kMinBytesPerThread), 1);
  EXPECT_EQ(threads_for_work(ctx, 1.9 * kMinBytesPerThread, kMinBytesPerThread), 1);
  EXPECT_EQ(threads_for_work(ctx, 2.0 * kMinBytesPerThread, kMinBytesPerThread),
            std::min(2, max_threads));
  EXPECT_EQ(threads_for_work(ctx, 3.5 * kMinBytesPerThread, kMinBytesPerThread),
            std::min(3, max_threads));
  EXPECT_EQ(threads_for_work(ctx, 1e12, kMinBytesPerThread), max_threads);
  ctx.num_threads = 1;
  EXPECT_EQ(threads_for_work(ctx, 1e12, kMinBytesPerThread), 1);
}

}  // namespace
}  // namespace quantkv
