// The CUDA entry points validate on the host before touching the device (contract §6): these tests
// run on every machine. With the backend built, bad input returns the named error without any
// CUDA call (the "device" pointers below are host memory that is never dereferenced); without
// it, every entry point links and returns kUnimplemented.
#include <gtest/gtest.h>

#include <vector>

#include "quantkv/cuda.hpp"
#include "quantkv/info.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {
namespace {

bool backend_built() { return build_info().cuda_compiled; }

// Expects `code` and a message naming `what` with the backend, kUnimplemented without it.
void expect_rejected(const Status& st, StatusCode code, const std::string& what) {
  if (!backend_built()) {
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
    EXPECT_NE(st.message().find("CUDA backend not built"), std::string::npos) << st.to_string();
    return;
  }
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(what), std::string::npos)
      << "message should name " << what << ": " << st.to_string();
}

// An indexer K cache (e4m3 rows of D bytes, one float scale per row) over the given arrays.
PagedKVCacheCollection indexer_k_cache(uint8_t* blocks, float* scales, int64_t num_blocks,
                                       int64_t page_size, int64_t D,
                                       TensorView<const uint32_t, 1> lengths,
                                       TensorView<const uint32_t, 2> table) {
  PagedKVCacheCollection c;
  c.blocks = blocks;
  c.dtype = DType::kE4M3;
  c.num_blocks = num_blocks;
  c.kv_dim = 1;
  c.page_size = page_size;
  c.num_heads = 1;
  c.head_size = D;
  c.scales = scales;
  c.scale_granularity = D;
  c.cache_lengths = lengths;
  c.lookup_table = table;
  return c;
}

struct IndexerInputs {
  static constexpr int64_t T = 3, H = 2, D = 32, kTopK = 4, kPages = 4, kPageSize = 4;
  alignas(16) std::vector<int32_t> out = std::vector<int32_t>(T * kTopK, -7);
  std::vector<uint8_t> q = std::vector<uint8_t>(T * H * D + 64, 0x38);
  std::vector<float> q_s = std::vector<float>(T * H, 1.0f);
  std::vector<uint32_t> offs = {0, 2, 3};
  std::vector<uint8_t> blocks = std::vector<uint8_t>(kPages * kPageSize * D + 64, 0);
  std::vector<float> scales = std::vector<float>(kPages * kPageSize, 1.0f);
  std::vector<uint32_t> lengths = {1, 0};
  std::vector<uint32_t> table = {0, 1, 2, 3};

  PagedKVCacheCollection cache() {
    return indexer_k_cache(blocks.data(), scales.data(), kPages, kPageSize, D,
                           make_view<const uint32_t>(lengths.data(), int64_t(2)),
                           make_view<const uint32_t>(table.data(), int64_t(2), int64_t(2)));
  }
  cuda::HostRagged host() {
    return {make_view<const uint32_t>(offs.data(), int64_t(3)),
            make_view<const uint32_t>(lengths.data(), int64_t(2)),
            make_view<const uint32_t>(table.data(), int64_t(2), int64_t(2))};
  }
  Status run(int64_t top_k, uint32_t layer, const cuda::HostRagged& h) {
    return cuda::mla_indexer_ragged_float8_paged(
        make_view(out.data(), T, top_k),
        make_view<const float8_e4m3fn>(reinterpret_cast<const float8_e4m3fn*>(q.data()), T, H, D),
        make_view<const float>(q_s.data(), T, H),
        make_view<const uint32_t>(offs.data(), int64_t(3)), cache(), layer, MaskType::kCausal, h,
        Context{});
  }
};

