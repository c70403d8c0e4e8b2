// The CUDA fused QKV projection (contract §4) against the CPU reference, and the CUDA quantiser
// (contract §5) against the CPU quantiser. Needs a CUDA device; skips visibly without one.
//  - exact mode (tests/qkv_test_harness.hpp inputs, K <= 288): every fp32 partial sum is exact,
//    so the GPU's output and cache bytes must equal the CPU reference's bit for bit;
//  - random mode: against fp64 with a bound for tensor-core accumulation (one rounding per
//    16-k MMA plus slack for the MMA's internal alignment: (K/16 + 2) * 2^-22 * sum|terms|)
//    plus one rounding of the stored type;
//  - both the decode kernel (M <= 16) and the tiled kernel (M > 16) are exercised, with
//    sentinel pages, kv_dim 1 and 2, every cache dtype; elements outside the target slots keep
//    their canaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "qkv_test_harness.hpp"
#include "quantkv/cuda.hpp"
#include "quantkv/quantize.hpp"
#include "reference/qkv_fp4_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::DeviceArray;
using testing::DeviceCache;
using testing::TestRng;

struct Result {
  std::vector<uint16_t> out;
  std::vector<uint8_t> blocks;
};

// A host array on the device, optionally one byte past the allocation's (256-byte) alignment.
struct DeviceBytes {
  DeviceBytes(const std::vector<uint8_t>& host, bool misaligned)
      : shift(misaligned ? 1 : 0), array(padded(host, shift)) {}
  const uint8_t* get() const { return array.get() + shift; }
  static std::vector<uint8_t> padded(const std::vector<uint8_t>& host, int shift) {
    std::vector<uint8_t> v(host.size() + std::size_t(shift), 0xEE);
    if (!host.empty()) std::memcpy(v.data() + shift, host.data(), host.size());
    return v;
  }
  int shift;
  DeviceArray<uint8_t> array;
};

// One call on ctx.cuda_stream. `misaligned`: hidden state, weight and both scale tensors start
// one byte past 16-byte alignment, so the kernels take their byte-load variants.
Result run_gpu(QkvCase& c, Status* status, const Context& ctx = Context{},
               bool misaligned = false) {
  std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0xA5A5);
  c.cache.raw_blocks() = c.canary_blocks;
  DeviceArray<uint16_t> d_out(out);
  const DeviceBytes d_hidden(c.hidden, misaligned), d_weight(c.weight, misaligned),
      d_is(c.iscale, misaligned), d_ws(c.wscale, misaligned);
  DeviceArray<uint32_t> d_offs(c.offsets);
  DeviceCache d_cache(c.cache);
  const auto on = [](const uint8_t* d, const auto& like) { return testing::on_device(d, like); };
  const auto hidden = on(d_hidden.get(), c.hidden_view());
  const auto weight = on(d_weight.get(), c.weight_view());
  const auto is = on(d_is.get(), c.iscale_view());
  const auto ws = on(d_ws.get(), c.wscale_view());
  const auto offs = make_view<const uint32_t>(d_offs.get(), int64_t(c.offsets.size()));
  const auto output = make_view(reinterpret_cast<bfloat16*>(d_out.get()), c.m, c.q_dim);
  const cuda::HostRagged host = d_cache.host_ragged(c.offsets_view());
  const QkvShape& s = c.shape;
  *status = s.single_sf ? cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                              hidden, offs, weight, is, ws, s.sf.q, d_cache.view(), s.layer, output,
                              s.format, host, ctx)
                        : cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                              hidden, offs, weight, is, ws, s.sf, d_cache.view(), s.layer, output,
                              s.format, host, ctx);
  if (status->ok()) *status = cuda::synchronize(ctx);
  return {d_out.download(), d_cache.blocks()};
}

Result run_reference(QkvCase& c) {
  std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0xA5A5);
  c.cache.raw_blocks() = c.canary_blocks;
  const QkvShape& s = c.shape;
  const SectionScales sf = s.single_sf ? SectionScales{s.sf.q, s.sf.q, s.sf.q} : s.sf;
  reference::fused_qkv_reference(c.hidden_view(), c.offsets_view(), c.weight_view(),
                                 c.iscale_view(), c.wscale_view(), sf, c.cache.view(), s.layer,
                                 make_view(reinterpret_cast<bfloat16*>(out.data()), c.m, c.q_dim),
                                 s.format);
  Result r{out, c.cache.raw_blocks()};
  c.cache.raw_blocks() = c.canary_blocks;
  return r;
}

