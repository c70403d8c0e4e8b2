// Sparse MLA attention (quantkv/sparse_mla.hpp): every ISA level and thread count gives the bits
// of the fp32 replay of docs/sparse_mla.md's canonical order written here (out bf16 and lse),
// and stays within a stated bound of an fp64 evaluation of the same dequantised inputs. bf16 and
// FlashMLA fp8 caches, DeepSeek-V3.2's d_v = 512 / d_rope = 64 and smaller ones (d_v 100 to
// 384); H = 1, 8, 12, 16, 20, 64, 128; top_k = 1, 7, 64, 65, 129, 700, 2048, 3000; T = 0, 1, 5;
// -1 entries, a row of only -1, duplicate slots, random (shuffled) slots, topk_length (0
// included); one item split between the threads. Outputs are poisoned before each run.
#include "quantkv/sparse_mla.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "quantkv/fp32_math.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

struct Case {
  int64_t t, h, top_k, d_v, d_rope;
  bool fp8;
  bool use_length;
  int64_t num_slots;
};

std::string name(const Case& c) {
  return "T = " + std::to_string(c.t) + " H = " + std::to_string(c.h) +
         " top_k = " + std::to_string(c.top_k) + " d_v = " + std::to_string(c.d_v) +
         " d_rope = " + std::to_string(c.d_rope) + (c.fp8 ? " fp8" : " bf16") +
         (c.use_length ? " topk_length" : "");
}

// A random problem: queries, one cache (bf16 or fp8 rows), indices with -1s, duplicates and an
// all -1 row, optional lengths.
struct Problem {
  Case c{};
  int64_t d_qk = 0, row_bytes = 0;
  std::vector<uint16_t> q, kv;
  std::vector<uint8_t> kv8;
  std::vector<int32_t> indices, length;
  float sm_scale = 0.0f;

  Problem(const Case& cs, TestRng& rng) : c(cs) {
    d_qk = c.d_v + c.d_rope;
    q.resize(std::size_t(c.t * c.h * d_qk));
    for (auto& x : q) x = float_to_bf16(rng.normal());
    if (c.fp8) {
      row_bytes = sparse_mla_fp8_row_bytes(c.d_v, c.d_rope);
      kv8.resize(std::size_t(c.num_slots * row_bytes));
      for (int64_t s = 0; s < c.num_slots; ++s) {
        uint8_t* row = kv8.data() + s * row_bytes;
        for (int64_t d = 0; d < c.d_v; ++d) {
          uint8_t b = uint8_t(rng.uniform_int(0, 255));
          if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN
          row[d] = b;
        }
        for (int64_t b = 0; b < c.d_v / 128; ++b) {
          const float scale =
              std::ldexp(rng.uniform_float(1.0f, 2.0f), -int(rng.uniform_int(7, 9)));
          std::memcpy(row + c.d_v + 4 * b, &scale, 4);
        }
        for (int64_t d = 0; d < c.d_rope; ++d) {
          const uint16_t v = float_to_bf16(rng.normal());
          std::memcpy(row + c.d_v + 4 * (c.d_v / 128) + 2 * d, &v, 2);
        }
      }
    } else {
      kv.resize(std::size_t(c.num_slots * d_qk));
      for (auto& x : kv) x = float_to_bf16(rng.normal());
    }
    indices.resize(std::size_t(c.t * c.top_k));
    for (int64_t t = 0; t < c.t; ++t) {
      for (int64_t j = 0; j < c.top_k; ++j) {
        int32_t s = int32_t(rng.uniform_int(0, c.num_slots - 1));
        const int64_t r = rng.uniform_int(0, 9);
        if (r == 0) s = -1;
        if (r == 1 && j > 0) s = indices[std::size_t(t * c.top_k + j - 1)];  // duplicate
        indices[std::size_t(t * c.top_k + j)] = s;
      }
    }
    if (c.t >= 3) std::fill_n(indices.begin() + 2 * c.top_k, c.top_k, -1);  // token 2: none
    if (c.use_length) {
      length.resize(std::size_t(c.t));
      for (auto& l : length) l = int32_t(rng.uniform_int(0, c.top_k));
      if (c.t >= 2) length[1] = 0;
      if (c.t >= 4) length[3] = int32_t(c.top_k);
    }
    sm_scale = 1.0f / std::sqrt(float(d_qk));
  }

