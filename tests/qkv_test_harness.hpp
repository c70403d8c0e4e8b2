// Shared harness of the fused QKV projection tests (qkv_fp4_test.cpp, qkv_mxfp8_test.cpp):
// builds a ragged batch over a shuffled paged cache, random or exact-mode inputs, and checks
// the op against the scalar reference (bit for bit, every ISA, prepared or not, 1 or 3
// threads) and the reference against an fp64 computation with a documented bound; canaries
// show that nothing outside the target slots changes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "quantkv/qkv_fp4.hpp"
#include "quantkv/scale_layout.hpp"
#include "reference/qkv_fp4_reference.hpp"
#include "test_util.hpp"

namespace quantkv::qkv_test {

using quantkv::testing::TestRng;

struct QkvShape {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t k = 64;
  int64_t q_heads = 2, kv_heads = 1, head = 16;
  int64_t kv_dim = 2;
  int64_t page = 16;
  DType dtype = DType::kBF16;
  std::vector<int64_t> seq_lens{3};
  std::vector<int64_t> cache_lens{0};
  // Positions backed by pages, per sequence (-1: all of cache_len + seq_len). Rows beyond are
  // padding rows whose page is the sentinel.
  std::vector<int64_t> backed;
  SectionScales sf{1.0f, 1.0f, 1.0f};
  bool single_sf = true;  // use the tensor_sf overload with sf.q
  bool exact = false;     // exact-mode inputs: every fp32 partial sum is exact
  int64_t num_layers = 2;
  uint32_t layer = 1;
};

inline int64_t total_rows(const QkvShape& s) {
  int64_t m = 0;
  for (int64_t l : s.seq_lens) m += l;
  return m;
}

// Inputs and the cache of one case.
struct QkvCase {
  QkvShape shape;
  int64_t m = 0, n = 0, q_dim = 0, kv_width = 0, kb_count = 0;
  std::vector<uint8_t> hidden, weight, iscale, wscale;
  std::vector<uint32_t> offsets;
  PagedKVCache cache;
  std::vector<uint8_t> canary_blocks;  // the cache before the call

  TensorView<const uint8_t, 2> hidden_view() const {
    return make_view<const uint8_t>(hidden.data(), m, row_bytes(shape.format, shape.k));
  }
  TensorView<const uint8_t, 2> weight_view() const {
    return make_view<const uint8_t>(weight.data(), n, row_bytes(shape.format, shape.k));
  }
  TensorView<const uint8_t, 5> iscale_view() const {
    return make_view<const uint8_t, 5>(iscale.data(), swizzled_scale_shape(m, kb_count));
  }
  TensorView<const uint8_t, 5> wscale_view() const {
    return make_view<const uint8_t, 5>(wscale.data(), swizzled_scale_shape(n, kb_count));
  }
  TensorView<const uint32_t, 1> offsets_view() const {
    return make_view<const uint32_t>(offsets.data(), int64_t(offsets.size()));
  }
};

// A random data byte: any packed e2m1 pair, or any non-NaN e4m3 (MXFP8). Exact mode keeps
// MXFP8 values in {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4} so block sums stay exact.
inline uint8_t random_data_byte(const QkvShape& s, TestRng& rng) {
  if (s.format != BlockFormat::kMXFP8) return uint8_t(rng.uniform_int(0, 255));
  if (s.exact) {
    static const uint8_t kSmall[] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48};
    return uint8_t(kSmall[rng.uniform_int(0, 6)] | (rng.uniform_int(0, 1) << 7));
  }
  uint8_t b;
  do b = uint8_t(rng.uniform_int(0, 255));
  while ((b & 0x7F) == 0x7F);
  return b;
}

// A random block scale code. Exact mode: powers of two 0.5, 1, 2. NVFP4 scales get a random
// sign bit, which the op must ignore.
inline uint8_t random_scale_code(const QkvShape& s, TestRng& rng) {
  if (has_e8m0_scales(s.format)) {
    return uint8_t(s.exact ? rng.uniform_int(126, 128) : rng.uniform_int(112, 136));
  }
  const uint8_t sign = uint8_t(rng.uniform_int(0, 1) << 7);
  if (s.exact) return uint8_t(sign | (0x30 + 8 * rng.uniform_int(0, 2)));
  return uint8_t(sign | rng.uniform_int(0x01, 0x7E));  // subnormals included, never NaN
}

inline void fill_scales(const QkvShape& s, int64_t rows, int64_t kb_count, TestRng& rng,
                        std::vector<uint8_t>* out) {
  out->assign(std::size_t(swizzled_scale_elements(rows, kb_count)), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < kb_count; ++kb)
      (*out)[swizzled_scale_offset(r, kb, kb_count)] = random_scale_code(s, rng);
}

