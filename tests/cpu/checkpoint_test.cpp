// The safetensors reader (bad files are named errors) and the four q/k/v loaders: checkpoints
// written by an independent writer (tests/safetensors_writer.hpp) from random codes, with
// q, k and v shards carrying different global scales, loaded and run through the fused QKV
// against the scalar reference (bit for bit) and fp64 (documented bound).
#include "quantkv/checkpoint.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "qkv_test_harness.hpp"
#include "safetensors_writer.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::ct_qkv;
using testing::ct_shard;
using testing::StEntry;
using testing::TempDir;
using testing::TempFile;
using testing::TestRng;
using testing::with_header;
using testing::write_safetensors;

Status parse_bytes(const std::vector<uint8_t>& bytes, SafetensorsFile* f) {
  return SafetensorsFile::parse(bytes.data(), bytes.size(), "test.safetensors", f);
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

  const auto meta = with_header(
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"I8","shape":[],"data_offsets":[0,1]}})", 1);
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
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                           8),
               "overlaps tensor");
  expect_error(with_header(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1),
               "unknown dtype 'F7'");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "shape x dtype needs 8");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
               "non-negative integers");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[3,1]}})", 4),
               "begin <= end");
  expect_error(with_header(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1),
               "missing string \"dtype\"");
  expect_error(with_header(R"({"a":7})", 0), "expected an object");
  expect_error(with_header(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_error(
      with_header(
          R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}})",
          1),
      "overflowing");
}

// safetensors 0.8's 22 dtypes, the sub-byte ones sized by their element count x bits.
TEST(Safetensors, ReadsEveryDtypeOfTheFormatIncludingSubByteOnes) {
  EXPECT_EQ(safetensors_dtype_bits("F4"), 4);
  EXPECT_EQ(safetensors_dtype_bits("F6_E2M3"), 6);
  EXPECT_EQ(safetensors_dtype_bits("F6_E3M2"), 6);
  EXPECT_EQ(safetensors_dtype_bits("F8_E4M3FNUZ"), 8);
  EXPECT_EQ(safetensors_dtype_bits("F8_E5M2FNUZ"), 8);
  EXPECT_EQ(safetensors_dtype_bits("C64"), 64);
  EXPECT_EQ(safetensors_dtype_bits("F7"), 0);
  EXPECT_EQ(safetensors_dtype_size("F4"), 0u);  // no byte size of its own
  EXPECT_EQ(safetensors_dtype_size("C64"), 8u);
  EXPECT_EQ(safetensors_dtype_size("F8_E8M0"), 1u);
  const std::vector<StEntry> entries = {{"fp4", "F4", {2, 3}, {1, 2, 3}},
                                        {"fp6", "F6_E2M3", {4}, {4, 5, 6}},
                                        {"fp6b", "F6_E3M2", {2, 4}, std::vector<uint8_t>(6, 7)},
                                        {"c64", "C64", {2}, std::vector<uint8_t>(16, 8)},
                                        {"fnuz", "F8_E4M3FNUZ", {3}, {9, 9, 9}},
                                        {"fnuz2", "F8_E5M2FNUZ", {1}, {9}}};
  const std::vector<uint8_t> bytes = write_safetensors(entries);
  SafetensorsFile f;
  const Status s = parse_bytes(bytes, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (const StEntry& e : entries) {
    const SafetensorsTensor* t = f.find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dtype, e.dtype);
    EXPECT_EQ(t->shape, e.shape);
    EXPECT_EQ(t->bytes, e.bytes.size()) << e.name;
    EXPECT_TRUE(std::equal(e.bytes.begin(), e.bytes.end(), t->data)) << e.name;
  }
  // 3 F4 codes (12 bits) or 3 F6 values (18 bits) are not whole bytes.
  expect_error(with_header(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2),
               "x 4 bits (F4) is not a whole number of bytes");
  expect_error(with_header(R"({"a":{"dtype":"F6_E3M2","shape":[3],"data_offsets":[0,3]}})", 3),
               "is not a whole number of bytes");
  expect_error(with_header(R"({"a":{"dtype":"F4","shape":[4],"data_offsets":[0,4]}})", 4),
               "shape x dtype needs 2");
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
    for (int64_t j = 0; j < kb; ++j)
      scales[r * kb + j] = c.wscale[swizzled_scale_offset(row0 + r, j, kb)];
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
    case CheckpointFormat::kMXFP4CompressedTensors:
      return {{p + ".weight_packed", "U8", {rows, rb}, data},
              {p + ".weight_scale", "U8", {rows, kb}, scales}};
  }
  return {};
}