  // Value d of slot s, dequantised as docs/sparse_mla.md says.
  float value(int64_t s, int64_t d) const {
    if (!c.fp8) return bf16_to_float(kv[std::size_t(s * d_qk + d)]);
    const uint8_t* row = kv8.data() + s * row_bytes;
    if (d < c.d_v) {
      float scale;
      std::memcpy(&scale, row + c.d_v + 4 * (d / 128), 4);
      return e4m3_to_float(row[d]) * scale;
    }
    uint16_t b;
    std::memcpy(&b, row + c.d_v + 4 * (c.d_v / 128) + 2 * (d - c.d_v), 2);
    return bf16_to_float(b);
  }
  std::vector<int64_t> valid_slots(int64_t t) const {
    const int64_t len = c.use_length ? int64_t(length[std::size_t(t)]) : c.top_k;
    std::vector<int64_t> v;
    for (int64_t j = 0; j < len; ++j) {
      const int32_t s = indices[std::size_t(t * c.top_k + j)];
      if (s >= 0) v.push_back(s);
    }
    return v;
  }
  float qv(int64_t t, int64_t h, int64_t d) const {
    return bf16_to_float(q[std::size_t((t * c.h + h) * d_qk + d)]);
  }

  SparseMlaArgs args(std::vector<uint16_t>& out, std::vector<float>& lse) const {
    SparseMlaArgs a;
    a.q = make_view(reinterpret_cast<const bfloat16*>(q.data()), c.t, c.h, d_qk);
    if (c.fp8) {
      a.kv_fp8 = make_view(kv8.data(), c.num_slots, row_bytes);
    } else {
      a.kv = make_view(reinterpret_cast<const bfloat16*>(kv.data()), c.num_slots, d_qk);
    }
    a.indices = make_view(indices.data(), c.t, c.top_k);
    if (c.use_length) a.topk_length = make_view(length.data(), c.t);
    a.sm_scale = sm_scale;
    a.out = make_view(reinterpret_cast<bfloat16*>(out.data()), c.t, c.h, c.d_v);
    a.lse = make_view(lse.data(), c.t, c.h);
    return a;
  }
};

// The fp32 replay of the canonical order: the bits every path must give.
void reference_fp32(const Problem& p, std::vector<uint16_t>& out, std::vector<float>& lse) {
  const Case& c = p.c;
  for (int64_t t = 0; t < c.t; ++t) {
    const std::vector<int64_t> slots = p.valid_slots(t);
    const auto n = slots.size();
    for (int64_t h = 0; h < c.h; ++h) {
      uint16_t* o = out.data() + (t * c.h + h) * c.d_v;
      if (n == 0) {
        std::fill_n(o, c.d_v, uint16_t(0));
        lse[std::size_t(t * c.h + h)] = -std::numeric_limits<float>::infinity();
        continue;
      }
      std::vector<float> s(n);
      for (std::size_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t d = 0; d < p.d_qk; ++d)
          acc = std::fma(p.qv(t, h, d), p.value(slots[j], d), acc);
        s[j] = acc * p.sm_scale;
      }
      float m = s[0];
      for (std::size_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
      float l = 0.0f;
      for (std::size_t j = 0; j < n; ++j) {
        s[j] = detail::exp_f32(s[j] - m);
        l = l + s[j];
      }
      for (int64_t v = 0; v < c.d_v; ++v) {
        float acc = 0.0f;
        for (std::size_t j = 0; j < n; ++j) acc = std::fma(s[j], p.value(slots[j], v), acc);
        o[v] = float_to_bf16(acc / l);
      }
      lse[std::size_t(t * c.h + h)] = m + std::log(l);
    }
  }
}

// fp64 on the same dequantised inputs, with the bound the fp32 result must meet:
//   |out - out64| <= 2^-8 |out64| + (4 delta + 3 n 2^-24) vmax      (bf16 RNE: 2^-9 relative)
//   |lse - lse64| <= delta + 2 n 2^-24 + 2^-23 |lse64|
// where delta = (d_qk + 2) 2^-24 sm_scale max_j sum_d |q_d k_d| bounds the error of a score
// (an fp32 fma chain of d_qk terms), n is the number of valid keys, vmax = max |value|.
void check_fp64(const Problem& p, const std::vector<uint16_t>& out, const std::vector<float>& lse) {
  const Case& c = p.c;
  const double u = std::ldexp(1.0, -24);
  for (int64_t t = 0; t < c.t; ++t) {
    const std::vector<int64_t> slots = p.valid_slots(t);
    const auto n = slots.size();
    for (int64_t h = 0; h < c.h; ++h) {
      const uint16_t* o = out.data() + (t * c.h + h) * c.d_v;
      const float got_lse = lse[std::size_t(t * c.h + h)];
      if (n == 0) {
        for (int64_t v = 0; v < c.d_v; ++v) ASSERT_EQ(o[v], 0u);
        ASSERT_TRUE(std::isinf(got_lse) && got_lse < 0) << got_lse;
        continue;
      }
      std::vector<double> s(n);
      double mag = 0.0, vmax = 0.0;
      for (std::size_t j = 0; j < n; ++j) {
        double acc = 0.0, abs_sum = 0.0;
        for (int64_t d = 0; d < p.d_qk; ++d) {
          const double x = double(p.qv(t, h, d)) * double(p.value(slots[j], d));
          acc += x;
          abs_sum += std::fabs(x);
        }
        s[j] = acc * double(p.sm_scale);
        mag = std::max(mag, abs_sum * double(p.sm_scale));
        for (int64_t v = 0; v < c.d_v; ++v)
          vmax = std::max(vmax, std::fabs(double(p.value(slots[j], v))));
      }
      const double delta = double(p.d_qk + 2) * u * mag;
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0.0;
      for (double& x : s) {
        x = std::exp(x - m);
        l += x;
      }
      const double want_lse = m + std::log(l);
      ASSERT_LE(std::fabs(double(got_lse) - want_lse),
                delta + 2.0 * double(n) * u + 2.0 * u * std::fabs(want_lse))
          << "lse at t = " << t << " h = " << h;
      const double bound_abs = (4.0 * delta + 3.0 * double(n) * u) * vmax;
      for (int64_t v = 0; v < c.d_v; ++v) {
        double acc = 0.0;
        for (std::size_t j = 0; j < n; ++j) acc += s[j] * double(p.value(slots[j], v));
        const double want = acc / l;
        ASSERT_LE(std::fabs(double(bf16_to_float(o[v])) - want),
                  std::ldexp(std::fabs(want), -8) + bound_abs)
            << "out at t = " << t << " h = " << h << " v = " << v;
      }
    }
  }
}