inline QkvCase make_case(const QkvShape& s, TestRng& rng) {
  QkvCase c;
  c.shape = s;
  c.m = total_rows(s);
  c.q_dim = s.q_heads * s.head;
  c.kv_width = s.kv_heads * s.head;
  c.n = c.q_dim + s.kv_dim * c.kv_width;
  c.kb_count = s.k / sf_vector_size(s.format);
  const int64_t rb = row_bytes(s.format, s.k);
  c.hidden.resize(std::size_t(c.m * rb));
  c.weight.resize(std::size_t(c.n * rb));
  for (auto& b : c.hidden) b = random_data_byte(s, rng);
  for (auto& b : c.weight) b = random_data_byte(s, rng);
  fill_scales(s, c.m, c.kb_count, rng, &c.iscale);
  fill_scales(s, c.n, c.kb_count, rng, &c.wscale);
  c.offsets.assign(1, 0);
  for (int64_t l : s.seq_lens) c.offsets.push_back(c.offsets.back() + uint32_t(l));

  const int64_t batch = int64_t(s.seq_lens.size());
  int64_t max_pos = 1, pages = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t end = s.cache_lens[b] + s.seq_lens[b];
    max_pos = std::max(max_pos, end);
    pages += (end + s.page - 1) / s.page;
  }
  PagedKVCacheConfig cfg;
  cfg.dtype = s.dtype;
  cfg.num_blocks = pages + 2;  // two pages nobody owns: must stay untouched
  cfg.kv_dim = s.kv_dim;
  cfg.num_layers = s.num_layers;
  cfg.page_size = s.page;
  cfg.num_heads = s.kv_heads;
  cfg.head_size = s.head;
  cfg.batch_size = batch;
  cfg.max_pages_per_seq = (max_pos + s.page - 1) / s.page + 1;
  EXPECT_TRUE(PagedKVCache::create(cfg, rng.engine()(), &c.cache).ok());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t end = s.cache_lens[b] + s.seq_lens[b];
    const int64_t backed = s.backed.empty() || s.backed[b] < 0 ? end : s.backed[b];
    EXPECT_TRUE(c.cache.reserve(b, backed).ok());
    c.cache.raw_cache_lengths()[b] = uint32_t(s.cache_lens[b]);
  }
  // Canaries: random bytes everywhere, so a stray write shows whatever it stores.
  for (auto& b : c.cache.raw_blocks()) b = uint8_t(rng.uniform_int(0, 255));
  c.canary_blocks = c.cache.raw_blocks();
  return c;
}

inline Status run_op(QkvCase& c, std::vector<uint16_t>* out, const Context& ctx,
                     const PreparedQkvWeights* prepared = nullptr) {
  auto output = make_view(reinterpret_cast<bfloat16*>(out->data()), c.m, c.q_dim);
  const PagedKVCacheCollection kv = c.cache.view();
  if (prepared != nullptr) {
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        c.hidden_view(), c.offsets_view(), *prepared, c.iscale_view(), c.shape.sf, kv,
        c.shape.layer, output, ctx);
  }
  if (c.shape.single_sf) {
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        c.hidden_view(), c.offsets_view(), c.weight_view(), c.iscale_view(), c.wscale_view(),
        c.shape.sf.q, kv, c.shape.layer, output, c.shape.format, ctx);
  }
  return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      c.hidden_view(), c.offsets_view(), c.weight_view(), c.iscale_view(), c.wscale_view(),
      c.shape.sf, kv, c.shape.layer, output, c.shape.format, ctx);
}

// fp64 value of c[m, n] (before the section factor) and the sum of |terms| for the bound.
inline void exact_element(const QkvCase& c, int64_t m, int64_t n, double* value, double* abs_sum) {
  const BlockFormat f = c.shape.format;
  const int sfv = sf_vector_size(f);
  const int64_t rb = row_bytes(f, c.shape.k);
  const uint8_t* a = c.hidden.data() + m * rb;
  const uint8_t* b = c.weight.data() + n * rb;
  double v = 0, s = 0;
  for (int64_t kb = 0; kb < c.kb_count; ++kb) {
    const uint8_t ca = c.iscale[swizzled_scale_offset(m, kb, c.kb_count)];
    const uint8_t cb = c.wscale[swizzled_scale_offset(n, kb, c.kb_count)];
    const double sa =
        has_e8m0_scales(f) ? std::ldexp(1.0, int(ca) - 127) : std::fabs(double(e4m3_to_float(ca)));
    const double sb =
        has_e8m0_scales(f) ? std::ldexp(1.0, int(cb) - 127) : std::fabs(double(e4m3_to_float(cb)));
    double dot = 0, adot = 0;
    for (int64_t i = kb * sfv; i < (kb + 1) * sfv; ++i) {
      const double x =
          f == BlockFormat::kMXFP8 ? e4m3_to_float(a[i]) : e2m1_to_float(e2m1_get(a, i));
      const double y =
          f == BlockFormat::kMXFP8 ? e4m3_to_float(b[i]) : e2m1_to_float(e2m1_get(b, i));
      dot += x * y;
      adot += std::fabs(x * y);
    }
    v += dot * sa * sb;
    s += adot * sa * sb;
  }
  *value = v;
  *abs_sum = s;
}