// The q, k, v projections of `c` under `prefix` (plus an unrelated tensor); with
// `shared_scale` all three carry the q shard's global scales.
std::vector<StEntry> checkpoint_entries(const QkvCase& c, CheckpointFormat fmt,
                                        const std::string& prefix, bool shared_scale = false) {
  std::vector<StEntry> all;
  const int64_t rows[3] = {c.q_dim, c.kv_width, c.kv_width};
  const char* names[3] = {".q_proj", ".k_proj", ".v_proj"};
  int64_t row0 = 0;
  for (int i = 0; i < 3; ++i) {
    for (StEntry& e :
         shard_entries(c, fmt, prefix + names[i], row0, rows[i], shared_scale ? 0 : i)) {
      all.push_back(std::move(e));
    }
    row0 += rows[i];
  }
  all.push_back({"model.norm.weight", "BF16", {4}, std::vector<uint8_t>(8, 0)});  // unrelated
  return all;
}

std::vector<uint8_t> write_checkpoint(const QkvCase& c, CheckpointFormat fmt,
                                      const std::string& prefix) {
  return write_safetensors(checkpoint_entries(c, fmt, prefix));
}

// One fused projection `p` holding all of `c`'s rows; its global scales are the q shard's
// (shape [1]) or, with `per_section`, the three shards' (shape [3]).
std::vector<StEntry> fused_entries(const QkvCase& c, CheckpointFormat fmt, const std::string& p,
                                   bool per_section) {
  std::vector<StEntry> out = shard_entries(c, fmt, p, 0, c.n, 0);
  if (!per_section) return out;
  for (int shard = 1; shard < 3; ++shard) {
    const std::vector<StEntry> other = shard_entries(c, fmt, p, 0, 1, shard);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i].dtype != "F32") continue;
      out[i].shape = {shard + 1};
      out[i].bytes.insert(out[i].bytes.end(), other[i].bytes.begin(), other[i].bytes.end());
    }
  }
  return out;
}

// A small case of `fmt` with q, k, v sections of 48, 16, 16 rows.
QkvCase small_case(CheckpointFormat fmt, TestRng& rng) {
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
  return qkv_test::make_case(s, rng);
}

// Two prepared weights that must be the same bits.
void expect_same_prepared(const PreparedQkvWeights& a, const PreparedQkvWeights& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.k, b.k);
  ASSERT_EQ(a.data_bytes(), b.data_bytes());
  ASSERT_EQ(a.scale_count(), b.scale_count());
  // The prepared buffers' contents (read-only accessors).
  EXPECT_TRUE(std::equal(a.data(), a.data() + a.data_bytes(), b.data())) << "prepared data differs";
  EXPECT_TRUE(std::equal(a.scales(), a.scales() + a.scale_count(), b.scales()))
      << "prepared scales differ";
}

// Two loads that must be the same bits: prepared data and scales, rows and factors.
void expect_same_weights(const QkvCheckpointWeights& a, const QkvCheckpointWeights& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.q_rows, b.q_rows);
  EXPECT_EQ(a.k_rows, b.k_rows);
  EXPECT_EQ(a.v_rows, b.v_rows);
  EXPECT_EQ(a.weight_factor.q, b.weight_factor.q);
  EXPECT_EQ(a.weight_factor.k, b.weight_factor.k);
  EXPECT_EQ(a.weight_factor.v, b.weight_factor.v);
  EXPECT_EQ(a.input_global, b.input_global);
  expect_same_prepared(a.weights, b.weights);
}

class CheckpointLoader : public ::testing::TestWithParam<CheckpointFormat> {};