void run_case(const Case& c) {
  SCOPED_TRACE(name(c));
  TestRng rng;
  const Problem p(c, rng);
  std::vector<uint16_t> ref_out(std::size_t(c.t * c.h * c.d_v));
  std::vector<float> ref_lse(std::size_t(c.t * c.h));
  reference_fp32(p, ref_out, ref_lse);
  check_fp64(p, ref_out, ref_lse);
  testing::for_each_isa([&](IsaLevel) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      std::vector<uint16_t> out(ref_out.size());
      std::vector<float> lse(ref_lse.size());
      testing::poison(out);
      testing::poison(lse);
      Context ctx;
      ctx.num_threads = threads;
      const Status st = sparse_mla_attention(p.args(out, lse), ctx);
      ASSERT_TRUE(st.ok()) << st.message();
      for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], ref_out[i]) << "out element " << i;
      }
      for (std::size_t i = 0; i < lse.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &lse[i], 4);
        std::memcpy(&b, &ref_lse[i], 4);
        ASSERT_EQ(a, b) << "lse element " << i << ": " << lse[i] << " vs " << ref_lse[i];
      }
    }
  });
}

TEST(SparseMla, SmallShapesEveryIsa) {
  const Case cases[] = {
      {1, 1, 1, 128, 32, false, false, 40},   {5, 8, 7, 128, 32, true, false, 40},
      {5, 16, 64, 128, 32, false, true, 300}, {5, 20, 65, 128, 32, true, true, 300},
      {5, 1, 64, 128, 32, true, false, 100},  {5, 16, 1, 128, 32, true, true, 10},
      {0, 16, 64, 128, 32, false, false, 10}, {3, 20, 7, 100, 28, false, false, 50},
  };
  for (const Case& c : cases) run_case(c);
}

TEST(SparseMla, DeepSeekShapesEveryIsa) {
  const Case cases[] = {
      {5, 20, 64, 512, 64, true, true, 500},     {1, 128, 64, 512, 64, false, false, 500},
      {5, 128, 7, 512, 64, true, false, 500},    {5, 16, 64, 512, 64, false, true, 200},
      {1, 16, 2048, 512, 64, true, false, 5000},
  };
  for (const Case& c : cases) run_case(c);
}

// One token with at most 16 heads and enough work for two threads: the driver's split mode (one
// item, its key blocks and 128-value chunks shared by the threads; 1, 3 and 4 value chunks,
// key-block counts odd and even, partial last blocks); H = 64 splits into two items instead.
TEST(SparseMla, SplitItemEveryIsa) {
  const Case cases[] = {
      {1, 12, 700, 384, 64, true, true, 3000},   {1, 12, 700, 384, 64, false, false, 3000},
      {1, 16, 3000, 100, 28, false, true, 4000}, {1, 8, 2048, 512, 64, true, false, 4000},
      {1, 64, 129, 256, 64, false, false, 300},
  };
  for (const Case& c : cases) run_case(c);
}

// Without lse the output is the same; an out of T = 0 is accepted.
TEST(SparseMla, LseOptional) {
  TestRng rng;
  const Case c{3, 16, 64, 128, 32, true, true, 100};
  const Problem p(c, rng);
  std::vector<uint16_t> a_out(std::size_t(c.t * c.h * c.d_v)), b_out(a_out.size());
  std::vector<float> lse(std::size_t(c.t * c.h));
  testing::poison(a_out);
  testing::poison(b_out, 0x5A);
  ASSERT_TRUE(sparse_mla_attention(p.args(a_out, lse), {}).ok());
  SparseMlaArgs a = p.args(b_out, lse);
  a.lse = {};
  ASSERT_TRUE(sparse_mla_attention(a, {}).ok());
  EXPECT_EQ(a_out, b_out);
}

}  // namespace
}  // namespace quantkv