// Random mode: every written value within the tensor-core bound of the fp64 value.
void check_random(QkvCase& c, const Result& gpu) {
  const QkvShape& s = c.shape;
  const PagedKVCacheCollection kv = c.cache.view();
  const SectionScales sf = s.single_sf ? SectionScales{s.sf.q, s.sf.q, s.sf.q} : s.sf;
  int failures = 0;
  for (int64_t b = 0; b + 1 < int64_t(c.offsets.size()); ++b) {
    for (int64_t m = c.offsets[b]; m < int64_t(c.offsets[b + 1]); ++m) {
      const int64_t pos = s.cache_lens[b] + (m - c.offsets[b]);
      const uint32_t page = kv.page_of(b, pos);
      for (int64_t n = 0; n < c.n && failures < 10; ++n) {
        double v, abs_sum;
        qkv_test::exact_element(c, m, n, &v, &abs_sum);
        double got;
        float factor;
        DType dtype;
        if (n < c.q_dim) {
          got = bf16_to_float(gpu.out[m * c.q_dim + n]);
          factor = sf.q;
          dtype = DType::kBF16;
        } else {
          if (int64_t(page) >= kv.num_blocks) continue;
          const int64_t col = n - c.q_dim, kvi = col < c.kv_width ? 0 : 1,
                        w = col - kvi * c.kv_width;
          got = load_as_float(
              gpu.blocks.data(), s.dtype,
              kv.element_offset(page, kvi, s.layer, pos % s.page, w / s.head, w % s.head));
          factor = kvi == 0 ? sf.k : sf.v;
          dtype = s.dtype;
        }
        const double want = v * factor;
        const double acc = double(s.k / 16 + 2) * 0x1p-22 * abs_sum * std::fabs(factor);
        const double tol = acc + qkv_test::store_error_bound(std::fabs(want) + acc, dtype);
        const bool fp16_overflow =
            dtype == DType::kF16 && std::isinf(got) && std::fabs(want) + acc >= 65504.0;
        if (!(std::fabs(got - want) <= tol) && !fp16_overflow) {
          ++failures;
          ADD_FAILURE() << "m=" << m << " n=" << n << " got " << got << " fp64 " << want
                        << " tolerance " << tol;
        }
      }
    }
  }
}

void check_gpu_case(const QkvShape& s, TestRng& rng, const Context& ctx = Context{}) {
  SCOPED_TRACE(std::string(block_format_name(s.format)) + " K=" + std::to_string(s.k) +
               " M=" + std::to_string(qkv_test::total_rows(s)) + " " + dtype_name(s.dtype) +
               " kv_dim=" + std::to_string(s.kv_dim) + (s.exact ? " exact" : " random"));
  QkvCase c = qkv_test::make_case(s, rng);
  Status st;
  const Result gpu = run_gpu(c, &st, ctx);
  ASSERT_TRUE(st.ok()) << st.to_string();
  qkv_test::check_canaries(c, gpu.blocks);
  if (s.exact) {
    const Result ref = run_reference(c);
    EXPECT_TRUE(gpu.out == ref.out) << "output differs from the CPU reference";
    EXPECT_TRUE(gpu.blocks == ref.blocks) << "cache differs from the CPU reference";
  } else {
    check_random(c, gpu);
  }
}

QkvShape random_shape(BlockFormat f, int64_t m, bool exact, TestRng& rng) {
  QkvShape s;
  s.format = f;
  const int64_t sfv = sf_vector_size(f);
  const int64_t ks[] = {sfv, 3 * sfv, 256 + sfv};
  s.k = ks[rng.uniform_int(0, 2)];
  s.q_heads = rng.uniform_int(1, 3);
  s.kv_heads = rng.uniform_int(1, 2);
  s.head = 8 * rng.uniform_int(1, 3);
  s.kv_dim = rng.uniform_int(1, 2);
  s.page = rng.uniform_int(1, 2) == 1 ? 4 : 16;
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3};
  s.dtype = dtypes[rng.uniform_int(0, 3)];
  // Split m rows over up to 3 sequences (one possibly empty), the last one partly unbacked.
  const int64_t a = rng.uniform_int(0, m), b = rng.uniform_int(0, m - a);
  s.seq_lens = {a, b, m - a - b};
  s.cache_lens = {rng.uniform_int(0, 20), 0, rng.uniform_int(0, 9)};
  s.backed = {-1, -1, s.cache_lens[2] + (m - a - b) / 2};  // rows past this hit sentinel pages
  s.exact = exact;
  s.single_sf = rng.uniform_int(0, 1) == 0 || f == BlockFormat::kMXFP8;
  if (f != BlockFormat::kMXFP8) {
    s.sf = exact ? SectionScales{0.5f, 2.0f, 1.0f}
                 : SectionScales{rng.uniform_float(0.5f, 2.0f), 0.75f, 1.5f};
  }
  return s;
}