TEST_P(CheckpointLoader, LoadsRunsAndMatchesTheReference) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  QkvCase c = small_case(fmt, rng);
  const QkvShape& s = c.shape;
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
  reference::fused_qkv_reference(
      c.hidden_view(), c.offsets_view(), c.weight_view(), c.iscale_view(), c.wscale_view(), got,
      c.cache.view(), s.layer, make_view(reinterpret_cast<bfloat16*>(ref_out.data()), c.m, c.q_dim),
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
      const uint8_t code =
          c.wscale[swizzled_scale_offset(r, j / sf_vector_size(s.format), c.kb_count)];
      const double scale =
          nvfp4 ? std::fabs(double(e4m3_to_float(code))) : std::ldexp(1.0, int(code) - 127);
      const double v = s.format == BlockFormat::kMXFP8
                           ? e4m3_to_float(c.weight[r * rb + j])
                           : e2m1_to_float(e2m1_get(&c.weight[r * rb], j));
      EXPECT_NEAR(deq[r * k + j], v * scale * factor, std::fabs(v * scale * factor) * 1e-6)
          << r << "," << j;
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

// The packed e2m1 data as safetensors' F4 (what torch's float4_e2m1fn_x2 saves: the same
// bytes, the last extent counting codes) loads to the same bits as the U8 form.
class Fp4DtypeCheckpoint : public ::testing::TestWithParam<CheckpointFormat> {};

TEST_P(Fp4DtypeCheckpoint, F4DataLoadsLikeU8) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  const QkvCase c = small_case(fmt, rng);
  const std::string prefix = "model.layers.3.self_attn";
  std::vector<StEntry> entries = checkpoint_entries(c, fmt, prefix);
  int converted = 0;
  for (StEntry& e : entries) {
    const bool data = e.name.ends_with(".weight_packed") || e.name.ends_with(".weight_blocks") ||
                      (e.name.ends_with(".weight") && e.dtype == "U8");
    if (!data) continue;
    e.dtype = "F4";
    e.shape.back() *= 2;
    ++converted;
  }
  ASSERT_EQ(converted, 3);
  TempFile u8_file(write_checkpoint(c, fmt, prefix)), f4_file(write_safetensors(entries));
  SafetensorsFile u8, f4;
  ASSERT_TRUE(SafetensorsFile::open(u8_file.path(), &u8).ok());
  ASSERT_TRUE(SafetensorsFile::open(f4_file.path(), &f4).ok());
  QkvCheckpointWeights a, b;
  ASSERT_TRUE(load_qkv_weights(u8, prefix, &a, Context{}).ok());
  const Status st = load_qkv_weights(f4, prefix, &b, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_same_weights(a, b);
  std::vector<float> deq_a, deq_b;
  int64_t n = 0, k = 0;
  ASSERT_TRUE(dequantize_qkv_weights(u8, prefix, &deq_a, &n, &k).ok());
  ASSERT_TRUE(dequantize_qkv_weights(f4, prefix, &deq_b, &n, &k).ok());
  EXPECT_TRUE(deq_a == deq_b);
  // An F4 weight whose last extent counts bytes (K/2) is a K/2-column weight: its scales no
  // longer fit, and the error names the scale tensor and the expected shape.
  for (StEntry& e : entries) {
    if (e.dtype == "F4" && e.name.find(".q_proj.") != std::string::npos) {
      e.shape.back() /= 2;
      e.shape.front() *= 2;  // the same bytes
    }
  }
  TempFile bad_file(write_safetensors(entries));
  SafetensorsFile bad;
  ASSERT_TRUE(SafetensorsFile::open(bad_file.path(), &bad).ok());
  QkvCheckpointWeights w;
  const Status e = load_qkv_weights(bad, prefix, &w, Context{});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find(".q_proj."), std::string::npos) << e.message();
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp4DtypeCheckpoint,
                         ::testing::Values(CheckpointFormat::kNVFP4CompressedTensors,
                                           CheckpointFormat::kNVFP4ModelOpt,
                                           CheckpointFormat::kMXFP4));

