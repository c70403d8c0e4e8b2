// The safetensors reader (bad files are named errors) and the four q/k/v loaders: checkpoints
// written by an independent writer (tests/safetensors_writer.hpp) from random codes, with
// q, k and v shards carrying different global scales, loaded and run through the fused QKV
// against the scalar reference (bit for bit) and fp64 (documented bound).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv_test_harness.hpp"
#include "quantkv/checkpoint.hpp"
#include "safetensors_writer.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::StEntry;
using testing::TempFile;
using testing::TestRng;
using testing::write_safetensors;

Status parse_bytes(const std::vector<uint8_t>& bytes, SafetensorsFile* f) {
  return SafetensorsFile::parse(bytes.data(), bytes.size(), "test.safetensors", f);
}

std::vector<uint8_t> with_header(const std::string& header, std::size_t data_bytes) {
  std::vector<uint8_t> file(8 + header.size() + data_bytes, 0x11);
  for (int i = 0; i < 8; ++i) file[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::memcpy(file.data() + 8, header.data(), header.size());
  return file;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  SafetensorsFile f;
  const Status s = parse_bytes(bytes, &f);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("test.safetensors"), std::string::npos) << s.message();
}

TEST(Safetensors, ReadsTensorsAndMetadataFromAMappedFile) {
  std::vector<StEntry> entries = {{"b", "BF16", {2, 3}, std::vector<uint8_t>(12, 7)},
                                  {"a", "U8", {5}, {1, 2, 3, 4, 5}},
                                  {"empty", "F32", {0, 4}, {}}};
  TempFile file(write_safetensors(entries));
  SafetensorsFile f;
  const Status s = SafetensorsFile::open(file.path(), &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(f.tensors().size(), 3u);
  const SafetensorsTensor* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "U8");
  EXPECT_EQ(a->shape, std::vector<int64_t>{5});
  ASSERT_EQ(a->bytes, 5u);
  EXPECT_EQ(a->data[4], 5);
  const SafetensorsTensor* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->data[11], 7);
  EXPECT_EQ(f.find("c"), nullptr);

  const auto meta = with_header(R"({"__metadata__":{"format":"pt"},"x":{"dtype":"I8","shape":[],"data_offsets":[0,1]}})", 1);
  ASSERT_TRUE(parse_bytes(meta, &f).ok());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.find("x")->shape.empty());
}

TEST(Safetensors, BadFilesAreNamedErrors) {
  expect_error({1, 2, 3}, "truncated file");
  expect_error({}, "truncated file: 0 bytes");
  std::vector<uint8_t> past = with_header("{}", 0);
  past[0] = 200;  // header length beyond the file
  expect_error(past, "runs past the end of the file");
  expect_error(with_header("{\"a\":", 0), "header is not valid JSON");
  expect_error(with_header("[1, 2]", 0), "header is not a JSON object");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 2),
               "outside the data");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 8),
               "overlaps tensor");
  expect_error(with_header(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1),
               "unknown dtype 'F7'");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "shape x dtype needs 8");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
               "non-negative integers");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[3,1]}})", 4),
               "begin <= end");
  expect_error(with_header(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1), "missing string \"dtype\"");
  expect_error(with_header(R"({"a":7})", 0), "expected an object");
  expect_error(with_header(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}})", 1),
               "overflowing");
}