TEST(CudaQkv, ExactInputsMatchTheCpuReferenceBitForBit) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (int64_t m : {1, 5, 16, 17, 130, 300}) check_gpu_case(random_shape(f, m, true, rng), rng);
  }
}

TEST(CudaQkv, RandomInputsWithinTheTensorCoreBound) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (int64_t m : {1, 7, 16, 33, 129}) check_gpu_case(random_shape(f, m, false, rng), rng);
  }
}

TEST(CudaQkv, LargeHiddenSizeOnBothKernels) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP8}) {
    for (int64_t m : {4, 40}) {
      QkvShape s = random_shape(f, m, false, rng);
      s.k = 4096 + 3 * sf_vector_size(f);
      check_gpu_case(s, rng);
    }
  }
}

TEST(CudaQkv, NaNScaleGivesNaNInTheOutputsItTouches) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (int64_t m : {3, 40}) {
    QkvShape s = random_shape(BlockFormat::kNVFP4, m, true, rng);
    s.dtype = DType::kF32;
    QkvCase c = qkv_test::make_case(s, rng);
    c.wscale[swizzled_scale_offset(0, 0, c.kb_count)] = 0x7F;  // column 0: all rows NaN
    Status st;
    const Result gpu = run_gpu(c, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Result ref = run_reference(c);
    for (std::size_t i = 0; i < gpu.out.size(); ++i) {
      EXPECT_EQ(std::isnan(bf16_to_float(gpu.out[i])), std::isnan(bf16_to_float(ref.out[i]))) << i;
    }
    EXPECT_TRUE(std::isnan(bf16_to_float(gpu.out[0])));
  }
}

TEST(CudaQkv, BadInputIsRejectedBeforeAnythingIsWritten) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  QkvShape s = random_shape(BlockFormat::kNVFP4, 20, true, rng);
  s.single_sf = true;
  QkvCase c = qkv_test::make_case(s, rng);
  // Host offsets that do not match the rows: rejected, output and cache untouched.
  std::vector<uint32_t> bad = c.offsets;
  bad.back() += 1;
  std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0xA5A5);
  DeviceArray<uint16_t> d_out(out);
  DeviceArray<uint8_t> d_hidden(c.hidden), d_weight(c.weight), d_is(c.iscale), d_ws(c.wscale);
  DeviceArray<uint32_t> d_offs(c.offsets);
  DeviceCache d_cache(c.cache);
  const Status st = cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      testing::on_device<const uint8_t>(d_hidden.get(), c.hidden_view()),
      make_view<const uint32_t>(d_offs.get(), int64_t(c.offsets.size())),
      testing::on_device<const uint8_t>(d_weight.get(), c.weight_view()),
      testing::on_device<const uint8_t>(d_is.get(), c.iscale_view()),
      testing::on_device<const uint8_t>(d_ws.get(), c.wscale_view()), 1.0f, d_cache.view(), s.layer,
      make_view(reinterpret_cast<bfloat16*>(d_out.get()), c.m, c.q_dim), s.format,
      d_cache.host_ragged(make_view<const uint32_t>(bad.data(), int64_t(bad.size()))), Context{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  QUANTKV_ASSERT_OK(cuda::synchronize(Context{}));
  EXPECT_EQ(d_out.download(), out);
  EXPECT_EQ(d_cache.blocks(), c.canary_blocks);
}

TEST(CudaQkv, Nvfp4RowsOf16ByteMultiplesTakeTheVectorLoads) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // NVFP4 rows are K/2 bytes: the other tests' K give rows of 8, 24, 136 and 2072 bytes, never
  // a multiple of 16, so only these cases take the kernels' 16-byte loads (and the decode
  // kernel's 16-bit load of a scale pair). K = 8192 is the production shape (4096-byte rows).
  TestRng rng;
  for (int64_t k : {288, 8192}) {
    for (int64_t m : {1, 16, 17, 64}) {
      for (bool exact : {true, false}) {
        QkvShape s = random_shape(BlockFormat::kNVFP4, m, exact, rng);
        s.k = k;
        check_gpu_case(s, rng);
      }
    }
  }
}