// ---------------------------------------------------------------- sharded checkpoints
// Loads `prefix` from `ckpt` (asserting success) into `w`.
void load_ok(const SafetensorsCheckpoint& ckpt, const std::string& prefix,
             QkvCheckpointWeights* w) {
  const Status st = load_qkv_weights(ckpt, prefix, w, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
}

class ShardedCheckpoint : public ::testing::TestWithParam<CheckpointFormat> {};

// The same tensors in one file and round robin over three shards with an index (each
// projection's tensors in different files): the same prepared bits, factors, dequantised
// weights and listing, opened as the directory or as the index.
TEST_P(ShardedCheckpoint, LoadsLikeOneFile) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  const QkvCase c = small_case(fmt, rng);
  const std::string prefix = "model.layers.0.self_attn";
  const std::vector<StEntry> entries = checkpoint_entries(c, fmt, prefix);
  TempFile single(write_safetensors(entries));
  TempDir dir;
  dir.write_sharded(entries, 3);

  SafetensorsCheckpoint one;
  ASSERT_TRUE(SafetensorsCheckpoint::open(single.path(), &one).ok());
  EXPECT_FALSE(one.sharded());
  QkvCheckpointWeights want;
  load_ok(one, prefix, &want);
  std::vector<float> want_deq;
  int64_t n = 0, k = 0;
  ASSERT_TRUE(dequantize_qkv_weights(one, prefix, &want_deq, &n, &k).ok());
  const auto want_list = list_quantized_projections(one);
  ASSERT_EQ(want_list.size(), 3u);

  for (const std::string& path : {dir.path(), dir.path() + "/model.safetensors.index.json"}) {
    SCOPED_TRACE(path);
    SafetensorsCheckpoint sharded;
    const Status st = SafetensorsCheckpoint::open(path, &sharded);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(sharded.sharded());
    EXPECT_EQ(sharded.label(), dir.path() + "/model.safetensors.index.json");
    EXPECT_EQ(sharded.tensor_names(), one.tensor_names());
    QkvCheckpointWeights got;
    load_ok(sharded, prefix, &got);
    expect_same_weights(want, got);
    std::vector<float> deq;
    ASSERT_TRUE(dequantize_qkv_weights(sharded, prefix, &deq, &n, &k).ok());
    EXPECT_TRUE(deq == want_deq);
    const auto list = list_quantized_projections(sharded);
    ASSERT_EQ(list.size(), want_list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(list[i].name, want_list[i].name);
      EXPECT_EQ(list[i].n, want_list[i].n);
      EXPECT_EQ(list[i].weight_factor, want_list[i].weight_factor);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ShardedCheckpoint,
                         ::testing::Values(CheckpointFormat::kNVFP4CompressedTensors,
                                           CheckpointFormat::kNVFP4ModelOpt,
                                           CheckpointFormat::kMXFP4, CheckpointFormat::kMXFP8));

// Shards are opened when first read: a layer loads while the map names a missing file for
// other tensors, which fail by name when read. A directory with one .safetensors file of any
// name is that file.
TEST(ShardedCheckpointOpening, OpensOnlyTheShardsItReads) {
  TempDir dir;
  auto map = dir.write_sharded(ct_qkv(32), 2);
  map.emplace_back("M.q_proj.weight_packed", "model-00003-of-00003.safetensors");
  dir.write("model.safetensors.index.json", testing::index_json(map));
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(dir.path(), &ckpt).ok());
  EXPECT_TRUE(ckpt.contains("M.q_proj.weight_packed"));
  QkvCheckpointWeights w;
  load_ok(ckpt, "L", &w);
  EXPECT_EQ(w.weights.n, 48);
  const SafetensorsTensor* t = nullptr;
  const Status s = ckpt.tensor("M.q_proj.weight_packed", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(
                "tensor 'M.q_proj.weight_packed': weight_map of " + dir.path() +
                "/model.safetensors.index.json names shard 'model-00003-of-00003.safetensors': "
                "safetensors " +
                dir.path() + "/model-00003-of-00003.safetensors: cannot open"),
            std::string::npos)
      << s.message();
  // The listing skips what it cannot read.
  EXPECT_EQ(list_quantized_projections(ckpt).size(), 3u);

  TempDir single;
  single.write("consolidated.safetensors", write_safetensors(ct_qkv(32)));
  ASSERT_TRUE(SafetensorsCheckpoint::open(single.path(), &ckpt).ok());
  EXPECT_FALSE(ckpt.sharded());
  EXPECT_EQ(ckpt.label(), single.path() + "/consolidated.safetensors");
  load_ok(ckpt, "L", &w);
  // of_file wraps a file already open.
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::open(single.path() + "/consolidated.safetensors", &f).ok());
  load_ok(SafetensorsCheckpoint::of_file(std::move(f)), "L", &w);
}

// ---------------------------------------------------------------- fused qkv_proj
class FusedQkv : public ::testing::TestWithParam<CheckpointFormat> {};