TEST(CudaValidation, IndexerRejectsBadInputOnTheHost) {
  IndexerInputs in;
  expect_rejected(in.run(0, 0, in.host()), StatusCode::kInvalidArgument, "top_k");
  expect_rejected(in.run(4, 1, in.host()), StatusCode::kOutOfRange, "layer_idx");
  std::vector<uint32_t> bad = {0, 3, 2};  // not monotone
  cuda::HostRagged h = in.host();
  h.input_row_offsets = make_view<const uint32_t>(bad.data(), int64_t(3));
  expect_rejected(in.run(4, 0, h), StatusCode::kInvalidArgument, "host.input_row_offsets");
  std::vector<uint32_t> table = in.table;
  table[0] = 4;  // sentinel under a visible position
  h = in.host();
  h.lookup_table = make_view<const uint32_t>(table.data(), int64_t(2), int64_t(2));
  expect_rejected(in.run(4, 0, h), StatusCode::kOutOfRange, "lookup_table");
  std::vector<uint32_t> short_lengths = {1};
  h = in.host();
  h.cache_lengths = make_view<const uint32_t>(short_lengths.data(), int64_t(1));
  expect_rejected(in.run(4, 0, h), StatusCode::kInvalidArgument, "host.cache_lengths");
  for (int32_t v : in.out) EXPECT_EQ(v, -7) << "nothing written";
}

TEST(CudaValidation, IndexerNear2Pow31KeysIsRejectedWithoutWrapping) {
  // One token at position 2^31 - 2: with the causal mask it sees 2^31 - 1 keys, the most the
  // CUDA backend accepts (positions are int32 in the kernels). Its score row is that count
  // rounded up to a multiple of 4 floats, which passes int32: the planner computes it in 64
  // bits. With the default budget the row cannot fit; with a budget that holds it, the call
  // needs more than 65535 key tiles of 128 in the scores grid. Both are named errors raised
  // before any CUDA call, so host memory stands in for the device arrays (one page of 2^16
  // slots, reused by all 2^15 table entries).
  constexpr int64_t kPageSize = int64_t(1) << 16, kEntries = int64_t(1) << 15, D = 16, H = 1,
                    kTopK = 8;
  std::vector<uint8_t> blocks(std::size_t(kPageSize * D));
  std::vector<float> scales(std::size_t(kPageSize), 1.0f);
  std::vector<uint32_t> offs = {0, 1}, lengths = {uint32_t((int64_t(1) << 31) - 2)};
  std::vector<uint32_t> table(std::size_t(kEntries), 0);
  std::vector<uint8_t> q(std::size_t(H * D), 0x38);
  std::vector<float> q_s(std::size_t(H), 1.0f);
  std::vector<int32_t> out(std::size_t(kTopK), -7);
  const PagedKVCacheCollection c =
      indexer_k_cache(blocks.data(), scales.data(), 1, kPageSize, D,
                      make_view<const uint32_t>(lengths.data(), int64_t(1)),
                      make_view<const uint32_t>(table.data(), int64_t(1), kEntries));
  const cuda::HostRagged host{make_view<const uint32_t>(offs.data(), int64_t(2)), c.cache_lengths,
                              c.lookup_table};
  const auto run = [&](std::size_t budget) {
    Context ctx;
    ctx.scores_budget_bytes = budget;
    return cuda::mla_indexer_ragged_float8_paged(
        make_view(out.data(), int64_t(1), kTopK),
        make_view<const float8_e4m3fn>(reinterpret_cast<const float8_e4m3fn*>(q.data()), int64_t(1),
                                       H, D),
        make_view<const float>(q_s.data(), int64_t(1), H),
        make_view<const uint32_t>(offs.data(), int64_t(2)), c, 0, MaskType::kCausal, host, ctx);
  };
  expect_rejected(run(Context{}.scores_budget_bytes), StatusCode::kResourceExhausted,
                  "bytes cannot hold one row of 2147483647 scores");
  expect_rejected(run(std::size_t(16) << 30), StatusCode::kUnimplemented,
                  "more than 65535 * 128 keys");
  for (int32_t v : out) EXPECT_EQ(v, -7) << "nothing written";
}