TEST(CudaQkv, ByteLoadsGiveTheBitsOfVectorLoads) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // The same random case with every operand (and both scale tensors) one byte off 16-byte
  // alignment takes the byte-load kernels: the values, and so the bits, must be the same.
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (int64_t m : {7, 40}) {
      QkvShape s = random_shape(f, m, false, rng);
      s.k = 8192;
      SCOPED_TRACE(std::string(block_format_name(f)) + " M=" + std::to_string(m));
      QkvCase c = qkv_test::make_case(s, rng);
      Status st;
      const Result vec = run_gpu(c, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const Result bytes = run_gpu(c, &st, Context{}, /*misaligned=*/true);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(vec.out == bytes.out) << "Q differs between the vector and byte loads";
      EXPECT_TRUE(vec.blocks == bytes.blocks) << "K/V differ between the vector and byte loads";
    }
  }
}

TEST(CudaQkv, RunsOnANonDefaultStream) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  testing::TestStream stream;
  for (int64_t m : {5, 40})
    check_gpu_case(random_shape(BlockFormat::kNVFP4, m, true, rng), rng, stream.context());
  check_gpu_case(random_shape(BlockFormat::kMXFP8, 3, false, rng), rng, stream.context());
}

// Rows [r0, r0 + rows) of `big` (one sequence, cache length 0) as a case of their own: the
// same weight, the rows' bytes and scales (re-laid out for `rows` rows), positions 0.. .
QkvCase sub_case(const QkvCase& big, int64_t r0, int64_t rows) {
  QkvCase c = big;
  const int64_t rb = row_bytes(big.shape.format, big.shape.k);
  c.m = rows;
  c.shape.seq_lens = {rows};
  c.hidden.assign(big.hidden.begin() + r0 * rb, big.hidden.begin() + (r0 + rows) * rb);
  c.iscale.assign(std::size_t(swizzled_scale_elements(rows, c.kb_count)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < c.kb_count; ++kb) {
      c.iscale[swizzled_scale_offset(r, kb, c.kb_count)] =
          big.iscale[swizzled_scale_offset(r0 + r, kb, c.kb_count)];
    }
  }
  c.offsets = {0, uint32_t(rows)};
  return c;
}

// Every output of row m as bits: Q (bf16) and K/V from the fp32 cache at the row's position.
std::vector<uint32_t> row_bits(QkvCase& c, const Result& r, int64_t m) {
  const PagedKVCacheCollection kv = c.cache.view();
  const QkvShape& s = c.shape;
  std::vector<uint32_t> bits;
  for (int64_t n = 0; n < c.q_dim; ++n) bits.push_back(r.out[std::size_t(m * c.q_dim + n)]);
  const uint32_t page = kv.page_of(0, m);
  for (int64_t col = 0; col < s.kv_dim * c.kv_width; ++col) {
    const int64_t kvi = col / c.kv_width, w = col % c.kv_width;
    uint32_t v;
    std::memcpy(&v,
                r.blocks.data() +
                    4 * kv.element_offset(page, kvi, s.layer, m % s.page, w / s.head, w % s.head),
                4);
    bits.push_back(v);
  }
  return bits;
}