TEST(Safetensors, OpenReportsMissingAndTruncatedFiles) {
  SafetensorsFile f;
  Status s = SafetensorsFile::open("/nonexistent/quantkv.safetensors", &f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open"), std::string::npos) << s.message();
  TempFile small(std::vector<uint8_t>{1, 0, 0});
  s = SafetensorsFile::open(small.path(), &f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated file: 3 bytes"), std::string::npos) << s.message();
  std::vector<uint8_t> full = write_safetensors({{"a", "U8", {4}, {1, 2, 3, 4}}});
  full.resize(full.size() - 2);  // cut into the data
  TempFile cut(full);
  s = SafetensorsFile::open(cut.path(), &f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the data"), std::string::npos) << s.message();
}

// ---------------------------------------------------------------- loaders
constexpr float kFp4Fp8Max = 448.0f * 6.0f;

// Per-shard calibration: the amax each global scale was derived from (q, k, v), different on
// purpose so that one shared factor would be wrong.
constexpr float kWeightAmax[3] = {2.5f, 0.3f, 7.0f};
constexpr float kInputAmax[3] = {3.0f, 5.0f, 4.0f};

// The case's rows [row0, row0 + rows) in the checkpoint's layout.
std::vector<StEntry> shard_entries(const QkvCase& c, CheckpointFormat fmt, const std::string& p,
                                   int64_t row0, int64_t rows, int shard) {
  const BlockFormat bf = c.shape.format;
  const int64_t rb = row_bytes(bf, c.shape.k), kb = c.kb_count;
  std::vector<uint8_t> data(c.weight.begin() + row0 * rb, c.weight.begin() + (row0 + rows) * rb);
  std::vector<uint8_t> scales(std::size_t(rows * kb));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kb; ++j) scales[r * kb + j] = c.wscale[swizzled_scale_offset(row0 + r, j, kb)];
  const float g_w = kFp4Fp8Max / kWeightAmax[shard], g_a = kFp4Fp8Max / kInputAmax[shard];
  switch (fmt) {
    case CheckpointFormat::kNVFP4CompressedTensors:
      return {{p + ".weight_packed", "U8", {rows, rb}, data},
              {p + ".weight_scale", "F8_E4M3", {rows, kb}, scales},
              testing::st_f32(p + ".weight_global_scale", g_w),
              testing::st_f32(p + ".input_global_scale", g_a)};
    case CheckpointFormat::kNVFP4ModelOpt:
      return {{p + ".weight", "U8", {rows, rb}, data},
              {p + ".weight_scale", "F8_E4M3", {rows, kb}, scales},
              testing::st_f32(p + ".weight_scale_2", kWeightAmax[shard] / kFp4Fp8Max),
              testing::st_f32(p + ".input_scale", kInputAmax[shard] / kFp4Fp8Max)};
    case CheckpointFormat::kMXFP4:
      return {{p + ".weight_blocks", "U8", {rows, kb, 16}, data},
              {p + ".weight_scales", "U8", {rows, kb}, scales}};
    case CheckpointFormat::kMXFP8:
      return {{p + ".weight", "F8_E4M3", {rows, c.shape.k}, data},
              {p + ".weight_scale", "F8_E8M0", {rows, kb}, scales}};
  }
  return {};
}

std::vector<uint8_t> write_checkpoint(const QkvCase& c, CheckpointFormat fmt, const std::string& prefix) {
  std::vector<StEntry> all;
  const int64_t rows[3] = {c.q_dim, c.kv_width, c.kv_width};
  const char* names[3] = {".q_proj", ".k_proj", ".v_proj"};
  int64_t row0 = 0;
  for (int i = 0; i < 3; ++i) {
    for (StEntry& e : shard_entries(c, fmt, prefix + names[i], row0, rows[i], i)) all.push_back(std::move(e));
    row0 += rows[i];
  }
  all.push_back({"model.norm.weight", "BF16", {4}, std::vector<uint8_t>(8, 0)});  // unrelated
  return write_safetensors(all);
}

class CheckpointLoader : public ::testing::TestWithParam<CheckpointFormat> {};

TEST_P(CheckpointLoader, LoadsRunsAndMatchesTheReference) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  QkvShape s;
  s.format = checkpoint_block_format(fmt);
  s.k = s.format == BlockFormat::kNVFP4 ? 80 : 96;  // NVFP4: 5 blocks (not a multiple of 32)
  s.q_heads = 3;
  s.kv_heads = 1;
  s.head = 16;
  s.page = 4;
  s.seq_lens = {3, 6};
  s.cache_lens = {0, 5};
  s.single_sf = false;
  QkvCase c = qkv_test::make_case(s, rng);
  const std::string prefix = "model.layers.0.self_attn";
  TempFile file(write_checkpoint(c, fmt, prefix));
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(file.path(), &f).ok());

  QkvCheckpointWeights w;
  const Status st = load_qkv_weights(f, prefix, &w, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(w.format, fmt);
  EXPECT_EQ(w.q_rows, c.q_dim);
  EXPECT_EQ(w.k_rows, c.kv_width);
  EXPECT_EQ(w.v_rows, c.kv_width);
  EXPECT_EQ(w.weights.n, c.n);
  EXPECT_EQ(w.weights.k, s.k);

  // The expected factors, from the calibration amaxes directly (fp64): NVFP4 dequantises by
  // amax_w / 2688 per shard and the GEMM divides by g_a of the largest input amax.
  const bool nvfp4 = s.format == BlockFormat::kNVFP4;
  double want[3];
  for (int i = 0; i < 3; ++i) {
    want[i] = nvfp4 ? double(kWeightAmax[i]) / kFp4Fp8Max * (5.0 / kFp4Fp8Max) : 1.0;
  }
  const SectionScales got = w.gemm_scales();
  EXPECT_NEAR(got.q, want[0], want[0] * 1e-6);
  EXPECT_NEAR(got.k, want[1], want[1] * 1e-6);
  EXPECT_NEAR(got.v, want[2], want[2] * 1e-6);
  EXPECT_NEAR(w.input_global, nvfp4 ? kFp4Fp8Max / 5.0 : 1.0, 1e-3);

  // The op on the loaded weight equals the reference on the original arrays, bit for bit.
  std::vector<uint16_t> ref_out(std::size_t(c.m * c.q_dim), 0xA5A5);
  reference::fused_qkv_reference(c.hidden_view(), c.offsets_view(), c.weight_view(),
                                 c.iscale_view(), c.wscale_view(), got, c.cache.view(), s.layer,
                                 make_view(reinterpret_cast<bfloat16*>(ref_out.data()), c.m, c.q_dim),
                                 s.format);
  const std::vector<uint8_t> ref_blocks = c.cache.raw_blocks();
  // And the reference is within the fp64 bound of the dequantised weights with the
  // independently derived factors.
  c.shape.sf = SectionScales{float(want[0]), float(want[1]), float(want[2])};
  qkv_test::check_against_fp64(c, ref_out, ref_blocks);
  testing::for_each_isa([&](IsaLevel) {
    c.cache.raw_blocks() = c.canary_blocks;
    std::vector<uint16_t> out(ref_out.size(), 0xA5A5);
    c.shape.sf = got;
    ASSERT_TRUE(qkv_test::run_op(c, &out, Context{}, &w.weights).ok());
    EXPECT_TRUE(out == ref_out);
    EXPECT_TRUE(c.cache.raw_blocks() == ref_blocks);
  });

  // The dequantised weight: value * |scale| * factor of its shard.
  std::vector<float> deq;
  int64_t n = 0, k = 0;
  ASSERT_TRUE(dequantize_qkv_weights(f, prefix, &deq, &n, &k).ok());
  ASSERT_EQ(n, c.n);
  ASSERT_EQ(k, s.k);
  const int64_t rb = row_bytes(s.format, s.k);
  for (int64_t r = 0; r < n; r += 7) {
    const int shard = r < c.q_dim ? 0 : r < c.q_dim + c.kv_width ? 1 : 2;
    const double factor = nvfp4 ? kWeightAmax[shard] / double(kFp4Fp8Max) : 1.0;
    for (int64_t j = 0; j < k; j += 5) {
      const uint8_t code = c.wscale[swizzled_scale_offset(r, j / sf_vector_size(s.format), c.kb_count)];
      const double scale = nvfp4 ? std::fabs(double(e4m3_to_float(code))) : std::ldexp(1.0, int(code) - 127);
      const double v = s.format == BlockFormat::kMXFP8 ? e4m3_to_float(c.weight[r * rb + j])
                                                       : e2m1_to_float(e2m1_get(&c.weight[r * rb], j));
      EXPECT_NEAR(deq[r * k + j], v * scale * factor, std::fabs(v * scale * factor) * 1e-6) << r << "," << j;
    }
  }

  const auto listed = list_quantized_projections(f);
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].name, prefix + ".k_proj");
  EXPECT_EQ(listed[0].format, fmt);
  EXPECT_EQ(listed[0].n, c.kv_width);
  EXPECT_EQ(listed[0].k, s.k);
}