// Rounding error of storing v in `dtype` (half an ulp, with the subnormal floor and e4m3's
// saturation at 448).
inline double store_error_bound(double v, DType dtype) {
  const double a = std::fabs(v);
  switch (dtype) {
    case DType::kF32:
      return a * 0x1p-24 + 0x1p-149;
    case DType::kBF16:
      return a * 0x1p-8 + 0x1p-133;
    case DType::kF16:
      return a * 0x1p-11 + 0x1p-25;
    case DType::kE4M3:
      return (a > 448 ? a - 448 : 0) + a * 0x1p-4 + 0x1p-10;
  }
  return 0;
}

// Checks the reference result against fp64: |got - exact| <= fp32 accumulation error
// ((Kb + 1) u sum|terms|, plus 32 u sum|terms| for MXFP8's block sums) + the store rounding.
// Exact mode: the accumulation is exact, so got must equal the rounded exact value.
// `element` replaces exact_element and `acc_terms` the count of rounded terms (other modes).
using ExactElement = std::function<void(int64_t m, int64_t n, double* value, double* abs_sum)>;
inline void check_against_fp64(const QkvCase& c, const std::vector<uint16_t>& out,
                               const std::vector<uint8_t>& blocks,
                               const ExactElement& element = nullptr, double acc_terms = 0) {
  const QkvShape& s = c.shape;
  const PagedKVCacheCollection kv = const_cast<PagedKVCache&>(c.cache).view();
  const double u = 0x1p-24;
  if (acc_terms == 0)
    acc_terms = double(c.kb_count + 1) + (s.format == BlockFormat::kMXFP8 ? 32 : 0);
  int failures = 0;
  for (int64_t b = 0; b + 1 < int64_t(c.offsets.size()); ++b) {
    for (int64_t m = c.offsets[b]; m < int64_t(c.offsets[b + 1]); ++m) {
      const int64_t pos = s.cache_lens[b] + (m - c.offsets[b]);
      const uint32_t page = kv.page_of(b, pos);
      for (int64_t n = 0; n < c.n && failures < 10; ++n) {
        double v, abs_sum;
        if (element) {
          element(m, n, &v, &abs_sum);
        } else {
          exact_element(c, m, n, &v, &abs_sum);
        }
        double got;
        DType dtype;
        float sf;
        if (n < c.q_dim) {
          sf = s.sf.q;
          dtype = DType::kBF16;
          got = bf16_to_float(out[m * c.q_dim + n]);
        } else {
          if (int64_t(page) >= kv.num_blocks) continue;
          const int64_t col = n - c.q_dim, kvi = col < c.kv_width ? 0 : 1;
          const int64_t w = col - kvi * c.kv_width;
          sf = kvi == 0 ? s.sf.k : s.sf.v;
          dtype = s.dtype;
          got = load_as_float(
              blocks.data(), dtype,
              kv.element_offset(page, kvi, s.layer, pos % s.page, w / s.head, w % s.head));
        }
        const double want = v * sf;
        double tol;
        if (s.exact) {
          // The exact value converted once: what a correctly rounded store gives.
          std::vector<uint8_t> one(4);
          store_from_float(one.data(), dtype, 0, float(want));
          tol = 0;
          const double rounded = load_as_float(one.data(), dtype, 0);
          if (got != rounded) {
            ++failures;
            ADD_FAILURE() << "exact mode m=" << m << " n=" << n << " got " << got << " want "
                          << rounded;
          }
          continue;
        }
        const double acc_err = acc_terms * u * abs_sum * std::fabs(sf);
        tol = acc_err + store_error_bound(std::fabs(want) + acc_err, dtype);
        if (dtype == DType::kF16 && std::fabs(want) + acc_err >= 65504.0) {
          // fp16 overflows to inf from 65520 on (RNE); near the edge either is right.
          const bool ok = std::isinf(got)
                              ? (got > 0) == (want > 0) && std::fabs(want) + acc_err >= 65520.0
                              : std::fabs(got - want) <= tol;
          if (!ok) {
            ++failures;
            ADD_FAILURE() << "fp16 overflow m=" << m << " n=" << n << " got " << got << " fp64 "
                          << want;
          }
          continue;
        }
        if (!(std::fabs(got - want) <= tol)) {
          ++failures;
          ADD_FAILURE() << "m=" << m << " n=" << n << " got " << got << " fp64 " << want
                        << " tolerance " << tol;
        }
      }
    }
  }
}