TEST(CudaQkv, OutputBitsDependOnTheBatchOnlyThroughTheKernel) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // contract §4 (CUDA): a row's outputs are a function of its own data, the weight and the
  // kernel the call's row count selects (M <= 16: the decode kernel, K split four ways; M > 16:
  // the tiled kernel, one pass over K), never of M itself, of the row's place in the batch or
  // of the other rows. Random inputs, K = 8192 and an fp32 cache, so that any change of the
  // accumulation order would show. Exact inputs give the same bits from both kernels.
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP8}) {
    for (bool exact : {false, true}) {
      SCOPED_TRACE(std::string(block_format_name(f)) + (exact ? " exact" : " random"));
      QkvShape s;
      s.format = f;
      s.k = 8192;
      s.q_heads = 4;
      s.kv_heads = 2;
      s.head = 24;  // N = 96 + 2 * 48 = 192 columns: two column tiles, six decode blocks
      s.dtype = DType::kF32;
      s.seq_lens = {300};
      s.cache_lens = {0};
      s.exact = exact;
      QkvCase big = qkv_test::make_case(s, rng);
      Status st;
      const Result tiled = run_gpu(big, &st);  // M = 300: the tiled kernel
      ASSERT_TRUE(st.ok()) << st.to_string();
      const auto run_rows = [&](int64_t r0, int64_t rows, std::vector<std::vector<uint32_t>>* out) {
        QkvCase c = sub_case(big, r0, rows);
        const Result r = run_gpu(c, &st);
        ASSERT_TRUE(st.ok()) << st.to_string();
        out->clear();
        for (int64_t i = 0; i < rows; ++i) out->push_back(row_bits(c, r, i));
      };
      std::vector<std::vector<uint32_t>> got;
      for (const auto& [r0, rows] :
           std::vector<std::pair<int64_t, int64_t>>{{0, 17}, {5, 40}, {128, 129}, {200, 100}}) {
        ASSERT_NO_FATAL_FAILURE(run_rows(r0, rows, &got));
        for (int64_t i = 0; i < rows; ++i) {
          ASSERT_EQ(got[i], row_bits(big, tiled, r0 + i))
              << "tiled kernel: row " << r0 + i << " in a call of M = " << rows;
        }
      }
      // The decode kernel: each row alone (M = 1) against the row inside calls of 2..16 rows.
      for (const auto& [r0, rows] :
           std::vector<std::pair<int64_t, int64_t>>{{0, 16}, {3, 2}, {128, 16}, {292, 8}}) {
        ASSERT_NO_FATAL_FAILURE(run_rows(r0, rows, &got));
        for (int64_t i = 0; i < rows; i += 3) {
          std::vector<std::vector<uint32_t>> alone;
          ASSERT_NO_FATAL_FAILURE(run_rows(r0 + i, 1, &alone));
          ASSERT_EQ(got[i], alone[0])
              << "decode kernel: row " << r0 + i << " in a call of M = " << rows;
          if (exact) {
            ASSERT_EQ(alone[0], row_bits(big, tiled, r0 + i))
                << "exact inputs: decode and tiled bits differ";
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------ quantiser

template <typename T>
void check_quantize(BlockFormat f, int64_t m, int64_t k, TestRng& rng,
                    const Context& ctx = Context{}) {
  SCOPED_TRACE(std::string(block_format_name(f)) + " M=" + std::to_string(m) +
               " K=" + std::to_string(k));
  std::vector<T> x(std::size_t(m * k));
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = rng.normal(0.0f, std::ldexp(1.0f, int(rng.uniform_int(-12, 12))));
    if (i % 97 == 5) v = 0.0f;
    if (i % 211 == 7) v = NAN;
    if (i % 307 == 9) v = -INFINITY;
    if constexpr (std::is_same_v<T, bfloat16>)
      x[i].bits = float_to_bf16(v);
    else
      x[i] = v;
  }
  const int64_t kb = k / sf_vector_size(f), rb = row_bytes(f, k);
  const float g = 448.0f * 6.0f / 3.5f;
  std::vector<uint8_t> data(std::size_t(m * rb), 0xA5),
      scales(std::size_t(swizzled_scale_elements(m, kb)), 0xA5);
  std::vector<uint8_t> gdata = data, gscales = scales;
  QUANTKV_ASSERT_OK(quantize_dynamic_block_scaled(
      make_view<const T>(x.data(), m, k), g, f, make_view(data.data(), m, rb),
      make_view<uint8_t, 5>(scales.data(), swizzled_scale_shape(m, kb)), Context{}));
  DeviceArray<T> d_x(x);
  DeviceArray<uint8_t> d_data(gdata), d_scales(gscales);
  QUANTKV_ASSERT_OK(cuda::quantize_dynamic_block_scaled(
      make_view<const T>(d_x.get(), m, k), g, f, make_view(d_data.get(), m, rb),
      make_view<uint8_t, 5>(d_scales.get(), swizzled_scale_shape(m, kb)), ctx));
  QUANTKV_ASSERT_OK(cuda::synchronize(ctx));
  EXPECT_EQ(d_data.download(), data) << "data bytes differ from the CPU quantiser";
  EXPECT_EQ(d_scales.download(), scales) << "scale bytes (padding included) differ";
}

TEST(CudaQuantize, MatchesTheCpuQuantiserBitForBit) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    const int64_t sfv = sf_vector_size(f);
    for (int64_t m : {1, 127, 130}) {
      for (int64_t k : {sfv, 3 * sfv, 8 * sfv + sfv}) {
        check_quantize<float>(f, m, k, rng);
        check_quantize<bfloat16>(f, m, k, rng);
      }
    }
  }
}

TEST(CudaQuantize, RunsOnANonDefaultStream) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  testing::TestStream stream;
  check_quantize<float>(BlockFormat::kNVFP4, 130, 48, rng, stream.context());
  check_quantize<bfloat16>(BlockFormat::kMXFP8, 3, 96, rng, stream.context());
}

// The sanitizer pass of scripts/gpu_check.sh (CudaSmoke.*): both QKV kernels in every format
// and the quantiser, once each on small shapes.
TEST(CudaSmoke, QkvAndQuantize) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (int64_t m : {5, 20}) check_gpu_case(random_shape(f, m, true, rng), rng);
    check_quantize<float>(f, 3, 2 * sf_vector_size(f), rng);
  }
}

}  // namespace
}  // namespace quantkv