INSTANTIATE_TEST_SUITE_P(Formats, CheckpointLoader,
                         ::testing::Values(CheckpointFormat::kNVFP4CompressedTensors,
                                           CheckpointFormat::kNVFP4ModelOpt,
                                           CheckpointFormat::kMXFP4, CheckpointFormat::kMXFP8));

// Loader errors name the tensor and what was expected.
void expect_load_error(const std::vector<StEntry>& entries, const std::string& fragment) {
  TempFile file(write_safetensors(entries));
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(file.path(), &f).ok());
  QkvCheckpointWeights w;
  const Status s = load_qkv_weights(f, "L", &w, Context{});
  ASSERT_FALSE(s.ok()) << "expected: " << fragment;
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

std::vector<StEntry> ct_shard(const std::string& p, int64_t n, int64_t k) {
  return {{p + ".weight_packed", "U8", {n, k / 2}, std::vector<uint8_t>(std::size_t(n * k / 2), 0x21)},
          {p + ".weight_scale", "F8_E4M3", {n, k / 16}, std::vector<uint8_t>(std::size_t(n * k / 16), 0x38)},
          testing::st_f32(p + ".weight_global_scale", 100.0f)};
}

std::vector<StEntry> ct_qkv(int64_t k) {
  std::vector<StEntry> all;
  for (const char* s : {"L.q_proj", "L.k_proj", "L.v_proj"})
    for (StEntry& e : ct_shard(s, 16, k)) all.push_back(std::move(e));
  return all;
}