TEST(CudaValidation, QkvRejectsMismatchedColumnsAndScales) {
  const int64_t M = 2, K = 32, N = 10;  // q_dim 4 + 2 * (1 head x 3)
  std::vector<uint8_t> hidden(M * K / 2), weight(N * K / 2);
  std::vector<uint8_t> is(std::size_t(swizzled_scale_elements(M, K / 16))),
      ws(std::size_t(swizzled_scale_elements(N, K / 16)));
  std::vector<uint16_t> out(M * 4);
  std::vector<uint8_t> blocks(4 * 2 * 4 * 3 * 2);
  std::vector<uint32_t> offs = {0, 2}, lengths = {0}, table = {0};
  PagedKVCacheCollection kv;
  kv.blocks = blocks.data();
  kv.num_blocks = 4;
  kv.page_size = 4;
  kv.num_heads = 1;
  kv.head_size = 3;
  kv.cache_lengths = make_view<const uint32_t>(lengths.data(), int64_t(1));
  kv.lookup_table = make_view<const uint32_t>(table.data(), int64_t(1), int64_t(1));
  const cuda::HostRagged host{make_view<const uint32_t>(offs.data(), int64_t(2)), kv.cache_lengths,
                              kv.lookup_table};
  const auto run = [&](int64_t n, int64_t ws_rows, float sf, BlockFormat f) {
    return cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        make_view<const uint8_t>(hidden.data(), M, K / 2),
        make_view<const uint32_t>(offs.data(), int64_t(2)),
        make_view<const uint8_t>(weight.data(), n, K / 2),
        make_view<const uint8_t, 5>(is.data(), swizzled_scale_shape(M, K / 16)),
        make_view<const uint8_t, 5>(ws.data(), swizzled_scale_shape(ws_rows, K / 16)), sf, kv, 0,
        make_view(reinterpret_cast<bfloat16*>(out.data()), M, int64_t(4)), f, host, Context{});
  };
  expect_rejected(run(9, 9, 1.0f, BlockFormat::kNVFP4), StatusCode::kInvalidArgument,
                  "weight: expected N");
  expect_rejected(run(N, 200, 1.0f, BlockFormat::kNVFP4), StatusCode::kInvalidArgument,
                  "weight_scale");
  expect_rejected(run(N, N, NAN, BlockFormat::kNVFP4), StatusCode::kInvalidArgument, "tensor_sf");
  expect_rejected(run(N, N, 1.0f, BlockFormat(7)), StatusCode::kInvalidArgument, "format");
}

TEST(CudaValidation, QuantizeAndKStoreRejectBadShapes) {
  std::vector<float> x(2 * 24);
  std::vector<uint8_t> data(2 * 12), scales(std::size_t(swizzled_scale_elements(2, 1)));
  expect_rejected(cuda::quantize_dynamic_block_scaled(
                      make_view<const float>(x.data(), 2, 24), 1.0f, BlockFormat::kNVFP4,
                      make_view(data.data(), 2, 12),
                      make_view<uint8_t, 5>(scales.data(), swizzled_scale_shape(2, 1)), Context{}),
                  StatusCode::kInvalidArgument,
                  "x: expected K to be a multiple of SF_VECTOR_SIZE = 16");
  IndexerInputs in;
  std::vector<float> k(3 * 32);
  expect_rejected(
      cuda::indexer_k_store(make_view<const float>(k.data(), 3, 32),
                            make_view<const uint32_t>(in.offs.data(), int64_t(3)), in.cache(), 5,
                            ScaleMode::kPowerOfTwo, in.host(), Context{}),
      StatusCode::kOutOfRange, "layer_idx");
  expect_rejected(
      cuda::indexer_k_store(make_view<const float>(k.data(), 3, 16),
                            make_view<const uint32_t>(in.offs.data(), int64_t(3)), in.cache(), 0,
                            ScaleMode::kPowerOfTwo, in.host(), Context{}),
      StatusCode::kInvalidArgument, "head_size");
}

TEST(CudaValidation, DeviceHelpersReportWhenTheBackendIsMissing) {
  if (backend_built()) GTEST_SKIP() << "the CUDA backend is built: the stubs are not linked";
  cuda::DeviceBuffer buf(64);
  EXPECT_FALSE(buf.ok());
  EXPECT_EQ(buf.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cuda::synchronize(Context{}).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace quantkv