// One fused projection against the same rows as three shards: the same prepared bits, factors,
// dequantised weights, and outputs and cache bit for bit; with one global scale for the tensor
// (the three shards then share it) and with one per section (shape [3]).
TEST_P(FusedQkv, EqualsTheThreeShards) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  QkvCase c = small_case(fmt, rng);
  const QkvSections sections{c.q_dim, c.kv_width, c.kv_width};
  for (const bool per_section : {false, true}) {
    SCOPED_TRACE(per_section ? "global scales per section" : "one global scale");
    std::vector<StEntry> entries = checkpoint_entries(c, fmt, "L", /*shared_scale=*/!per_section);
    for (StEntry& e : fused_entries(c, fmt, "F.qkv_proj", per_section))
      entries.push_back(std::move(e));
    TempFile file(write_safetensors(entries));
    SafetensorsCheckpoint ckpt;
    ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
    QkvCheckpointWeights shards, fused;
    load_ok(ckpt, "L", &shards);
    const Status st = load_fused_qkv_weights(ckpt, "F.qkv_proj", sections, &fused, Context{});
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_same_weights(shards, fused);
    if (per_section && fmt != CheckpointFormat::kMXFP4 && fmt != CheckpointFormat::kMXFP8) {
      EXPECT_NE(fused.weight_factor.q, fused.weight_factor.k);  // the test can tell them apart
    }
    std::vector<float> a, b;
    int64_t n = 0, k = 0;
    ASSERT_TRUE(dequantize_qkv_weights(ckpt, "L", &a, &n, &k).ok());
    ASSERT_TRUE(dequantize_fused_qkv_weights(ckpt, "F.qkv_proj", sections, &b, &n, &k).ok());
    EXPECT_TRUE(a == b);

    c.shape.sf = shards.gemm_scales();
    std::vector<uint16_t> out_shards(std::size_t(c.m * c.q_dim), 0xA5A5), out_fused = out_shards;
    c.cache.raw_blocks() = c.canary_blocks;
    ASSERT_TRUE(qkv_test::run_op(c, &out_shards, Context{}, &shards.weights).ok());
    const std::vector<uint8_t> blocks = c.cache.raw_blocks();
    c.cache.raw_blocks() = c.canary_blocks;
    c.shape.sf = fused.gemm_scales();
    ASSERT_TRUE(qkv_test::run_op(c, &out_fused, Context{}, &fused.weights).ok());
    EXPECT_TRUE(out_shards == out_fused);
    EXPECT_TRUE(c.cache.raw_blocks() == blocks);

    const auto listed = list_quantized_projections(ckpt);
    ASSERT_EQ(listed.size(), 4u);
    EXPECT_EQ(listed[0].name, "F.qkv_proj");
    EXPECT_EQ(listed[0].n, c.n);
    const bool nvfp4 =
        fmt == CheckpointFormat::kNVFP4CompressedTensors || fmt == CheckpointFormat::kNVFP4ModelOpt;
    EXPECT_EQ(listed[0].scale_sections, per_section && nvfp4 ? 3 : 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FusedQkv,
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

TEST(CheckpointLoaderErrors, NamesTheTensorAndTheExpectation) {
  ASSERT_TRUE([] {
    TempFile file(write_safetensors(ct_qkv(32)));
    SafetensorsFile f;
    QkvCheckpointWeights w;
    return SafetensorsFile::open(file.path(), &f).ok() &&
           load_qkv_weights(f, "L", &w, Context{}).ok();
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
  expect_load_error(entries,
                    "tensor 'L.v_proj.weight_scale': expected shape [N, K / block] = [16, 2]");
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
  expect_load_error(entries,
                    "expected the layout of q_proj (NVFP4 (compressed-tensors)), got MXFP4");
  auto k64 = ct_shard("L.v_proj", 16, 64);
  entries = ct_qkv(32);
  std::copy(k64.begin(), k64.end(), entries.begin() + 6);
  expect_load_error(entries, "expected K = 32 of q_proj, got 64");
}

// ---------------------------------------------------------------- any linear layer
constexpr CheckpointFormat kAllFormats[] = {
    CheckpointFormat::kNVFP4CompressedTensors, CheckpointFormat::kNVFP4ModelOpt,
    CheckpointFormat::kMXFP4, CheckpointFormat::kMXFP8, CheckpointFormat::kMXFP4CompressedTensors};

bool is_nvfp4(CheckpointFormat fmt) { return checkpoint_block_format(fmt) == BlockFormat::kNVFP4; }

// The weight factor shard `shard`'s calibration gives (fp64): amax_w / 2688 for NVFP4, 1 for MX.
double shard_factor(CheckpointFormat fmt, int shard) {
  return is_nvfp4(fmt) ? double(kWeightAmax[shard]) / kFp4Fp8Max : 1.0;
}

// prepare_qkv_weights of `c`'s rows [row0, row0 + rows): the original arrays, re-swizzled.
PreparedQkvWeights prepare_rows(const QkvCase& c, int64_t row0, int64_t rows) {
  const BlockFormat bf = c.shape.format;
  const int64_t rb = row_bytes(bf, c.shape.k), kb = c.kb_count;
  std::vector<uint8_t> linear(std::size_t(rows * kb));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kb; ++j)
      linear[r * kb + j] = c.wscale[swizzled_scale_offset(row0 + r, j, kb)];
  std::vector<uint8_t> sw(std::size_t(swizzled_scale_elements(rows, kb)));
  const auto sw_view = make_view<uint8_t, 5>(sw.data(), swizzled_scale_shape(rows, kb));
  EXPECT_TRUE(
      linear_to_swizzled_scales(make_view<const uint8_t>(linear.data(), rows, kb), sw_view).ok());
  PreparedQkvWeights out;
  const Status st =
      prepare_qkv_weights(make_view<const uint8_t>(c.weight.data() + row0 * rb, rows, rb),
                          TensorView<const uint8_t, 5>(sw_view), bf, &out, Context{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// The scalar reconstruction of `c`'s weight (r, j): e2m1 / e4m3 value x |block scale| x factor.
double scalar_weight(const QkvCase& c, int64_t r, int64_t j, double factor) {
  const BlockFormat bf = c.shape.format;
  const int64_t rb = row_bytes(bf, c.shape.k);
  const uint8_t code = c.wscale[swizzled_scale_offset(r, j / sf_vector_size(bf), c.kb_count)];
  const double scale = bf == BlockFormat::kNVFP4 ? std::fabs(double(e4m3_to_float(code)))
                                                 : std::ldexp(1.0, int(code) - 127);
  const double v = bf == BlockFormat::kMXFP8 ? e4m3_to_float(c.weight[r * rb + j])
                                             : e2m1_to_float(e2m1_get(&c.weight[r * rb], j));
  return v * scale * factor;
}

LinearCheckpointWeights load_linear_ok(const SafetensorsCheckpoint& ckpt, const std::string& p) {
  LinearCheckpointWeights w;
  const Status st = load_linear_weights(ckpt, p, &w, Context{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return w;
}

// A layer's other projections, all from one random case: o_proj (rows [0, 48), shard 0's
// calibration), down_proj (all 80 rows, shard 1's), gate_proj (rows [0, 48), shard 0's) and
// up_proj (rows [48, 80), shard 2's), plus q/k/v without a layer prefix.
class LinearCheckpoint : public ::testing::TestWithParam<CheckpointFormat> {};

TEST_P(LinearCheckpoint, LoadsAnyProjectionLikePrepare) {
  const CheckpointFormat fmt = GetParam();
  TestRng rng;
  const QkvCase c = small_case(fmt, rng);
  const std::string o = "model.layers.0.self_attn.o_proj", down = "model.layers.0.mlp.down_proj",
                    gate = "model.layers.0.mlp.gate_proj", up = "model.layers.0.mlp.up_proj";
  std::vector<StEntry> entries;
  auto add = [&](std::vector<StEntry> more) {
    for (StEntry& e : more) entries.push_back(std::move(e));
  };
  add(shard_entries(c, fmt, o, 0, c.q_dim, 0));
  add(shard_entries(c, fmt, down, 0, c.n, 1));
  add(shard_entries(c, fmt, gate, 0, c.q_dim, 0));
  add(shard_entries(c, fmt, up, c.q_dim, c.n - c.q_dim, 2));
  const int64_t qkv_rows[3] = {c.q_dim, c.kv_width, c.kv_width};
  int64_t row0 = 0;
  for (int i = 0; i < 3; ++i) {  // q_proj, k_proj, v_proj: no layer prefix
    add(shard_entries(c, fmt, std::string(1, "qkv"[i]) + "_proj", row0, qkv_rows[i], i));
    row0 += qkv_rows[i];
  }
  TempFile file(write_safetensors(entries));
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
  const BlockFormat bf = checkpoint_block_format(fmt);
  const PreparedQkvWeights all_rows = prepare_rows(c, 0, c.n);

  // One projection: the bytes prepare_qkv_weights gives for the same rows, one section.
  const LinearCheckpointWeights wo = load_linear_ok(ckpt, o);
  EXPECT_EQ(wo.format, fmt);
  EXPECT_EQ(wo.weights.format, bf);
  EXPECT_EQ(wo.section_rows, std::vector<int64_t>{c.q_dim});
  ASSERT_EQ(wo.weight_factor.size(), 1u);
  EXPECT_NEAR(wo.weight_factor[0], shard_factor(fmt, 0), shard_factor(fmt, 0) * 1e-6);
  EXPECT_NEAR(wo.input_global, is_nvfp4(fmt) ? kFp4Fp8Max / kInputAmax[0] : 1.0, 1e-3);
  expect_same_prepared(wo.weights, prepare_rows(c, 0, c.q_dim));
  const LinearCheckpointWeights wd = load_linear_ok(ckpt, down);
  EXPECT_EQ(wd.section_rows, std::vector<int64_t>{c.n});
  EXPECT_NEAR(wd.weight_factor[0], shard_factor(fmt, 1), shard_factor(fmt, 1) * 1e-6);
  expect_same_prepared(wd.weights, all_rows);

  // gate then up: the stacked rows are the case's rows, each section with its own factor.
  LinearCheckpointWeights gu;
  Status st = load_stacked_linear_weights(ckpt, {gate, up}, &gu, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(gu.format, fmt);
  EXPECT_EQ(gu.section_rows, (std::vector<int64_t>{c.q_dim, c.n - c.q_dim}));
  ASSERT_EQ(gu.weight_factor.size(), 2u);
  EXPECT_EQ(gu.weight_factor[0], wo.weight_factor[0]);
  EXPECT_NEAR(gu.weight_factor[1], shard_factor(fmt, 2), shard_factor(fmt, 2) * 1e-6);
  if (is_nvfp4(fmt)) {
    EXPECT_NE(gu.weight_factor[0], gu.weight_factor[1]);  // the test can tell them apart
  }
  // The most conservative activation multiplier: the larger input amax (shard 2's 4 > 3).
  EXPECT_NEAR(gu.input_global, is_nvfp4(fmt) ? kFp4Fp8Max / kInputAmax[2] : 1.0, 1e-3);
  expect_same_prepared(gu.weights, all_rows);
  const std::vector<float> wcols = gu.column_factors(true), gcols = gu.column_factors(false);
  ASSERT_EQ(wcols.size(), std::size_t(c.n));
  ASSERT_EQ(gcols.size(), std::size_t(c.n));
  for (int64_t col = 0; col < c.n; ++col) {
    const float f = gu.weight_factor[col < c.q_dim ? 0 : 1];
    EXPECT_EQ(wcols[std::size_t(col)], f) << col;
    EXPECT_EQ(gcols[std::size_t(col)], f / gu.input_global) << col;
  }

  // q/k/v without a layer prefix: prefix "" reads q_proj (no leading dot); the q/k/v loader is
  // the 3-shard stacked loader.
  QkvCheckpointWeights qkv;
  st = load_qkv_weights(ckpt, "", &qkv, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(qkv.q_rows, c.q_dim);
  EXPECT_EQ(qkv.v_rows, c.kv_width);
  expect_same_prepared(qkv.weights, all_rows);
  LinearCheckpointWeights stacked;
  st = load_stacked_linear_weights(ckpt, {"q_proj", "k_proj", "v_proj"}, &stacked, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_same_prepared(stacked.weights, qkv.weights);
  EXPECT_EQ(stacked.weight_factor,
            (std::vector<float>{qkv.weight_factor.q, qkv.weight_factor.k, qkv.weight_factor.v}));
  EXPECT_EQ(stacked.input_global, qkv.input_global);
  const SectionScales g = qkv.gemm_scales();
  const std::vector<float> cols = stacked.column_factors(false);
  EXPECT_EQ(cols.front(), g.q);
  EXPECT_EQ(cols.back(), g.v);

  // Dequantised: the scalar reconstruction with the shard's factor (fp64).
  for (const auto& [p, row0, shard] :
       {std::tuple{o, int64_t(0), 0}, std::tuple{down, int64_t(0), 1},
        std::tuple{up, c.q_dim, 2}}) {
    SCOPED_TRACE(p);
    std::vector<float> deq;
    int64_t n = 0, k = 0;
    st = dequantize_linear_weights(ckpt, p, &deq, &n, &k);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(k, c.shape.k);
    ASSERT_EQ(std::size_t(n * k), deq.size());
    for (int64_t r = 0; r < n; r += 3) {
      for (int64_t j = 0; j < k; ++j) {
        const double want = scalar_weight(c, row0 + r, j, shard_factor(fmt, shard));
        EXPECT_NEAR(deq[std::size_t(r * k + j)], want, std::fabs(want) * 1e-6) << r << "," << j;
      }
    }
  }

  // Every projection is listed with its layout, including the prefix-less ones.
  const auto listed = list_quantized_projections(ckpt);
  ASSERT_EQ(listed.size(), 7u);
  for (const QuantizedProjection& q : listed) EXPECT_EQ(q.format, fmt) << q.name;
  EXPECT_EQ(listed[0].name, "k_proj");
  EXPECT_EQ(listed[1].name, down);
  EXPECT_EQ(listed[1].n, c.n);
  EXPECT_EQ(listed[1].k, c.shape.k);
  EXPECT_EQ(listed[6].name, "v_proj");
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearCheckpoint, ::testing::ValuesIn(kAllFormats));

// compressed-tensors' MXFP4 (mxfp4-pack-quantized): weight_packed U8 [N, K/2] or F4 [N, K], an
// e8m0 weight_scale U8 or F8_E8M0 [N, K/32], no global scale: all four spellings load to the
// bits of gpt-oss's blocks / scales of the same data, and the W4A4 scales are 1.
TEST(MXFP4CompressedTensorsCheckpoint, LoadsLikeTheGptOssLayout) {
  TestRng rng;
  const QkvCase c = small_case(CheckpointFormat::kMXFP4CompressedTensors, rng);
  const std::string prefix = "model.layers.1.self_attn";
  TempFile gpt_oss(write_checkpoint(c, CheckpointFormat::kMXFP4, prefix));
  SafetensorsCheckpoint ref_ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(gpt_oss.path(), &ref_ckpt).ok());
  QkvCheckpointWeights ref;
  load_ok(ref_ckpt, prefix, &ref);
  for (const bool f4 : {false, true}) {
    for (const char* scale_dtype : {"U8", "F8_E8M0"}) {
      SCOPED_TRACE(std::string(f4 ? "F4" : "U8") + " data, " + scale_dtype + " scales");
      std::vector<StEntry> entries =
          checkpoint_entries(c, CheckpointFormat::kMXFP4CompressedTensors, prefix);
      for (StEntry& e : entries) {
        if (e.name.ends_with(".weight_scale")) e.dtype = scale_dtype;
        if (f4 && e.name.ends_with(".weight_packed")) {
          e.dtype = "F4";
          e.shape.back() *= 2;
        }
      }
      TempFile file(write_safetensors(entries));
      SafetensorsCheckpoint ckpt;
      ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
      QkvCheckpointWeights w;
      load_ok(ckpt, prefix, &w);
      EXPECT_EQ(w.format, CheckpointFormat::kMXFP4CompressedTensors);
      EXPECT_EQ(w.weights.format, BlockFormat::kMXFP4);
      expect_same_prepared(w.weights, ref.weights);
      const SectionScales g = w.gemm_scales();
      EXPECT_EQ(g.q, 1.0f);
      EXPECT_EQ(g.k, 1.0f);
      EXPECT_EQ(g.v, 1.0f);
      std::vector<float> a, b;
      int64_t n = 0, k = 0;
      ASSERT_TRUE(dequantize_qkv_weights(ref_ckpt, prefix, &a, &n, &k).ok());
      ASSERT_TRUE(dequantize_qkv_weights(ckpt, prefix, &b, &n, &k).ok());
      EXPECT_TRUE(a == b);
      const auto listed = list_quantized_projections(ckpt);
      ASSERT_EQ(listed.size(), 3u);
      EXPECT_STREQ(checkpoint_format_name(listed[0].format), "MXFP4 (compressed-tensors)");
    }
  }
}

// Errors of the linear loaders name the tensor (or projection) and what was expected.
void expect_linear_error(const std::vector<StEntry>& entries,
                         const std::vector<std::string>& projections, const std::string& fragment) {
  TempFile file(write_safetensors(entries));
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
  LinearCheckpointWeights w;
  w.section_rows = {-1};
  const Status s = projections.size() == 1
                       ? load_linear_weights(ckpt, projections[0], &w, Context{})
                       : load_stacked_linear_weights(ckpt, projections, &w, Context{});
  ASSERT_FALSE(s.ok()) << "expected: " << fragment;
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_EQ(w.section_rows, std::vector<int64_t>{-1}) << "the output changed before the error";
  EXPECT_TRUE(w.weights.empty());
}

// An MXFP4 compressed-tensors projection `p` of n rows and k columns (constant codes).
std::vector<StEntry> mx_ct_shard(const std::string& p, int64_t n, int64_t k) {
  return {
      {p + ".weight_packed", "U8", {n, k / 2}, std::vector<uint8_t>(std::size_t(n * k / 2), 0x21)},
      {p + ".weight_scale", "U8", {n, k / 32}, std::vector<uint8_t>(std::size_t(n * k / 32), 127)}};
}

TEST(LinearCheckpointErrors, NameTheTensorAndTheExpectation) {
  using E = std::vector<StEntry>;
  auto join = [](E a, const E& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::string o = "L.o_proj", g = "L.gate_proj", u = "L.up_proj";
  E entries = ct_shard(o, 16, 32);
  entries.erase(entries.begin() + 1);
  expect_linear_error(entries, {o}, "tensor 'L.o_proj.weight_scale': missing from");
  entries = ct_shard(o, 16, 32);
  entries[0].dtype = "I8";
  expect_linear_error(entries, {o},
                      "tensor 'L.o_proj.weight_packed': expected dtype U8 or F4, got I8");
  entries = mx_ct_shard(o, 16, 64);
  entries[1].dtype = "BF16";  // no global scale and not e8m0: read as NVFP4
  entries[1].shape = {16, 1};
  expect_linear_error(entries, {o},
                      "tensor 'L.o_proj.weight_scale': expected dtype F8_E4M3, got BF16");
  entries = mx_ct_shard(o, 16, 64);
  entries[1].shape = {8, 4};  // K/16 per row, as NVFP4's
  expect_linear_error(entries, {o},
                      "tensor 'L.o_proj.weight_scale': expected shape [N, K / block] = [16, 2], "
                      "got [8, 4]");
  entries = ct_shard(o, 48, 32);
  entries[2].shape = {3};
  entries[2].bytes.resize(12);
  expect_linear_error(entries, {o},
                      "tensor 'L.o_proj.weight_global_scale': expected a scalar (shape [] or [1]), "
                      "got [3]");
  expect_linear_error(ct_shard(o, 16, 32), {"L.down_proj"},
                      "projection 'L.down_proj': no quantised weight in");
  expect_linear_error(join(ct_shard(g, 16, 32), ct_shard(u, 16, 64)), {g, u},
                      "projection 'L.up_proj': expected K = 32 of L.gate_proj, got 64");
  expect_linear_error(join(ct_shard(g, 16, 64), mx_ct_shard(u, 16, 64)), {g, u},
                      "projection 'L.up_proj': expected the layout of L.gate_proj (NVFP4 "
                      "(compressed-tensors)), got MXFP4 (compressed-tensors)");
  expect_linear_error(join(ct_shard(g, 16, 32), ct_shard(u, 16, 32)), {g, "L.missing"},
                      "projection 'L.missing': no quantised weight");
  expect_linear_error(ct_shard(g, 16, 32), {},
                      "projections: expected at least one projection name, got an empty list");
  TempFile file(write_safetensors(ct_shard(o, 16, 32)));
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
  EXPECT_NE(load_linear_weights(ckpt, o, nullptr, Context{}).message().find("out: pointer is null"),
            std::string::npos);
  int64_t n = 0, k = 0;
  EXPECT_FALSE(dequantize_linear_weights(ckpt, o, nullptr, &n, &k).ok());
  std::vector<float> deq;
  EXPECT_NE(dequantize_linear_weights(ckpt, "L.x", &deq, &n, &k).message().find("'L.x'"),
            std::string::npos);
}

}  // namespace
}  // namespace quantkv