TEST(CheckpointLoaderErrors, NamesTheTensorAndTheExpectation) {
  ASSERT_TRUE([] {
    TempFile file(write_safetensors(ct_qkv(32)));
    SafetensorsFile f;
    QkvCheckpointWeights w;
    return SafetensorsFile::open(file.path(), &f).ok() && load_qkv_weights(f, "L", &w, Context{}).ok();
  }());
  auto entries = ct_qkv(32);
  entries[1].dtype = "U8";  // q_proj.weight_scale
  expect_load_error(entries, "tensor 'L.q_proj.weight_scale': expected dtype F8_E4M3, got U8");
  entries = ct_qkv(32);
  entries.erase(entries.begin() + 4);  // k_proj.weight_scale
  expect_load_error(entries, "tensor 'L.k_proj.weight_scale': missing");
  entries = ct_qkv(32);
  entries[7].shape = {16, 3};  // v_proj.weight_scale
  entries[7].bytes.resize(48);
  expect_load_error(entries, "tensor 'L.v_proj.weight_scale': expected shape [N, K / block] = [16, 2]");
  entries = ct_qkv(32);
  entries[0].shape = {16, 4};  // K = 8
  entries[0].bytes.resize(64);
  expect_load_error(entries, "to be a multiple of the NVFP4 block of 16");
  entries = ct_qkv(32);
  entries.erase(entries.begin() + 6, entries.end());
  expect_load_error(entries, "projection 'L.v_proj': no quantised weight");
  entries = ct_qkv(32);
  entries[2] = testing::st_f32("L.q_proj.weight_global_scale", -1.0f);
  expect_load_error(entries, "expected a finite positive global scale");
  entries = ct_qkv(32);
  entries[6] = {"L.v_proj.weight_blocks", "U8", {16, 1, 16}, std::vector<uint8_t>(256, 0)};
  entries[7] = {"L.v_proj.weight_scales", "U8", {16, 1}, std::vector<uint8_t>(16, 127)};
  entries.pop_back();
  expect_load_error(entries, "expected the layout of q_proj (NVFP4 (compressed-tensors)), got MXFP4");
  auto k64 = ct_shard("L.v_proj", 16, 64);
  entries = ct_qkv(32);
  std::copy(k64.begin(), k64.end(), entries.begin() + 6);
  expect_load_error(entries, "expected K = 32 of q_proj, got 64");
}

}  // namespace
}  // namespace quantkv