// Every element outside the target slots (rows with a real page) keeps its canary.
inline void check_canaries(const QkvCase& c, const std::vector<uint8_t>& blocks) {
  const QkvShape& s = c.shape;
  const PagedKVCacheCollection kv = const_cast<PagedKVCache&>(c.cache).view();
  const std::size_t es = dtype_size(s.dtype);
  std::vector<uint8_t> target(std::size_t(kv.total_elements()), 0);
  for (int64_t b = 0; b + 1 < int64_t(c.offsets.size()); ++b) {
    for (int64_t i = 0; i < s.seq_lens[b]; ++i) {
      const int64_t pos = s.cache_lens[b] + i;
      const uint32_t page = kv.page_of(b, pos);
      if (int64_t(page) >= kv.num_blocks) continue;
      for (int64_t kvi = 0; kvi < s.kv_dim; ++kvi)
        for (int64_t h = 0; h < s.kv_heads; ++h)
          for (int64_t d = 0; d < s.head; ++d)
            target[kv.element_offset(page, kvi, s.layer, pos % s.page, h, d)] = 1;
    }
  }
  int64_t changed_outside = 0;
  for (std::size_t e = 0; e < target.size(); ++e) {
    if (!target[e] && std::memcmp(&blocks[e * es], &c.canary_blocks[e * es], es) != 0)
      ++changed_outside;
  }
  EXPECT_EQ(changed_outside, 0) << "elements outside the target slots changed";
}

// The full check of one case: reference vs fp64 and canaries; then every ISA, plain and
// prepared, 1 and 3 threads, bit for bit against the reference.
inline void check_case(const QkvShape& s, TestRng& rng) {
  QkvCase c = make_case(s, rng);
  const int64_t out_elems = c.m * c.q_dim;
  std::vector<uint16_t> ref_out(std::size_t(out_elems), 0xA5A5);
  {
    auto output = make_view(reinterpret_cast<bfloat16*>(ref_out.data()), c.m, c.q_dim);
    SectionScales sf = s.single_sf ? SectionScales{s.sf.q, s.sf.q, s.sf.q} : s.sf;
    reference::fused_qkv_reference(c.hidden_view(), c.offsets_view(), c.weight_view(),
                                   c.iscale_view(), c.wscale_view(), sf, c.cache.view(), s.layer,
                                   output, s.format);
  }
  const std::vector<uint8_t> ref_blocks = c.cache.raw_blocks();
  QkvCase& cc = c;
  if (s.single_sf) cc.shape.sf = SectionScales{s.sf.q, s.sf.q, s.sf.q};
  check_against_fp64(cc, ref_out, ref_blocks);
  check_canaries(cc, ref_blocks);
  cc.shape.sf = s.sf;

  quantkv::testing::for_each_isa([&](IsaLevel level) {
    for (int threads : {1, 3}) {
      for (bool prepared : {false, true}) {
        SCOPED_TRACE("threads = " + std::to_string(threads) +
                     (prepared ? ", prepared" : ", plain"));
        c.cache.raw_blocks() = c.canary_blocks;
        std::vector<uint16_t> out(std::size_t(out_elems), 0xA5A5);
        Context ctx;
        ctx.num_threads = threads;
        PreparedQkvWeights pw;
        if (prepared) {
          ASSERT_TRUE(
              prepare_qkv_weights(c.weight_view(), c.wscale_view(), s.format, &pw, ctx).ok());
          if (s.single_sf) c.shape.sf = SectionScales{s.sf.q, s.sf.q, s.sf.q};
        }
        const Status st = run_op(c, &out, ctx, prepared ? &pw : nullptr);
        c.shape.sf = s.sf;
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_TRUE(out == ref_out) << "output differs from the reference";
        EXPECT_TRUE(c.cache.raw_blocks() == ref_blocks) << "cache differs from the reference";
        if (level != IsaLevel::kAvx512 && threads == 1) break;  // keep slow paths short
      }
      if (level != IsaLevel::kAvx512) break;
    }
  });
}

}  // namespace quantkv::qkv_test
