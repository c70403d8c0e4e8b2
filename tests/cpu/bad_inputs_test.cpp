// Every bad input tried against the public entry points, one table row each: which argument,
// what is wrong with it, the status code and a fragment of the message. Each row runs a small
// valid call (tests/robustness_fixtures.hpp) with that one defect, checks the code and the
// message, and that nothing was written (outputs and caches compared byte for byte with their
// state before the call).
//
// docs/bad_inputs.md holds the same table; BadInputs.DocumentedTableMatches checks that it is
// in sync. To regenerate it after changing the table:
//   QUANTKV_UPDATE_DOCS=1 ./quantkv_tests --gtest_filter='BadInputs.DocumentedTableMatches'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "engine_fixtures.hpp"
#include "quantkv/checkpoint.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/moe.hpp"
#include "quantkv/sparse_mla.hpp"
#include "robustness_fixtures.hpp"
#include "rope_fixture.hpp"
#include "safetensors_writer.hpp"

namespace quantkv {
namespace {

using testing::EngineIndexerFixture;
using testing::EngineKStoreFixture;
using testing::IndexerFixture;
using testing::KStoreFixture;
using testing::QkvFixture;
using testing::QPrepareFixture;
using testing::QuantizeFixture;
using testing::RopeFixture;
using testing::test_freqs;
using testing::test_front_end;

constexpr uint64_t kSeed = 20261201;

struct Outcome {
  Status status;
  bool unchanged = true;  // outputs and cache bytes equal to their state before the call
};

struct BadInput {
  const char* entry;
  const char* argument;
  const char* defect;
  StatusCode code;
  const char* fragment;
  std::function<Outcome()> run;
};

// Bytes of every buffer an op may write.
std::vector<uint8_t> bytes_of(PagedKVCache& c) {
  std::vector<uint8_t> b = c.raw_blocks();
  const auto* s = reinterpret_cast<const uint8_t*>(c.raw_scales().data());
  b.insert(b.end(), s, s + c.raw_scales().size() * sizeof(float));
  return b;
}
template <typename T>
void append(std::vector<uint8_t>& b, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  b.insert(b.end(), p, p + v.size() * sizeof(T));
}
std::vector<uint8_t> written(IndexerFixture& f) {
  auto b = bytes_of(f.cache);
  append(b, f.out);
  return b;
}
std::vector<uint8_t> written(KStoreFixture& f) { return bytes_of(f.cache); }
std::vector<uint8_t> written(QPrepareFixture& f) {
  std::vector<uint8_t> b;
  append(b, f.q8);
  append(b, f.q_s);
  return b;
}
std::vector<uint8_t> written(QuantizeFixture& f) {
  std::vector<uint8_t> b;
  append(b, f.data);
  append(b, f.scales);
  return b;
}
std::vector<uint8_t> written(EngineIndexerFixture& f) {
  std::vector<uint8_t> b;
  append(b, f.engine.storage);
  append(b, f.out);
  return b;
}
std::vector<uint8_t> written(EngineKStoreFixture& f) {
  std::vector<uint8_t> b;
  append(b, f.engine.storage);
  return b;
}
std::vector<uint8_t> written(QkvFixture& f) {
  auto b = bytes_of(f.cache);
  append(b, f.out);
  return b;
}
std::vector<uint8_t> written(RopeFixture& f) {
  auto b = bytes_of(f.cache);
  append(b, f.out);
  return b;
}

// The K store / Q prepare fixtures called with DeepSeek-V3.2's front end, after `edit` changed it
// (tables of `max_seq_len` rows of `rope_dim`; the Q prepare gets positions 0, 1, ...).
Status k_store_front_end(KStoreFixture& f, int64_t max_seq_len, int64_t rope_dim,
                         const std::function<void(IndexerFrontEnd&)>& edit) {
  const std::vector<float> freqs = test_freqs(max_seq_len, rope_dim);
  IndexerFrontEnd fe = test_front_end(freqs, rope_dim, nullptr);
  edit(fe);
  return indexer_k_store(f.k_view(), f.offs_view(), f.kc, f.layer, f.mode, fe, {});
}
Status q_prepare_front_end(QPrepareFixture& f, int64_t rope_dim,
                           const std::function<void(IndexerFrontEnd&)>& edit) {
  const std::vector<float> freqs = test_freqs(8, rope_dim);
  std::vector<uint32_t> positions(size_t(f.T));
  for (size_t t = 0; t < positions.size(); ++t) positions[t] = uint32_t(t);
  IndexerFrontEnd fe = test_front_end(freqs, rope_dim, &positions);
  edit(fe);
  return indexer_q_prepare(f.q_view(), f.w_view(), f.q8_view(), f.qs_view(), f.mode, fe, {});
}

// Builds a fixture, lets `setup` change it before the buffers are filled (shapes, formats),
// `mutate` break it afterwards, then runs `call` (default: the fixture's own call).
template <typename Fx>
std::function<Outcome()> with(std::function<void(Fx&)> mutate,
                              std::function<void(Fx&)> setup = nullptr,
                              std::function<Status(Fx&)> call = nullptr) {
  return [=]() {
    Fx f;
    if (setup) setup(f);
    f.build(kSeed);
    mutate(f);
    const auto before = written(f);
    Outcome o;
    o.status = call ? call(f) : f.run();
    o.unchanged = written(f) == before;
    return o;
  };
}

// The fixture's own call with ctx.num_threads = `threads` (negative).
template <typename Fx>
std::function<Outcome()> negative_threads(int threads = -1) {
  return with<Fx>([](Fx&) {}, nullptr,
                  [threads](Fx& f) {
                    Context c;
                    c.num_threads = threads;
                    return f.run(c);
                  });
}

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kRange = StatusCode::kOutOfRange;
constexpr StatusCode kBudget = StatusCode::kResourceExhausted;
constexpr float kNaN = __builtin_nanf("");
constexpr float kInf = __builtin_inff();

// The indexer's call with views the test changes.
struct IndexerViews {
  TensorView<int32_t, 2> out;
  TensorView<const float8_e4m3fn, 3> q;
  TensorView<const float, 2> qs;
  TensorView<const uint32_t, 1> offs;
};
std::function<Outcome()> indexer_views(std::function<void(IndexerFixture&, IndexerViews&)> mutate) {
  return [=]() {
    IndexerFixture f;
    f.build(kSeed);
    IndexerViews v{f.out_view(), f.q_view(), f.qs_view(), f.offs_view()};
    // Room for views that claim more elements than the fixture has.
    f.q.resize(f.q.size() * 4);
    f.q_s.resize(f.q_s.size() * 4);
    f.out.resize(f.out.size() * 4, -7);
    v = IndexerViews{f.out_view(), f.q_view(), f.qs_view(), f.offs_view()};
    mutate(f, v);
    const auto before = written(f);
    Outcome o;
    o.status =
        mla_indexer_ragged_float8_paged(v.out, v.q, v.qs, v.offs, f.kc, f.layer, f.mask, Context{});
    o.unchanged = written(f) == before;
    return o;
  };
}

// The fused QKV call (plain weight) with the views `views` returns.
Status run_qkv(QkvFixture& f, TensorView<const uint8_t, 2> hidden, TensorView<bfloat16, 2> out) {
  return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      hidden, f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(),
      f.tensor_sf, f.kv, f.layer, out, f.format, {});
}

// A PagedKVCache::create call with `config` changed by `change` (expected to fail).
Outcome create_with(std::function<void(PagedKVCacheConfig&)> change) {
  PagedKVCacheConfig c;
  c.num_blocks = 4;
  change(c);
  PagedKVCache p;
  return Outcome{PagedKVCache::create(c, 1, &p), true};
}

constexpr int64_t k2Pow62 = int64_t(1) << 62;

// ----------------------------------------------------------------- checkpoint loaders
// Their outputs are objects: `out` holds a sentinel (or a file already open) before the call
// and must keep it.
using testing::ct_qkv;
using testing::ct_shard;
using testing::StEntry;
using testing::TempDir;
using testing::TempFile;
using testing::with_header;
using testing::write_safetensors;

// SafetensorsFile::open of `path`; `out` held another file before.
Outcome open_path(const std::string& path) {
  TempFile good(write_safetensors(ct_qkv(32)));
  SafetensorsFile f;
  if (!SafetensorsFile::open(good.path(), &f).ok()) std::abort();
  Outcome o{SafetensorsFile::open(path, &f), true};
  o.unchanged = f.label() == good.path() && f.tensors().size() == 9;
  return o;
}
Outcome open_bytes(const std::vector<uint8_t>& bytes) {
  TempFile file(bytes);
  return open_path(file.path());
}

// A load into an output holding a sentinel: `load` gets the checkpoint and the output.
Outcome load_into(
    const std::string& path,
    const std::function<Status(const SafetensorsCheckpoint&, QkvCheckpointWeights*)>& load) {
  SafetensorsCheckpoint ckpt;
  const Status opened = SafetensorsCheckpoint::open(path, &ckpt);
  if (!opened.ok()) return Outcome{opened, true};
  QkvCheckpointWeights w;
  w.q_rows = -1;
  Outcome o{load(ckpt, &w), true};
  o.unchanged = w.q_rows == -1 && w.weights.empty();
  return o;
}

// load_qkv_weights of prefix L (or `prefix`) from one file of ct_qkv(32) after `edit`.
std::function<Outcome()> load_file(std::function<void(std::vector<StEntry>&)> edit,
                                   std::string prefix = "L") {
  return [=] {
    std::vector<StEntry> entries = ct_qkv(32);
    edit(entries);
    TempFile file(write_safetensors(entries));
    return load_into(file.path(), [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
      return load_qkv_weights(c, prefix, w, {});
    });
  };
}

// load_fused_qkv_weights of L.qkv_proj (48 rows, K = 32) with `sections`, after `edit`.
std::function<Outcome()> load_fused(QkvSections sections,
                                    std::function<void(std::vector<StEntry>&)> edit = nullptr) {
  return [=] {
    std::vector<StEntry> entries = ct_shard("L.qkv_proj", 48, 32);
    if (edit) edit(entries);
    TempFile file(write_safetensors(entries));
    return load_into(file.path(), [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
      return load_fused_qkv_weights(c, "L.qkv_proj", sections, w, {});
    });
  };
}

// load_qkv_weights of L from ct_qkv(32) over two shards with an index, after `edit` changed
// the map (rewritten) or the files.
using WeightMap = std::vector<std::pair<std::string, std::string>>;
std::function<Outcome()> load_sharded(std::function<void(const TempDir&, WeightMap&)> edit) {
  return [=] {
    TempDir dir;
    WeightMap map = dir.write_sharded(ct_qkv(32), 2);
    edit(dir, map);
    dir.write("model.safetensors.index.json", testing::index_json(map));
    return load_into(dir.path(), [](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
      return load_qkv_weights(c, "L", w, {});
    });
  };
}

// load_linear_weights (one name) or load_stacked_linear_weights of `projections` from one file
// of L.gate_proj and L.up_proj (ct_shard(_, 16, 32): entries 0-2 gate, 3-5 up) after `edit`,
// into an output holding a sentinel.
std::function<Outcome()> load_linear(std::vector<std::string> projections,
                                     std::function<void(std::vector<StEntry>&)> edit = nullptr) {
  return [=] {
    std::vector<StEntry> entries = ct_shard("L.gate_proj", 16, 32);
    for (StEntry& e : ct_shard("L.up_proj", 16, 32)) entries.push_back(std::move(e));
    if (edit) edit(entries);
    TempFile file(write_safetensors(entries));
    SafetensorsCheckpoint ckpt;
    if (!SafetensorsCheckpoint::open(file.path(), &ckpt).ok()) std::abort();
    LinearCheckpointWeights w;
    w.section_rows = {-1};
    Outcome o{projections.size() == 1 ? load_linear_weights(ckpt, projections[0], &w, {})
                                      : load_stacked_linear_weights(ckpt, projections, &w, {}),
              true};
    o.unchanged = w.section_rows == std::vector<int64_t>{-1} && w.weights.empty();
    return o;
  };
}

// load_experts of `prefix` (in `layout`) from one file of two per-expert NVFP4 experts
// E.{0,1}.gate_proj / up_proj [16, 32] and down_proj [32, 16] (ct_shard: 3 entries each, in that
// order) after `edit`, into an output holding a sentinel.
std::function<Outcome()> load_experts_from(
    const std::function<void(std::vector<StEntry>&)>& edit = nullptr,
    const std::string& prefix = "E",
    ExpertsCheckpointLayout layout = ExpertsCheckpointLayout::kAuto) {
  return [=] {
    std::vector<StEntry> entries;
    for (const char* e : {"E.0.", "E.1."}) {
      for (StEntry& t : ct_shard(std::string(e) + "gate_proj", 16, 32)) entries.push_back(t);
      for (StEntry& t : ct_shard(std::string(e) + "up_proj", 16, 32)) entries.push_back(t);
      for (StEntry& t : ct_shard(std::string(e) + "down_proj", 32, 16)) entries.push_back(t);
    }
    if (edit) edit(entries);
    TempFile file(write_safetensors(entries));
    SafetensorsCheckpoint ckpt;
    if (!SafetensorsCheckpoint::open(file.path(), &ckpt).ok()) std::abort();
    LoadedExperts w;
    w.w2_bias = {-1.0f};
    Outcome o{load_experts(ckpt, prefix, &w, {}, layout), true};
    o.unchanged = w.w2_bias == std::vector<float>{-1.0f} && w.experts.num_experts() == 0;
    return o;
  };
}

// SafetensorsCheckpoint::open of what `setup` leaves in a fresh directory (its return value,
// relative to it; empty: the directory); `out` held a checkpoint before.
std::function<Outcome()> open_checkpoint(std::function<std::string(const TempDir&)> setup) {
  return [=] {
    TempDir dir;
    const std::string rel = setup(dir);
    TempFile good(write_safetensors(ct_qkv(32)));
    SafetensorsCheckpoint c;
    if (!SafetensorsCheckpoint::open(good.path(), &c).ok()) std::abort();
    Outcome o{SafetensorsCheckpoint::open(rel.empty() ? dir.path() : dir.path() + "/" + rel, &c),
              true};
    o.unchanged = c.label() == good.path() && c.contains("L.q_proj.weight_packed");
    return o;
  };
}
std::function<Outcome()> open_index(std::string text) {
  return open_checkpoint([=](const TempDir& d) {
    d.write("model.safetensors.index.json", text);
    return std::string("model.safetensors.index.json");
  });
}

std::vector<BadInput> checkpoint_bad_inputs() {
  const char* sf = "SafetensorsFile::open";
  const char* sc = "SafetensorsCheckpoint::open";
  const char* lq = "load_qkv_weights";
  const char* lf = "load_fused_qkv_weights";
  const char* ll = "load_linear_weights";
  const char* ls = "load_stacked_linear_weights";
  const char* lx = "load_experts";
  const std::string ab = R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  using E = std::vector<StEntry>;
  return {
      {sf, "path", "a 3-byte file", kInvalid, "truncated file: 3 bytes",
       [] {
         return open_bytes({1, 0, 0});
       }},
      {sf, "path", "header length 200 in a 10-byte file", kInvalid,
       "header length 200 runs past the end of the file (10 bytes)",
       [] {
         auto b = with_header("{}", 0);
         b[0] = 200;
         return open_bytes(b);
       }},
      {sf, "path", "header cut in the middle of the JSON", kInvalid, "header is not valid JSON",
       [] { return open_bytes(with_header("{\"a\":", 0)); }},
      {sf, "path", "header a JSON array", kInvalid, "header is not a JSON object",
       [] { return open_bytes(with_header("[1, 2]", 0)); }},
      {sf, "path", "dtype 'F7'", kInvalid, "tensor 'a': unknown dtype 'F7'",
       [] {
         return open_bytes(
             with_header(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1));
       }},
      {sf, "path", "F32 [2] over 4 bytes (shape and dtype disagree with the offsets)", kInvalid,
       "tensor 'a': data_offsets span 4 bytes, shape x dtype needs 8",
       [] {
         return open_bytes(
             with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4));
       }},
      {sf, "path", "file cut 2 bytes into the data (offsets past its end)", kInvalid,
       "tensor 'a': data_offsets [0, 4] outside the data (2 bytes)",
       [] {
         std::vector<uint8_t> b = write_safetensors({{"a", "U8", {4}, {1, 2, 3, 4}}});
         b.resize(b.size() - 2);
         return open_bytes(b);
       }},
      {sf, "path", "two tensors sharing bytes 2-3", kInvalid, "tensor 'b': overlaps tensor 'a'",
       [ab] {
         return open_bytes(
             with_header("{" + ab + R"(,"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 8));
       }},
      {sf, "path", "a file that does not exist", kInvalid, "cannot open: No such file or directory",
       [] { return open_path("/nonexistent/quantkv.safetensors"); }},
      {lq, "file", "L.k_proj.weight_scale absent", kInvalid,
       "tensor 'L.k_proj.weight_scale': missing from",
       load_file([](E& e) { e.erase(e.begin() + 4); })},
      {lq, "file", "L.q_proj.weight_scale of dtype U8", kInvalid,
       "tensor 'L.q_proj.weight_scale': expected dtype F8_E4M3, got U8",
       load_file([](E& e) { e[1].dtype = "U8"; })},
      {lq, "file", "L.v_proj.weight_scale of shape [16, 3]", kInvalid,
       "tensor 'L.v_proj.weight_scale': expected shape [N, K / block] = [16, 2], got [16, 3]",
       load_file([](E& e) {
         e[7].shape = {16, 3};
         e[7].bytes.resize(48);
       })},
      {lq, "file", "K = 8, not a multiple of the NVFP4 block", kInvalid,
       "tensor 'L.q_proj.weight_packed': expected K = 8 to be a multiple of the NVFP4 block of 16",
       load_file([](E& e) {
         e[0].shape = {16, 4};
         e[0].bytes.resize(64);
       })},
      {lq, "file", "weight_global_scale -1", kInvalid,
       "tensor 'L.q_proj.weight_global_scale': expected a finite positive global scale",
       load_file([](E& e) { e[2] = testing::st_f32("L.q_proj.weight_global_scale", -1.0f); })},
      {lq, "file", "weight_global_scale of shape [3] on a q/k/v shard", kInvalid,
       "tensor 'L.k_proj.weight_global_scale': expected a scalar (shape [] or [1]), got [3]",
       load_file([](E& e) {
         e[5].shape = {3};
         e[5].bytes.resize(12);
       })},
      {lq, "file", "L.v_proj in MXFP4 while L.q_proj is NVFP4", kInvalid,
       "projection 'L.v_proj': expected the layout of q_proj (NVFP4 (compressed-tensors)), got "
       "MXFP4",
       load_file([](E& e) {
         e[6] = {"L.v_proj.weight_blocks", "U8", {16, 1, 16}, std::vector<uint8_t>(256, 0)};
         e[7] = {"L.v_proj.weight_scales", "U8", {16, 1}, std::vector<uint8_t>(16, 127)};
         e.pop_back();
       })},
      {lq, "prefix", "no projection under it", kInvalid,
       "projection 'M.q_proj': no quantised weight", load_file([](E&) {}, "M")},
      {lq, "out", "null", kInvalid, "out: pointer is null",
       [] {
         TempFile file(write_safetensors(ct_qkv(32)));
         SafetensorsCheckpoint c;
         if (!SafetensorsCheckpoint::open(file.path(), &c).ok()) std::abort();
         return Outcome{load_qkv_weights(c, "L", nullptr, {}), true};
       }},
      {sc, "path", "index not valid JSON", kInvalid, "model.safetensors.index.json: not valid JSON",
       open_index("{\"weight_map\": {")},
      {sc, "path", "index a JSON array", kInvalid,
       "model.safetensors.index.json: not a JSON object", open_index("[]")},
      {sc, "path", "index without \"weight_map\"", kInvalid, "missing object \"weight_map\"",
       open_index(R"({"metadata": {"total_size": 0}})")},
      {sc, "path", "a weight_map value that is not a string", kInvalid,
       "weight_map entry 'L.q_proj.weight_packed' is not a string",
       open_index(R"({"weight_map": {"L.q_proj.weight_packed": 7}})")},
      {sc, "path", "a weight_map file outside the index's directory", kInvalid,
       "names '../model.safetensors', expected a file name inside the index's directory",
       open_index(R"({"weight_map": {"a": "../model.safetensors"}})")},
      {sc, "path", "a directory with two .safetensors files and no index", kInvalid,
       "found 0 index files and 2 .safetensors files", open_checkpoint([](const TempDir& d) {
         d.write("a.safetensors", write_safetensors(ct_qkv(32)));
         d.write("b.safetensors", write_safetensors(ct_qkv(32)));
         return std::string();
       })},
      {lq, "checkpoint", "sharded: L.k_proj.weight_scale missing from the weight_map", kInvalid,
       "tensor 'L.k_proj.weight_scale': missing from the weight_map of",
       load_sharded([](const TempDir&, WeightMap& m) { m.erase(m.begin() + 4); })},
      {lq, "checkpoint", "sharded: the weight_map names a file that does not exist", kInvalid,
       "names shard 'model-00003-of-00003.safetensors': safetensors",
       load_sharded(
           [](const TempDir&, WeightMap& m) { m[6].second = "model-00003-of-00003.safetensors"; })},
      {lq, "checkpoint", "sharded: the weight_map puts a tensor in a shard that lacks it", kInvalid,
       "tensor 'L.q_proj.weight_scale': weight_map of",
       load_sharded([](const TempDir&, WeightMap& m) { m[1].second = TempDir::shard_name(0, 2); })},
      {lq, "checkpoint", "sharded: a shard truncated to 3 bytes", kInvalid,
       "model-00002-of-00002.safetensors: truncated file: 3 bytes",
       load_sharded([](const TempDir& d, WeightMap&) {
         d.write(TempDir::shard_name(1, 2), std::vector<uint8_t>{1, 0, 0});
       })},
      {lf, "sections", "q + k + v = 47 rows for N = 48", kInvalid,
       "sections: expected q + k + v = N = 48 rows of 'L.qkv_proj' (each >= 1), got 16 + 16 + 15",
       load_fused({16, 16, 15})},
      {lf, "sections", "k = 0 rows", kInvalid,
       "sections: expected q + k + v = N = 48 rows of 'L.qkv_proj' (each >= 1), got 32 + 0 + 16",
       load_fused({32, 0, 16})},
      {lf, "sections", "INT64_MAX rows each (the sum must not wrap)", kInvalid,
       "sections: expected q + k + v = N = 48 rows", load_fused({INT64_MAX, INT64_MAX, INT64_MAX})},
      {lf, "projection", "weight_global_scale of shape [2]", kInvalid,
       "expected a scalar (shape [] or [1]) or one per q/k/v section ([3]), got [2]",
       load_fused({16, 16, 16},
                  [](E& e) {
                    e[2].shape = {2};
                    e[2].bytes.resize(8);
                  })},
      {lf, "projection", "no tensor of that name", kInvalid,
       "projection 'L.qkv_proj': no quantised weight",
       load_fused({16, 16, 16}, [](E& e) { e.clear(); })},
      {ll, "projection", "no tensor of that name", kInvalid,
       "projection 'L.down_proj': no quantised weight", load_linear({"L.down_proj"})},
      {ll, "projection", "L.up_proj.weight_scale absent", kInvalid,
       "tensor 'L.up_proj.weight_scale': missing from",
       load_linear({"L.up_proj"}, [](E& e) { e.erase(e.begin() + 4); })},
      {ll, "projection", "L.up_proj.weight_packed of dtype I8", kInvalid,
       "tensor 'L.up_proj.weight_packed': expected dtype U8 or F4, got I8",
       load_linear({"L.up_proj"}, [](E& e) { e[3].dtype = "I8"; })},
      {ll, "projection", "MXFP4 (compressed-tensors) weight_scale of shape [16, 2] for K = 32",
       kInvalid,
       "tensor 'L.up_proj.weight_scale': expected shape [N, K / block] = [16, 1], got [16, 2]",
       load_linear({"L.up_proj"},
                   [](E& e) {
                     e[4].dtype = "U8";  // e8m0, no global scale: compressed-tensors' MXFP4
                     e.pop_back();
                   })},
      {ll, "projection", "weight_global_scale of shape [3]", kInvalid,
       "tensor 'L.up_proj.weight_global_scale': expected a scalar (shape [] or [1]), got [3]",
       load_linear({"L.up_proj"},
                   [](E& e) {
                     e[5].shape = {3};
                     e[5].bytes.resize(12);
                   })},
      {ls, "projections", "an empty list", kInvalid,
       "projections: expected at least one projection name, got an empty list", load_linear({})},
      {ls, "projections", "L.up_proj of K = 64 after L.gate_proj of K = 32", kInvalid,
       "projection 'L.up_proj': expected K = 32 of L.gate_proj, got 64",
       load_linear({"L.gate_proj", "L.up_proj"},
                   [](E& e) {
                     const E k64 = ct_shard("L.up_proj", 16, 64);
                     std::copy(k64.begin(), k64.end(), e.begin() + 3);
                   })},
      {ls, "projections", "L.up_proj in MXFP4 while L.gate_proj is NVFP4", kInvalid,
       "projection 'L.up_proj': expected the layout of L.gate_proj (NVFP4 (compressed-tensors)), "
       "got MXFP4",
       load_linear(
           {"L.gate_proj", "L.up_proj"},
           [](E& e) {
             e[3] = {"L.up_proj.weight_blocks", "U8", {16, 1, 16}, std::vector<uint8_t>(256, 0)};
             e[4] = {"L.up_proj.weight_scales", "U8", {16, 1}, std::vector<uint8_t>(16, 127)};
             e.pop_back();
           })},
      {ls, "projections", "a name without tensors after a good one", kInvalid,
       "projection 'L.missing': no quantised weight", load_linear({"L.gate_proj", "L.missing"})},
      {lx, "prefix", "no tensor under it", kInvalid, "prefix 'X': no experts in",
       load_experts_from(nullptr, "X")},
      {lx, "prefix", "expert 1 without up_proj", kInvalid,
       "projection 'E.1.up_proj': no quantised weight",
       load_experts_from([](E& e) { e.erase(e.begin() + 12, e.begin() + 15); })},
      {lx, "prefix", "expert 1's down_proj of K = 32 (I = 16)", kInvalid,
       "expert 1: projection 'E.1.down_proj': expected [N, K] = [32, 16], got [32, 32]",
       load_experts_from([](E& e) {
         const E k32 = ct_shard("E.1.down_proj", 32, 32);
         std::copy(k32.begin(), k32.end(), e.begin() + 15);
       })},
      {lx, "prefix", "gpt-oss gate_up_proj_blocks of 3 dimensions", kInvalid,
       "tensor 'E.gate_up_proj_blocks': expected a non-empty [E, N, K/32, 16]",
       load_experts_from([](E& e) {
         e.push_back({"E.gate_up_proj_blocks", "U8", {2, 32, 16}, std::vector<uint8_t>(1024, 0)});
       })},
      {lx, "layout", "ExpertsCheckpointLayout(7)", kInvalid,
       "layout: expected kAuto, kGptOss or kPerExpert, got 7",
       load_experts_from(nullptr, "E", ExpertsCheckpointLayout(7))},
  };
}

// The linear layer on a QkvFixture's data (W4A4, y bf16 [M, N]) after `edit` changes the
// call; y must keep its poison.
std::function<Outcome()> linear_call(std::function<void(LinearArgs&, QkvFixture&)> edit) {
  return [=] {
    QkvFixture f;
    f.build(kSeed);
    PreparedWeights w;
    if (!prepare_weights({f.weight_view(), f.weight_scale_view(), {}, f.format}, &w, {}).ok())
      std::abort();
    std::vector<bfloat16> y(std::size_t(f.M() * f.N()), bfloat16{0xA5A5});
    const std::vector<bfloat16> before = y;
    LinearArgs a;
    a.x = f.hidden_view();
    a.x_scale = f.input_scale_view();
    a.weight = &w;
    a.alpha = 0.5f;
    a.y = make_view(y.data(), f.M(), f.N());
    edit(a, f);
    Outcome o{linear(a, {}), true};
    o.unchanged = std::memcmp(y.data(), before.data(), y.size() * sizeof(bfloat16)) == 0;
    return o;
  };
}

// The fused experts on a small NVFP4 layer (E = 2, H = 32, I = 16, T = 3, k = 2, weight-only,
// y bf16 [T, H]) after `edit` changes the call; y must keep its poison.
struct MoeFixture {
  static constexpr int64_t kE = 2, kH = 32, kI = 16, kT = 3, kK = 2;
  std::vector<uint8_t> w13, s13, w2, s2;
  std::vector<bfloat16> x;
  std::vector<int32_t> ids{0, 1, 1, 1, -1, 0};
  std::vector<float> weights{0.5f, 0.5f, 1.0f, 0.25f, 1.0f, 1.0f};
  PreparedExperts experts;
  MoeFixture()
      : w13(std::size_t(kE * 2 * kI * kH / 2)),
        s13(std::size_t(kE * 2 * kI * kH / 16), 0x38),
        w2(std::size_t(kE * kH * kI / 2)),
        s2(std::size_t(kE * kH * kI / 16), 0x38),
        x(std::size_t(kT * kH)) {
    for (std::size_t i = 0; i < w13.size(); ++i) w13[i] = uint8_t(i * 37 + 11);
    for (std::size_t i = 0; i < w2.size(); ++i) w2[i] = uint8_t(i * 53 + 5);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = bfloat16{float_to_bf16(float(i % 7) - 3.0f)};
    ExpertsSource s;
    s.w13 = make_view<const uint8_t>(w13.data(), kE, 2 * kI, kH / 2);
    s.w13_scale = make_view<const uint8_t>(s13.data(), kE, 2 * kI, kH / 16);
    s.w2 = make_view<const uint8_t>(w2.data(), kE, kH, kI / 2);
    s.w2_scale = make_view<const uint8_t>(s2.data(), kE, kH, kI / 16);
    if (!prepare_experts(s, &experts, {}).ok()) std::abort();
  }
};
std::function<Outcome()> moe_call(std::function<void(FusedExpertsArgs&, MoeFixture&)> edit) {
  return [=] {
    MoeFixture f;
    std::vector<bfloat16> y(std::size_t(MoeFixture::kT * MoeFixture::kH), bfloat16{0xA5A5});
    const std::vector<bfloat16> before = y;
    FusedExpertsArgs a;
    a.x = make_view<const bfloat16>(f.x.data(), MoeFixture::kT, MoeFixture::kH);
    a.topk_ids = make_view<const int32_t>(f.ids.data(), MoeFixture::kT, MoeFixture::kK);
    a.topk_weights = make_view<const float>(f.weights.data(), MoeFixture::kT, MoeFixture::kK);
    a.experts = &f.experts;
    a.y = make_view(y.data(), MoeFixture::kT, MoeFixture::kH);
    edit(a, f);
    Outcome o{fused_experts(a, {}), true};
    o.unchanged = std::memcmp(y.data(), before.data(), y.size() * sizeof(bfloat16)) == 0;
    return o;
  };
}

// Sparse MLA attention on a small problem (T = 3, H = 2, d_v = 128, d_rope = 32, 8 slots,
// top_k = 4, bf16 cache, topk_length and lse given) after `edit` changes the call; out and lse
// (whose buffers are larger than any view a row makes of them) must keep their poison.
struct SparseMlaFixture {
  static constexpr int64_t kT = 3, kH = 2, kDv = 128, kDr = 32, kDqk = kDv + kDr, kSlots = 8,
                           kTopK = 4;
  static constexpr int64_t kRow = sparse_mla_fp8_row_bytes(kDv, kDr);
  std::vector<bfloat16> q, kv;
  std::vector<uint8_t> kv8;
  std::vector<int32_t> indices{0, 7, -1, 3, 5, 5, 2, 1, -1, -1, -1, -1};
  std::vector<int32_t> length{4, 3, 0};
  SparseMlaFixture()
      : q(std::size_t(kT * kH * kDqk)),
        kv(std::size_t(kSlots * kDqk)),
        kv8(std::size_t(kSlots * kRow), 0x30) {
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = bfloat16{float_to_bf16(float(i % 5) - 2.0f)};
    for (std::size_t i = 0; i < kv.size(); ++i)
      kv[i] = bfloat16{float_to_bf16(float(i % 3) - 1.0f)};
  }
};
std::function<Outcome()> sparse_mla_call(
    std::function<void(SparseMlaArgs&, SparseMlaFixture&, std::vector<bfloat16>&,
                       std::vector<float>&)>
        edit) {
  return [=] {
    using F = SparseMlaFixture;
    F f;
    std::vector<bfloat16> out(std::size_t(F::kT * F::kH * F::kDqk), bfloat16{0xA5A5});
    std::vector<float> lse(std::size_t(F::kT * F::kH * F::kDqk));
    std::memset(lse.data(), 0xA5, lse.size() * sizeof(float));
    const std::vector<bfloat16> out_before = out;
    const std::vector<float> lse_before = lse;
    const std::vector<bfloat16> q_before = f.q, kv_before = f.kv;
    SparseMlaArgs a;
    a.q = make_view<const bfloat16>(f.q.data(), F::kT, F::kH, F::kDqk);
    a.kv = make_view<const bfloat16>(f.kv.data(), F::kSlots, F::kDqk);
    a.indices = make_view<const int32_t>(f.indices.data(), F::kT, F::kTopK);
    a.topk_length = make_view<const int32_t>(f.length.data(), F::kT);
    a.sm_scale = 0.125f;
    a.out = make_view(out.data(), F::kT, F::kH, F::kDv);
    a.lse = make_view(lse.data(), F::kT, F::kH);
    edit(a, f, out, lse);
    Outcome o{sparse_mla_attention(a, {}), true};
    // q and kv too: the aliasing rows point out or lse at them.
    o.unchanged = std::memcmp(out.data(), out_before.data(), out.size() * sizeof(bfloat16)) == 0 &&
                  std::memcmp(lse.data(), lse_before.data(), lse.size() * sizeof(float)) == 0 &&
                  std::memcmp(f.q.data(), q_before.data(), f.q.size() * sizeof(bfloat16)) == 0 &&
                  std::memcmp(f.kv.data(), kv_before.data(), f.kv.size() * sizeof(bfloat16)) == 0;
    return o;
  };
}

std::vector<BadInput> bad_inputs() {
  const char* ix = "mla_indexer_ragged_float8_paged";
  const char* ks = "indexer_k_store";
  const char* qp = "indexer_q_prepare";
  const char* qkv = "generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4";
  const char* qz = "quantize_dynamic_block_scaled";
  const char* rp = "fused_qk_rope_ragged";
  using RF = RopeFixture;
  auto ks_fe = [](int64_t max_seq_len, int64_t rope_dim,
                  std::function<void(IndexerFrontEnd&)> edit) {
    return [=](KStoreFixture& f) { return k_store_front_end(f, max_seq_len, rope_dim, edit); };
  };
  auto qp_fe = [](int64_t rope_dim, std::function<void(IndexerFrontEnd&)> edit) {
    return [=](QPrepareFixture& f) { return q_prepare_front_end(f, rope_dim, edit); };
  };
  auto keep = [](IndexerFrontEnd&) {};
  const char* sm = "sparse_mla_attention";
  using SA = SparseMlaArgs;
  using SF = SparseMlaFixture;
  auto sm_call = [](auto edit) {
    return sparse_mla_call([edit](SA& a, SF& f, std::vector<bfloat16>& out,
                                  std::vector<float>& lse) { edit(a, f, out, lse); });
  };
  const char* ixe = "mla_indexer_ragged_float8_paged (engine layout)";
  const char* kse = "indexer_k_store (engine layout)";
  using EF = EngineIndexerFixture;
  using EK = EngineKStoreFixture;
  using IF = IndexerFixture;
  using KF = KStoreFixture;
  using PF = QPrepareFixture;
  using QF = QkvFixture;
  using ZF = QuantizeFixture;
  std::vector<BadInput> rows = {
      // ------------------------------------------------------------- indexer
      {ix, "q", "H = 0 heads", kInvalid, "q: expected H", indexer_views([](IF& f, IndexerViews& v) { v.q.shape[1] = 0; v.q.strides = contiguous_strides<3>(v.q.shape); v.qs.shape[1] = 0; })},
      {ix, "q", "D = 24, not a multiple of 16", kInvalid, "q: expected head dim D", indexer_views([](IF& f, IndexerViews& v) { v.q.shape[2] = 24; v.q.strides = contiguous_strides<3>(v.q.shape); })},
      {ix, "q", "D dimension with stride 2", kInvalid, "q: expected the D dimension to be contiguous", indexer_views([](IF& f, IndexerViews& v) { v.q.strides = {2 * 64, 64, 2}; })},
      {ix, "q", "null data", kInvalid, "q: data pointer is null", indexer_views([](IF& f, IndexerViews& v) { v.q.data = nullptr; })},
      {ix, "q", "negative stride", kInvalid, "q: negative stride", indexer_views([](IF& f, IndexerViews& v) { v.q.strides[0] = -64; })},
      {ix, "q", "T = 4 rows, input_row_offsets[B] = 3", kInvalid, "input_row_offsets: expected input_row_offsets[B] == 4", indexer_views([](IF& f, IndexerViews& v) { v.q.shape[0] = 4; v.qs.shape[0] = 4; v.out.shape[0] = 4; })},
      {ix, "q_s", "shape [T, H + 1]", kInvalid, "q_s: expected shape", indexer_views([](IF& f, IndexerViews& v) { v.qs.shape[1] = 3; v.qs.strides = {3, 1}; })},
      {ix, "q_s", "shape [T + 1, H]", kInvalid, "q_s: expected shape", indexer_views([](IF& f, IndexerViews& v) { v.qs.shape[0] = 4; })},
      {ix, "q_s", "null data", kInvalid, "q_s: data pointer is null", indexer_views([](IF& f, IndexerViews& v) { v.qs.data = nullptr; })},
      {ix, "output_indices", "top_k = 0", kInvalid, "output_indices: expected top_k", indexer_views([](IF& f, IndexerViews& v) { v.out.shape[1] = 0; })},
      {ix, "output_indices", "shape [T - 1, top_k]", kInvalid, "output_indices: expected shape", indexer_views([](IF& f, IndexerViews& v) { v.out.shape[0] = 2; })},
      {ix, "output_indices", "top_k dimension with stride 2", kInvalid, "output_indices: expected the top_k dimension to be contiguous", indexer_views([](IF& f, IndexerViews& v) { v.out.strides = {8, 2}; })},
      {ix, "output_indices", "null data", kInvalid, "output_indices: data pointer is null", indexer_views([](IF& f, IndexerViews& v) { v.out.data = nullptr; })},
      {ix, "input_row_offsets", "shape [B] instead of [B + 1]", kInvalid, "input_row_offsets: expected shape", indexer_views([](IF& f, IndexerViews& v) { v.offs.shape[0] = 2; })},
      {ix, "input_row_offsets", "offs[0] = 1", kInvalid, "input_row_offsets: expected input_row_offsets[0] == 0", indexer_views([](IF& f, IndexerViews& v) { f.offs[0] = 1; })},
      {ix, "input_row_offsets", "decreasing: {0, 2, 1}", kInvalid, "expected non-decreasing offsets", indexer_views([](IF& f, IndexerViews& v) { f.offs[2] = 1; })},
      {ix, "input_row_offsets", "null data", kInvalid, "input_row_offsets: data pointer is null", indexer_views([](IF& f, IndexerViews& v) { v.offs.data = nullptr; })},
      {ix, "k_collection.dtype", "bfloat16 instead of float8_e4m3fn", kInvalid, "k_collection.dtype: expected float8_e4m3fn", with<IF>([](IF& f) { f.kc.dtype = DType::kBF16; })},
      {ix, "k_collection.num_heads", "2 heads of D / 2", kInvalid, "k_collection.num_heads: expected 1", with<IF>([](IF& f) { f.kc.num_heads = 2; f.kc.head_size = 16; })},
      {ix, "k_collection.head_size", "64 while D = 32", kInvalid, "k_collection.head_size: expected D", with<IF>([](IF& f) { f.kc.head_size = 64; })},
      {ix, "k_collection.scales", "null (no per-token scales)", kInvalid, "k_collection.scales", with<IF>([](IF& f) { f.kc.scales = nullptr; })},
      {ix, "k_collection.scale_granularity", "16 < D = 32 (two scales per token)", kInvalid, "k_collection.scale_granularity: expected >= head_size", with<IF>([](IF& f) { f.kc.scale_granularity = 16; })},
      {ix, "k_collection.blocks", "null", kInvalid, "k_collection.blocks: data pointer is null", with<IF>([](IF& f) { f.kc.blocks = nullptr; })},
      {ix, "k_collection.num_blocks", "0", kInvalid, "k_collection.num_blocks: expected >= 1", with<IF>([](IF& f) { f.kc.num_blocks = 0; })},
      {ix, "k_collection.kv_dim", "3", kInvalid, "k_collection.kv_dim: expected 1 or 2", with<IF>([](IF& f) { f.kc.kv_dim = 3; })},
      {ix, "k_collection.page_size", "0", kInvalid, "k_collection.page_size: expected >= 1", with<IF>([](IF& f) { f.kc.page_size = 0; })},
      {ix, "k_collection.lookup_table", "B + 1 rows", kInvalid, "k_collection.lookup_table: expected shape", with<IF>([](IF& f) { f.kc.lookup_table.shape[0] = 3; })},
      {ix, "k_collection.lookup_table", "a needed page is the sentinel num_blocks", kRange, "k_collection.lookup_table: sequence 0 page entry 1", with<IF>([](IF& f) { f.cache.raw_lookup_table()[1] = uint32_t(f.kc.num_blocks); })},
      {ix, "k_collection.lookup_table", "a needed page id far beyond num_blocks", kRange, "expected < num_blocks", with<IF>([](IF& f) { f.cache.raw_lookup_table()[0] = 0xFFFFFFF0u; })},
      {ix, "k_collection.cache_lengths", "cache_len + seq_len exceeds the lookup table", kRange, "k_collection.cache_lengths: sequence 1 needs", with<IF>([](IF& f) { f.cache.raw_cache_lengths()[1] = 100; })},
      {ix, "k_collection.cache_lengths", "0xFFFFFFFF (uint32 wrap-around)", kRange, "k_collection.cache_lengths: sequence 0 needs", with<IF>([](IF& f) { f.cache.raw_cache_lengths()[0] = 0xFFFFFFFFu; })},
      {ix, "layer_idx", "= num_layers", kRange, "layer_idx: expected < k_collection.num_layers = 2, got 2", with<IF>([](IF& f) { f.layer = 2; })},
      {ix, "layer_idx", "0xFFFFFFFF", kRange, "layer_idx: expected < k_collection.num_layers", with<IF>([](IF& f) { f.layer = 0xFFFFFFFFu; })},
      {ix, "mask", "MaskType(7)", kInvalid, "mask: expected", with<IF>([](IF& f) { f.mask = MaskType(7); })},
      {ix, "ctx.scores_budget_bytes", "1 KiB: too small for one row and the scratch", kBudget, "ctx.scores_budget_bytes: expected at least", with<IF>([](IF&) {}, nullptr, [](IF& f) { Context c; c.scores_budget_bytes = 1024; return f.run(c); })},
      {ix, "ctx.scores_budget_bytes", "0", kBudget, "ctx.scores_budget_bytes: expected at least", with<IF>([](IF&) {}, nullptr, [](IF& f) { Context c; c.scores_budget_bytes = 0; return f.run(c); })},
      // Edges (issue 15): sizes that overflow, outputs that overlap themselves or an input.
      {ix, "output_indices", "null data, shape [T, 2^62]: the element count overflows int64", kInvalid, "output_indices: the element count of shape [3, 4611686018427387904] overflows int64", indexer_views([](IF&, IndexerViews& v) { v.out = {nullptr, {3, k2Pow62}, {k2Pow62, 1}}; })},
      {ix, "q", "row stride 2^62: (T - 1) * stride overflows int64", kInvalid, "q: shape [3, 2, 32] with strides [4611686018427387904, 32, 1] spans more than 2^63-1 bytes", indexer_views([](IF&, IndexerViews& v) { v.q.strides[0] = k2Pow62; })},
      {ix, "q_s", "row stride 2^61 (the span fits int64 elements, not bytes)", kInvalid, "q_s: shape [3, 2] with strides", indexer_views([](IF&, IndexerViews& v) { v.qs.strides[0] = int64_t(1) << 61; })},
      {ix, "output_indices", "row stride 0: every row writes the same memory", kInvalid, "output_indices: elements overlap (dimension 0 has stride 0", indexer_views([](IF&, IndexerViews& v) { v.out.strides = {0, 1}; })},
      {ix, "output_indices", "row stride 2 < top_k = 4: rows overlap", kInvalid, "output_indices: elements overlap (dimension 0 has stride 2", indexer_views([](IF&, IndexerViews& v) { v.out.strides = {2, 1}; })},
      {ix, "output_indices", "overlaps q", kInvalid, "output_indices: overlaps q in memory", indexer_views([](IF& f, IndexerViews& v) { v.out.data = reinterpret_cast<int32_t*>(f.q.data()); })},
      {ix, "output_indices", "overlaps k_collection.lookup_table", kInvalid, "output_indices: overlaps k_collection.lookup_table", indexer_views([](IF& f, IndexerViews& v) { v.out.data = const_cast<int32_t*>(reinterpret_cast<const int32_t*>(f.kc.lookup_table.data)) - 1; })},
      {ix, "output_indices", "overlaps k_collection.scales", kInvalid, "output_indices: overlaps k_collection.scales", indexer_views([](IF& f, IndexerViews& v) { v.out.data = reinterpret_cast<int32_t*>(f.kc.scales) + 2; })},
      {ix, "k_collection.num_layers", "2^40: the blocks' byte size overflows int64", kInvalid, "k_collection: num_blocks * kv_dim * num_layers * page_size * num_heads * head_size", with<IF>([](IF& f) { f.kc.num_layers = int64_t(1) << 40; f.kc.num_blocks = 0xFFFFFFFF; })},
      {ix, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", with<IF>([](IF&) {}, nullptr, [](IF& f) { Context c; c.num_threads = -1; return f.run(c); })},
      // A negative thread count is rejected by every op that takes a Context (checked once, at the entry point).
      {ks, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<KF>()},
      {qp, "ctx.num_threads", "-2", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<PF>(-2)},
      {qz, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<ZF>()},
      {qkv, "ctx.num_threads", "INT_MIN", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<QF>(INT32_MIN)},
      {rp, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<RF>()},
      {ixe, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<EF>()},
      {kse, "ctx.num_threads", "-1", kInvalid, "ctx.num_threads: expected >= 0", negative_threads<EK>()},
      // ------------------------------------------------------------- indexer K store
      {ks, "k", "D = 16 while head_size = 32", kInvalid, "k: expected D", with<KF>([](KF&) {}, nullptr, [](KF& f) { return indexer_k_store(make_view<const float>(f.k.data(), f.T(), int64_t(16)), f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k", "T + 1 rows", kInvalid, "input_row_offsets: expected input_row_offsets[B] == 4", with<KF>([](KF& f) { f.k.resize(f.k.size() + 32); }, nullptr, [](KF& f) { return indexer_k_store(make_view<const float>(f.k.data(), f.T() + 1, f.D), f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k", "null data", kInvalid, "k: data pointer is null", with<KF>([](KF&) {}, nullptr, [](KF& f) { return indexer_k_store(make_view<const float>(nullptr, f.T(), f.D), f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k", "negative stride", kInvalid, "k: negative stride", with<KF>([](KF&) {}, nullptr, [](KF& f) { auto v = f.k_view(); v.strides[0] = -32; return indexer_k_store(v, f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k (bfloat16)", "null data", kInvalid, "k: data pointer is null", with<KF>([](KF&) {}, nullptr, [](KF& f) { return indexer_k_store(make_view<const bfloat16>(nullptr, f.T(), f.D), f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k_collection.dtype", "float32", kInvalid, "k_collection.dtype: expected float8_e4m3fn", with<KF>([](KF& f) { f.kc.dtype = DType::kF32; })},
      {ks, "k_collection.num_heads", "2", kInvalid, "k_collection.num_heads: expected 1", with<KF>([](KF& f) { f.kc.num_heads = 2; f.kc.head_size = 16; })},
      {ks, "k_collection.scales", "null", kInvalid, "k_collection.scales", with<KF>([](KF& f) { f.kc.scales = nullptr; })},
      {ks, "k_collection.scale_granularity", "16 < D = 32", kInvalid, "k_collection.scale_granularity: expected >= head_size", with<KF>([](KF& f) { f.kc.scale_granularity = 16; })},
      {ks, "k_collection.lookup_table", "a needed page is the sentinel", kRange, "k_collection.lookup_table: sequence 1", with<KF>([](KF& f) { f.cache.raw_lookup_table()[f.kc.max_pages_per_seq() + 1] = uint32_t(f.kc.num_blocks); })},
      {ks, "k_collection.cache_lengths", "cache_len + seq_len exceeds the lookup table", kRange, "k_collection.cache_lengths: sequence 0 needs", with<KF>([](KF& f) { f.cache.raw_cache_lengths()[0] = 7; })},
      {ks, "layer_idx", "= num_layers", kRange, "layer_idx: expected < k_collection.num_layers", with<KF>([](KF& f) { f.layer = 2; })},
      {ks, "scale_mode", "ScaleMode(5)", kInvalid, "scale_mode: expected", with<KF>([](KF& f) { f.mode = ScaleMode(5); })},
      {ks, "k", "overlaps k_collection.blocks (written)", kInvalid, "k_collection.blocks: overlaps k in memory", with<KF>([](KF&) {}, nullptr, [](KF& f) { return indexer_k_store(make_view<const float>(reinterpret_cast<const float*>(f.cache.raw_blocks().data()), f.T(), f.D), f.offs_view(), f.kc, f.layer, f.mode, {}); })},
      {ks, "k_collection.scales", "overlaps k_collection.blocks", kInvalid, "k_collection.blocks: overlaps k_collection.scales", with<KF>([](KF& f) { f.kc.scales = reinterpret_cast<float*>(f.cache.raw_blocks().data()); })},
      {ks, "input_row_offsets", "decreasing: {0, 2, 1}", kInvalid, "expected non-decreasing offsets", with<KF>([](KF& f) { f.offs[2] = 1; })},
      // ------------------------------------------------------------- indexer Q prepare
      {qp, "q", "H = 0", kInvalid, "q: expected H >= 1 and D >= 1", with<PF>([](PF& f) { f.H = 0; })},
      {qp, "q", "null data", kInvalid, "q: data pointer is null", with<PF>([](PF&) {}, nullptr, [](PF& f) { return indexer_q_prepare(make_view<const float>(nullptr, f.T, f.H, f.D), f.w_view(), f.q8_view(), f.qs_view(), f.mode, {}); })},
      {qp, "weights", "shape [T, H + 1]", kInvalid, "weights: expected shape", with<PF>([](PF& f) { f.w.resize(f.w.size() + 8); }, nullptr, [](PF& f) { return indexer_q_prepare(f.q_view(), make_view<const float>(f.w.data(), f.T, f.H + 1), f.q8_view(), f.qs_view(), f.mode, {}); })},
      {qp, "q_fp8", "shape [T, H, D + 1]", kInvalid, "q_fp8: expected shape", with<PF>([](PF& f) { f.q8.resize(f.q8.size() + 8); }, nullptr, [](PF& f) { return indexer_q_prepare(f.q_view(), f.w_view(), make_view(f.q8.data(), f.T, f.H, f.D + 1), f.qs_view(), f.mode, {}); })},
      {qp, "q_fp8", "D dimension with stride 2", kInvalid, "q_fp8: expected the D dimension to be contiguous", with<PF>([](PF& f) { f.q8.resize(f.q8.size() * 2); }, nullptr, [](PF& f) { auto v = f.q8_view(); v.strides = {2 * f.H * f.D, 2 * f.D, 2}; return indexer_q_prepare(f.q_view(), f.w_view(), v, f.qs_view(), f.mode, {}); })},
      {qp, "q_s", "shape [T + 1, H]", kInvalid, "q_s: expected shape", with<PF>([](PF& f) { f.q_s.resize(f.q_s.size() + 8); }, nullptr, [](PF& f) { return indexer_q_prepare(f.q_view(), f.w_view(), f.q8_view(), make_view(f.q_s.data(), f.T + 1, f.H), f.mode, {}); })},
      {qp, "q_s", "overlaps q_fp8", kInvalid, "q_fp8: overlaps q_s in memory", with<PF>([](PF&) {}, nullptr, [](PF& f) { return indexer_q_prepare(f.q_view(), f.w_view(), f.q8_view(), make_view(reinterpret_cast<float*>(f.q8.data()), f.T, f.H), f.mode, {}); })},
      {qp, "q_fp8", "H stride 0: the heads of a token overwrite each other", kInvalid, "q_fp8: elements overlap", with<PF>([](PF&) {}, nullptr, [](PF& f) { auto v = f.q8_view(); v.strides[1] = 0; return indexer_q_prepare(f.q_view(), f.w_view(), v, f.qs_view(), f.mode, {}); })},
      {qp, "scale_mode", "ScaleMode(-1)", kInvalid, "scale_mode: expected", with<PF>([](PF& f) { f.mode = ScaleMode(-1); })},
      // ------------------------------------------------------------- fused QKV
      {qkv, "format", "BlockFormat(9)", kInvalid, "format: expected NVFP4, MXFP4 or MXFP8", with<QF>([](QF&) {}, nullptr, [](QF& f) { f.format = BlockFormat(9); return f.run(); })},
      {qkv, "weight", "K = 40: not a multiple of SF_VECTOR_SIZE = 16 (NVFP4)", kInvalid, "weight: expected K", with<QF>([](QF& f) { f.K = 40; }, [](QF& f) { f.K = 48; }, [](QF& f) { return f.run(); })},
      {qkv, "weight", "K = 48: not a multiple of SF_VECTOR_SIZE = 32 (MXFP4)", kInvalid, "SF_VECTOR_SIZE = 32", with<QF>([](QF& f) { f.K = 48; }, [](QF& f) { f.format = BlockFormat::kMXFP4; })},
      {qkv, "weight", "N = q_dim + 2 * kv_width + 1 rows", kInvalid, "weight: expected N", with<QF>([](QF& f) { f.weight.resize(f.weight.size() + 64); f.weight_scale.resize(f.weight_scale.size() * 2); }, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), make_view<const uint8_t>(f.weight.data(), f.N() + 1, f.K / 2), f.input_scale_view(), make_view<const uint8_t, 5>(f.weight_scale.data(), swizzled_scale_shape(f.N() + 1, f.kb())), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "weight", "null data", kInvalid, "weight: data pointer is null", with<QF>([](QF&) {}, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), make_view<const uint8_t>(nullptr, f.N(), f.K / 2), f.input_scale_view(), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "hidden_state", "K / 2 + 8 bytes per row while the weight has K / 2", kInvalid, "hidden_state: expected 32 bytes per row", with<QF>([](QF& f) { f.hidden.resize(f.hidden.size() * 2); }, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(make_view<const uint8_t>(f.hidden.data(), f.M(), f.K / 2 + 8), f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "hidden_state", "row stride 2 (bytes not contiguous)", kInvalid, "hidden_state: expected unit stride", with<QF>([](QF& f) { f.hidden.resize(f.hidden.size() * 2); }, nullptr, [](QF& f) { auto v = f.hidden_view(); v.strides = {64, 2}; return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(v, f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "input_scale", "5-D shape for Kb + 4 scale columns", kInvalid, "input_scale: expected shape", with<QF>([](QF& f) { f.input_scale.resize(f.input_scale.size() * 2); }, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), f.weight_view(), make_view<const uint8_t, 5>(f.input_scale.data(), swizzled_scale_shape(f.M(), f.kb() + 4)), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "weight_scale", "5-D shape for 256 rows", kInvalid, "weight_scale: expected shape", with<QF>([](QF& f) { f.weight_scale.resize(f.weight_scale.size() * 2); }, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), f.weight_view(), f.input_scale_view(), make_view<const uint8_t, 5>(f.weight_scale.data(), swizzled_scale_shape(256, f.kb())), f.tensor_sf, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "output", "shape [M + 1, q_dim]", kInvalid, "output: expected shape", with<QF>([](QF& f) { f.out.resize(f.out.size() + 8); }, nullptr, [](QF& f) { return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, make_view(f.out.data(), f.M() + 1, f.q_dim), f.format, {}); })},
      {qkv, "output", "column stride 2", kInvalid, "output: expected unit stride", with<QF>([](QF& f) { f.out.resize(f.out.size() * 2); }, nullptr, [](QF& f) { auto v = f.out_view(); v.strides = {16, 2}; return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(), f.tensor_sf, f.kv, f.layer, v, f.format, {}); })},
      {qkv, "output", "row stride 0: every row writes the same memory", kInvalid, "output: elements overlap (dimension 0 has stride 0", with<QF>([](QF&) {}, nullptr, [](QF& f) { auto v = f.out_view(); v.strides[0] = 0; return run_qkv(f, f.hidden_view(), v); })},
      {qkv, "output", "over the cache blocks (K/V are written there too)", kInvalid, "output: overlaps kv_collection.blocks in memory", with<QF>([](QF&) {}, nullptr, [](QF& f) { return run_qkv(f, f.hidden_view(), make_view(reinterpret_cast<bfloat16*>(f.cache.raw_blocks().data()), f.M(), f.q_dim)); })},
      {qkv, "output", "overlaps hidden_state", kInvalid, "output: overlaps hidden_state in memory", with<QF>([](QF&) {}, nullptr, [](QF& f) { return run_qkv(f, f.hidden_view(), make_view(reinterpret_cast<bfloat16*>(f.hidden.data()), f.M(), f.q_dim)); })},
      {qkv, "output", "overlaps weight", kInvalid, "output: overlaps weight in memory", with<QF>([](QF&) {}, nullptr, [](QF& f) { return run_qkv(f, f.hidden_view(), make_view(reinterpret_cast<bfloat16*>(f.weight.data()), f.M(), f.q_dim)); })},
      {qkv, "hidden_state", "row stride 2^62: (M - 1) * stride overflows int64", kInvalid, "hidden_state: shape [3, 32] with strides [4611686018427387904, 1] spans more than", with<QF>([](QF&) {}, nullptr, [](QF& f) { auto v = f.hidden_view(); v.strides[0] = k2Pow62; return run_qkv(f, v, f.out_view()); })},
      {qkv, "kv_collection.head_size", "2^62 (N and the blocks' size overflow)", kInvalid, "kv_collection: num_blocks * kv_dim", with<QF>([](QF& f) { f.kv.head_size = k2Pow62; })},
      {qkv, "tensor_sf", "NaN", kInvalid, "tensor_sf: expected a finite GEMM factor", with<QF>([](QF& f) { f.tensor_sf = kNaN; })},
      {qkv, "tensor_sf", "+inf", kInvalid, "tensor_sf: expected a finite GEMM factor", with<QF>([](QF& f) { f.tensor_sf = kInf; })},
      {qkv, "tensor_sf", "0.5 with MXFP8 (must be 1)", kInvalid, "tensor_sf: MXFP8", with<QF>([](QF& f) { f.tensor_sf = 0.5f; }, [](QF& f) { f.format = BlockFormat::kMXFP8; })},
      {qkv, "section_sf.k", "NaN", kInvalid, "section_sf.k: expected a finite GEMM factor", with<QF>([](QF&) {}, nullptr, [](QF& f) { SectionScales s; s.k = kNaN; return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(f.hidden_view(), f.offs_view(), f.weight_view(), f.input_scale_view(), f.weight_scale_view(), s, f.kv, f.layer, f.out_view(), f.format, {}); })},
      {qkv, "kv_collection.scales", "a cache with a scales tensor", kInvalid, "kv_collection.scales: expected a cache without a scales tensor", with<QF>([](QF& f) { static float s[1]; f.kv.scales = s; f.kv.scale_granularity = 8; })},
      {qkv, "kv_collection.kv_dim", "1 while the weight has K and V columns", kInvalid, "weight: expected N", with<QF>([](QF& f) { f.kv.kv_dim = 1; })},
      {qkv, "kv_collection.head_size", "16 while the weight has 8 per head", kInvalid, "weight: expected N", with<QF>([](QF& f) { f.kv.head_size = 16; })},
      {qkv, "kv_collection.num_layers", "0", kInvalid, "kv_collection.num_layers: expected >= 1", with<QF>([](QF& f) { f.kv.num_layers = 0; })},
      {qkv, "kv_collection.cache_lengths", "cache_len + seq_len exceeds the lookup table", kRange, "kv_collection.cache_lengths: sequence 1 needs", with<QF>([](QF& f) { f.cache.raw_cache_lengths()[1] = 8; })},
      {qkv, "layer_idx", "= num_layers", kRange, "layer_idx: expected < num_layers", with<QF>([](QF& f) { f.layer = 2; })},
      {qkv, "input_row_offsets", "offs[B] = M + 1", kInvalid, "input_row_offsets: expected input_row_offsets[B] == 3", with<QF>([](QF& f) { f.offs[2] = 4; })},
      // ------------------------------------------------------------- quantize
      {qz, "format", "BlockFormat(3)", kInvalid, "format: expected NVFP4, MXFP4 or MXFP8", with<ZF>([](ZF& f) { f.format = BlockFormat(3); })},
      {qz, "x", "K = 40: not a multiple of SF_VECTOR_SIZE = 16", kInvalid, "x: expected K to be a multiple of SF_VECTOR_SIZE = 16", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(make_view<const float>(f.x.data(), f.M, int64_t(40)), f.global_scale, f.format, make_view(f.data.data(), f.M, int64_t(20)), f.scales_view(), {}); })},
      {qz, "x", "null data", kInvalid, "x: data pointer is null", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(make_view<const float>(nullptr, f.M, f.K), f.global_scale, f.format, f.data_view(), f.scales_view(), {}); })},
      {qz, "x (bfloat16)", "null data", kInvalid, "x: data pointer is null", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(make_view<const bfloat16>(nullptr, f.M, f.K), f.global_scale, f.format, f.data_view(), f.scales_view(), {}); })},
      {qz, "global_scale", "0 (NVFP4)", kInvalid, "global_scale: expected a finite g", with<ZF>([](ZF& f) { f.global_scale = 0.0f; })},
      {qz, "global_scale", "-1 (NVFP4)", kInvalid, "global_scale: expected a finite g", with<ZF>([](ZF& f) { f.global_scale = -1.0f; })},
      {qz, "global_scale", "NaN (NVFP4)", kInvalid, "global_scale: expected a finite g", with<ZF>([](ZF& f) { f.global_scale = kNaN; })},
      {qz, "global_scale", "+inf (NVFP4)", kInvalid, "global_scale: expected a finite g", with<ZF>([](ZF& f) { f.global_scale = kInf; })},
      {qz, "data", "shape [M, K] for NVFP4 (expects K / 2 bytes)", kInvalid, "data: expected shape", with<ZF>([](ZF& f) { f.data.resize(f.data.size() * 2); }, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(f.x_view(), f.global_scale, f.format, make_view(f.data.data(), f.M, f.K), f.scales_view(), {}); })},
      {qz, "data", "column stride 2", kInvalid, "data: expected unit stride", with<ZF>([](ZF& f) { f.data.resize(f.data.size() * 2); }, nullptr, [](ZF& f) { auto v = f.data_view(); v.strides = {64, 2}; return quantize_dynamic_block_scaled(f.x_view(), f.global_scale, f.format, v, f.scales_view(), {}); })},
      {qz, "scales", "5-D shape of MXFP4 (Kb = 2) for NVFP4 (Kb = 4)", kInvalid, "scales: expected shape", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(f.x_view(), f.global_scale, f.format, f.data_view(), make_view<uint8_t, 5>(f.scales.data(), {1, 2, 32, 4, 4}), {}); })},
      {qz, "data", "overlaps x", kInvalid, "data: overlaps x in memory", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(f.x_view(), f.global_scale, f.format, make_view(reinterpret_cast<uint8_t*>(f.x.data()), f.M, row_bytes(f.format, f.K)), f.scales_view(), {}); })},
      {qz, "x", "shape [2^40, 2^40]: the element count overflows int64", kInvalid, "x: the element count of shape [1099511627776, 1099511627776] overflows int64", with<ZF>([](ZF&) {}, nullptr, [](ZF& f) { return quantize_dynamic_block_scaled(make_view<const float>(f.x.data(), int64_t(1) << 40, int64_t(1) << 40), f.global_scale, f.format, f.data_view(), f.scales_view(), {}); })},
      {qz, "scales", "innermost stride 2", kInvalid, "scales: expected a contiguous row-major tensor", with<ZF>([](ZF& f) { f.scales.resize(f.scales.size() * 2); }, nullptr, [](ZF& f) { auto v = f.scales_view(); v.strides = {1024, 1024, 32, 8, 2}; return quantize_dynamic_block_scaled(f.x_view(), f.global_scale, f.format, f.data_view(), v, {}); })},
      // ------------------------------------------------------------- scale layout converters
      {"linear_to_swizzled_scales", "swizzled", "shape for 256 rows while linear has 3", kInvalid, "swizzled: expected shape", [] {
         std::vector<uint8_t> lin(12, 1), swz(2048, 0xA5);
         const auto before = swz;
         Outcome o{linear_to_swizzled_scales(make_view<const uint8_t>(lin.data(), 3, 4), make_view<uint8_t, 5>(swz.data(), swizzled_scale_shape(256, 4))), true};
         o.unchanged = swz == before;
         return o; }},
      {"linear_to_swizzled_scales", "swizzled", "innermost stride 2", kInvalid, "swizzled: expected a contiguous row-major tensor", [] {
         std::vector<uint8_t> lin(12, 1), swz(1024, 0xA5);
         const auto before = swz;
         auto v = make_view<uint8_t, 5>(swz.data(), swizzled_scale_shape(3, 4));
         v.strides = {1024, 1024, 32, 8, 2};
         Outcome o{linear_to_swizzled_scales(make_view<const uint8_t>(lin.data(), 3, 4), v), true};
         o.unchanged = swz == before;
         return o; }},
      {"linear_to_swizzled_scales", "linear", "null data", kInvalid, "linear: data pointer is null", [] {
         std::vector<uint8_t> swz(512, 0xA5);
         const auto before = swz;
         Outcome o{linear_to_swizzled_scales(make_view<const uint8_t>(nullptr, 3, 4), make_view<uint8_t, 5>(swz.data(), swizzled_scale_shape(3, 4))), true};
         o.unchanged = swz == before;
         return o; }},
      {"swizzled_to_linear_scales", "linear", "negative stride", kInvalid, "linear: negative stride", [] {
         std::vector<uint8_t> lin(12, 0xA5), swz(512, 1);
         const auto before = lin;
         auto v = make_view(lin.data(), 3, 4);
         v.strides[0] = -4;
         Outcome o{swizzled_to_linear_scales(make_view<const uint8_t, 5>(swz.data(), swizzled_scale_shape(3, 4)), v), true};
         o.unchanged = lin == before;
         return o; }},
      // ------------------------------------------------------------- owning cache
      {"PagedKVCache::create", "config.max_pages_per_seq", "0", kInvalid, "config.max_pages_per_seq: expected >= 1", [] {
         PagedKVCacheConfig c; c.num_blocks = 4; c.max_pages_per_seq = 0; PagedKVCache p;
         return Outcome{PagedKVCache::create(c, 1, &p), true}; }},
      {"PagedKVCache::create", "config.head_size", "0", kInvalid, "config.head_size: expected >= 1", [] {
         PagedKVCacheConfig c; c.num_blocks = 4; c.head_size = 0; PagedKVCache p;
         return Outcome{PagedKVCache::create(c, 1, &p), true}; }},
      {"PagedKVCache::create", "config.head_size", "2^40 with 2^32-1 blocks: the byte size overflows int64", kInvalid, "config: num_blocks * kv_dim * num_layers * page_size * num_heads * head_size", [] {
         return create_with([](PagedKVCacheConfig& c) { c.num_blocks = 0xFFFFFFFF; c.head_size = int64_t(1) << 40; }); }},
      {"PagedKVCache::create", "config.scale_granularity", "1 with 2^61 elements of float32 scales (bytes overflow)", kInvalid, "elements (or their scales) do not fit", [] {
         return create_with([](PagedKVCacheConfig& c) { c.dtype = DType::kE4M3; c.num_blocks = 1; c.page_size = int64_t(1) << 31; c.head_size = int64_t(1) << 30; c.scale_granularity = 1; }); }},
      {"PagedKVCache::create", "config.max_pages_per_seq", "2^62 with batch_size 4: the table's size overflows", kInvalid, "config: batch_size * max_pages_per_seq", [] {
         return create_with([](PagedKVCacheConfig& c) { c.batch_size = 4; c.max_pages_per_seq = k2Pow62; }); }},
      {"PagedKVCache::reserve", "num_positions", "INT64_MAX (the page count must not wrap)", kRange, "num_positions: 9223372036854775807 needs", [] {
         PagedKVCacheConfig c; c.num_blocks = 4; c.page_size = 4; c.max_pages_per_seq = 2; PagedKVCache p;
         if (!PagedKVCache::create(c, 1, &p).ok()) std::abort();
         const auto table = p.raw_lookup_table();
         Outcome o{p.reserve(0, INT64_MAX), true};
         o.unchanged = p.raw_lookup_table() == table && p.free_pages() == 4;
         return o; }},
      {"PagedKVCache::reserve", "num_positions", "more than the lookup table holds", kRange, "num_positions: 100 needs", [] {
         PagedKVCacheConfig c; c.num_blocks = 4; c.page_size = 4; c.max_pages_per_seq = 2; PagedKVCache p;
         if (!PagedKVCache::create(c, 1, &p).ok()) std::abort();
         const auto table = p.raw_lookup_table();
         Outcome o{p.reserve(0, 100), true};
         o.unchanged = p.raw_lookup_table() == table && p.free_pages() == 4;
         return o; }},
      {"PagedKVCache::reserve", "num_positions", "more pages than are free", kBudget, "more pages needed", [] {
         PagedKVCacheConfig c; c.num_blocks = 1; c.page_size = 4; c.max_pages_per_seq = 2; PagedKVCache p;
         if (!PagedKVCache::create(c, 1, &p).ok()) std::abort();
         const auto table = p.raw_lookup_table();
         Outcome o{p.reserve(0, 8), true};
         o.unchanged = p.raw_lookup_table() == table && p.free_pages() == 1;  // no partial reservation
         return o; }},
      {"PagedKVCache::set_cache_length", "length", "beyond the reserved positions", kRange, "length: 5 exceeds the 4 reserved positions", [] {
         PagedKVCacheConfig c; c.num_blocks = 4; c.page_size = 4; c.max_pages_per_seq = 2; PagedKVCache p;
         if (!PagedKVCache::create(c, 1, &p).ok() || !p.reserve(0, 3).ok() || !p.set_cache_length(0, 2).ok()) std::abort();
         Outcome o{p.set_cache_length(0, 5), true};
         o.unchanged = p.cache_length(0) == 2;
         return o; }},
      // ------------------------------------------------------------- indexer front end
      {ks, "front_end.rope.freqs_cis", "rope_dim = 7 (odd)", kInvalid, "front_end.rope.freqs_cis: expected rope_dim = shape[1] even", with<KF>([](KF&) {}, nullptr, ks_fe(8, 7, keep))},
      {ks, "front_end.rope.freqs_cis", "rope_dim = 48 > D = 32", kInvalid, "even and in [2, 32]", with<KF>([](KF&) {}, nullptr, ks_fe(8, 48, keep))},
      {ks, "front_end.rope.freqs_cis", "5 rows; sequence 1 reaches position 5", kRange, "front_end.rope.freqs_cis: sequence 1 reaches position 5", with<KF>([](KF&) {}, nullptr, ks_fe(5, 16, keep))},
      {ks, "front_end.rope.position_ids", "a position past the table", kRange, "front_end.rope.position_ids: position_ids[1] = 8", with<KF>([](KF&) {}, nullptr, [](KF& f) { std::vector<uint32_t> ids{0, 8, 1}; return k_store_front_end(f, 8, 16, [&](IndexerFrontEnd& fe) { fe.rope.position_ids = make_view<const uint32_t>(ids.data(), 3); }); })},
      {ks, "front_end.rope.layout", "RopeLayout(5)", kInvalid, "front_end.rope.layout: expected", with<KF>([](KF&) {}, nullptr, ks_fe(8, 16, [](IndexerFrontEnd& fe) { fe.rope.layout = RopeLayout(5); }))},
      {ks, "front_end.hadamard", "D = 24, not a power of two", kInvalid, "front_end.hadamard: the Walsh-Hadamard rotation needs", with<KF>([](KF&) {}, [](KF& f) { f.D = 24; }, ks_fe(8, 16, keep))},
      {qp, "front_end.rope.position_ids", "empty (the Q prepare sees no cache)", kInvalid, "front_end.rope.position_ids: expected shape", with<PF>([](PF&) {}, nullptr, qp_fe(16, [](IndexerFrontEnd& fe) { fe.rope.position_ids = {}; }))},
      {qp, "front_end.rope.freqs_cis", "rope_dim = 0", kInvalid, "front_end.rope.freqs_cis: expected rope_dim", with<PF>([](PF&) {}, nullptr, qp_fe(16, [](IndexerFrontEnd& fe) { fe.rope.freqs_cis.shape[1] = 0; }))},
      {qp, "front_end.rope.placement", "RopePlacement(2)", kInvalid, "front_end.rope.placement: expected", with<PF>([](PF&) {}, nullptr, qp_fe(16, [](IndexerFrontEnd& fe) { fe.rope.placement = RopePlacement(2); }))},
      {qp, "front_end.hadamard", "HadamardMode(3)", kInvalid, "front_end.hadamard: expected kNone or kWalshHadamard", with<PF>([](PF&) {}, nullptr, qp_fe(16, [](IndexerFrontEnd& fe) { fe.hadamard = HadamardMode(3); }))},
      {qp, "front_end.rounding", "FrontEndRounding(4)", kInvalid, "front_end.rounding: expected", with<PF>([](PF&) {}, nullptr, qp_fe(16, [](IndexerFrontEnd& fe) { fe.rounding = FrontEndRounding(4); }))},
      // ------------------------------------------------------------- RoPE over the cache
      {rp, "options.freqs_cis", "rope_dim = 15 (odd)", kInvalid, "options.freqs_cis: expected rope_dim = shape[1] even", with<RF>([](RF& f) { f.options.freqs_cis.shape[1] = 15; })},
      {rp, "options.freqs_cis", "rope_dim = 34 > head_size = 32", kInvalid, "even and in [2, 32]", with<RF>([](RF& f) { f.freqs = test_freqs(8, 34); f.options.freqs_cis = make_view<const float>(f.freqs.data(), 8, 34); })},
      {rp, "options.freqs_cis", "5 rows; sequence 1 reaches position 5", kRange, "options.freqs_cis: sequence 1 reaches position 5", with<RF>([](RF& f) { f.options.freqs_cis.shape[0] = 5; })},
      {rp, "options.freqs_cis", "rows with stride 2 along rope_dim", kInvalid, "options.freqs_cis: expected rows with stride 1", with<RF>([](RF& f) { f.options.freqs_cis.shape[1] = 8; f.options.freqs_cis.strides[1] = 2; })},
      {rp, "options.position_ids", "a position past the table", kRange, "options.position_ids: position_ids[2] = 8", with<RF>([](RF& f) { f.positions[2] = 8; f.options.position_ids = make_view<const uint32_t>(f.positions.data(), f.T()); })},
      {rp, "options.position_ids", "shape [T - 1]", kInvalid, "options.position_ids: expected shape", with<RF>([](RF& f) { f.options.position_ids = make_view<const uint32_t>(f.positions.data(), f.T() - 1); })},
      {rp, "options.layout", "RopeLayout(2)", kInvalid, "options.layout: expected", with<RF>([](RF& f) { f.options.layout = RopeLayout(2); })},
      {rp, "q_proj", "D = 16 while head_size = 32", kInvalid, "q_proj: expected D", with<RF>([](RF&) {}, nullptr, [](RF& f) { return fused_qk_rope_ragged(make_view<const float>(f.q.data(), f.T(), f.Hq, int64_t(16)), make_view<const uint32_t>(f.offs.data(), 3), f.kv, f.options, f.layer, make_view(f.out.data(), f.T(), f.Hq, int64_t(16)), {}); })},
      {rp, "output", "shape [T, Hq + 1, D]", kInvalid, "output: expected shape", with<RF>([](RF& f) { f.out.resize(f.out.size() * 2); }, nullptr, [](RF& f) { return fused_qk_rope_ragged(make_view<const float>(f.q.data(), f.T(), f.Hq, f.D), make_view<const uint32_t>(f.offs.data(), 3), f.kv, f.options, f.layer, make_view(f.out.data(), f.T(), f.Hq + 1, f.D), {}); })},
      {rp, "kv_collection.lookup_table", "a needed page id past the pool", kRange, "kv_collection.lookup_table: sequence 0", with<RF>([](RF& f) { f.cache.raw_lookup_table()[0] = uint32_t(f.kv.num_blocks + 5); })},
      {rp, "layer_idx", "= num_layers", kRange, "layer_idx: expected < kv_collection.num_layers = 2", with<RF>([](RF& f) { f.layer = 2; })},
      // ------------------------------------------------------------- engine layout, global slots, int32 views
      {ixe, "k_cache.data", "null", kInvalid, "k_cache.data: data pointer is null", with<EF>([](EF& f) { f.engine.view.data = nullptr; })},
      {ixe, "k_cache.data", "1 byte past a float boundary", kInvalid, "k_cache.data: expected 4-byte alignment", with<EF>([](EF& f) { f.engine.view.data += 1; })},
      {ixe, "k_cache.num_blocks", "0", kInvalid, "k_cache.num_blocks: expected >= 1", with<EF>([](EF& f) { f.engine.view.num_blocks = 0; })},
      {ixe, "k_cache.page_size", "0", kInvalid, "k_cache.page_size: expected >= 1", with<EF>([](EF& f) { f.engine.view.page_size = 0; })},
      {ixe, "k_cache.head_size", "64 while D = 32", kInvalid, "k_cache.head_size: expected D = q.shape[2] = 32", with<EF>([](EF& f) { f.engine.view.head_size = 64; })},
      {ixe, "k_cache.head_size", "30: not a multiple of 4", kInvalid, "k_cache.head_size: expected a multiple of 4", with<EF>([](EF& f) { f.engine.view.head_size = 30; })},
      {ixe, "k_cache.page_stride_bytes", "page_size * (D + 4) - 4: a page does not fit", kInvalid, "k_cache.page_stride_bytes: expected 0 (packed) or a multiple of 4 >= page_size * (head_size + 4) = 144", with<EF>([](EF& f) { f.engine.view.page_stride_bytes = 140; })},
      {ixe, "k_cache.page_stride_bytes", "146: not a multiple of 4", kInvalid, "k_cache.page_stride_bytes: expected 0 (packed)", with<EF>([](EF& f) { f.engine.view.page_stride_bytes = 146; })},
      {ixe, "k_cache.global_scale", "nvfp4 with a NaN global scale", kInvalid, "k_cache.global_scale: expected a finite value > 0 for the nvfp4 format", with<EF>([](EF& f) { f.engine.view.format = IndexKFormat::kNvfp4; f.engine.view.global_scale = NAN; })},
      {ixe, "k_cache.format", "7: not a format", kInvalid, "k_cache.format: expected IndexKFormat::kFp8, kMxfp4 or kNvfp4, got 7", with<EF>([](EF& f) { f.engine.view.format = static_cast<IndexKFormat>(7); })},
      {ixe, "k_cache.page_stride_bytes", "mxfp4: 16, a page of 16 x 17 bytes does not fit", kInvalid, "k_cache.page_stride_bytes: expected 0 (packed) or >= page_size * (head_size / 2 + head_size / 32)", with<EF>([](EF& f) { f.engine.view.format = IndexKFormat::kMxfp4; f.engine.view.page_stride_bytes = 16; })},
      {ixe, "k_cache.lookup_table", "B + 1 rows", kInvalid, "k_cache.lookup_table: expected shape", with<EF>([](EF& f) { f.engine.view.lookup_table.shape[0] = 3; })},
      {ixe, "k_cache.lookup_table", "a needed page id past the pool (num_blocks + 5)", kRange, "k_cache.lookup_table: sequence 0 page entry 0", with<EF>([](EF& f) { f.int32.table[0] = int32_t(f.engine.view.num_blocks + 5); })},
      {ixe, "k_cache.lookup_table", "int32 -1 (an engine's empty entry) where a page is needed", kRange, "k_cache.lookup_table: sequence 1 page entry 1", with<EF>([](EF& f) { f.int32.table[size_t(f.kc.max_pages_per_seq()) + 1] = -1; })},
      {ixe, "k_cache.cache_lengths", "cache_len + seq_len exceeds the lookup table", kRange, "k_cache.cache_lengths: sequence 1 needs", with<EF>([](EF& f) { f.cache.raw_cache_lengths()[1] = 100; })},
      {ixe, "input_row_offsets", "int32 {0, -1, 3} read as uint32", kInvalid, "input_row_offsets: expected non-decreasing offsets", with<EF>([](EF& f) { f.int32.offs[1] = -1; })},
      {ixe, "options.output", "IndexOutput(5)", kInvalid, "options.output: expected IndexOutput::kPositions or kGlobalSlots", with<EF>([](EF& f) { f.output = IndexOutput(5); })},
      {ixe, "options.output", "global slots with num_blocks * page_size = 2^32", kRange, "options.output: global slots need k_cache.num_blocks * page_size <= 2^31", with<EF>([](EF& f) { f.output = IndexOutput::kGlobalSlots; f.engine.view.num_blocks = int64_t(1) << 30; })},
      {ix, "options.output", "global slots with num_blocks * page_size = 2^32 (MAX layout)", kRange, "options.output: global slots need k_collection.num_blocks * page_size <= 2^31", with<IF>([](IF& f) { f.kc.num_blocks = int64_t(1) << 30; }, nullptr, [](IF& f) { return mla_indexer_ragged_float8_paged(f.out_view(), f.q_view(), f.qs_view(), f.offs_view(), f.kc, f.layer, f.mask, {}, IndexerOptions{IndexOutput::kGlobalSlots, nullptr}); })},
      {kse, "k", "D = 16 while k_cache.head_size = 32", kInvalid, "k: expected D = k.shape[1] == k_cache.head_size = 32", with<EK>([](EK&) {}, nullptr, [](EK& f) { return indexer_k_store(make_view<const float>(f.k.data(), f.T(), int64_t(16)), f.int32.offs_view(), f.engine.view, f.mode, {}); })},
      {kse, "k_cache.data", "null", kInvalid, "k_cache.data: data pointer is null", with<EK>([](EK& f) { f.engine.view.data = nullptr; })},
      {kse, "k_cache.head_size", "30: not a multiple of 4", kInvalid, "k_cache.head_size: expected a multiple of 4", with<EK>([](EK& f) { f.engine.view.head_size = 30; })},
      {kse, "k_cache.page_stride_bytes", "a page does not fit", kInvalid, "k_cache.page_stride_bytes: expected 0 (packed)", with<EK>([](EK& f) { f.engine.view.page_stride_bytes = 64; })},
      {kse, "scale_mode", "kFloat into an mxfp4 cache (ue8m0 block scales)", kInvalid, "scale_mode: the mxfp4 K cache chooses its own block scales", with<EK>([](EK& f) { f.engine.view.format = IndexKFormat::kMxfp4; f.mode = ScaleMode::kFloat; })},
      {kse, "k_cache.lookup_table", "a needed page is the sentinel num_blocks", kRange, "k_cache.lookup_table: sequence 1", with<EK>([](EK& f) { f.int32.table[size_t(f.kc.max_pages_per_seq()) + 1] = int32_t(f.engine.view.num_blocks); })},
      {kse, "k_cache.cache_lengths", "cache_len + seq_len exceeds the lookup table", kRange, "k_cache.cache_lengths: sequence 0 needs", with<EK>([](EK& f) { f.cache.raw_cache_lengths()[0] = 7; })},
      {kse, "scale_mode", "ScaleMode(5)", kInvalid, "scale_mode: expected", with<EK>([](EK& f) { f.mode = ScaleMode(5); })},
      {kse, "input_row_offsets", "int32 {0, 2, -3} read as uint32", kInvalid, "input_row_offsets: expected input_row_offsets[B] == 3", with<EK>([](EK& f) { f.int32.offs[2] = -3; })},
      // Issue 15 on the engine layout: the engine buffer is storage the call reads or writes.
      {ixe, "output_indices", "overlaps k_cache.data (the engine buffer)", kInvalid, "output_indices: overlaps k_cache.data", with<EF>([](EF&) {}, nullptr, [](EF& f) { return mla_indexer_ragged_float8_paged(make_view(reinterpret_cast<int32_t*>(f.engine.storage.data()), f.T(), f.top_k), f.q_view(), f.qs_view(), f.int32.offs_view(), f.engine.view, f.mask, Context{}, IndexerOptions{f.output, nullptr}); })},
      {kse, "k", "overlaps k_cache.data (written)", kInvalid, "k_cache.data: overlaps k in memory", with<EK>([](EK&) {}, nullptr, [](EK& f) { return indexer_k_store(make_view<const float>(f.engine.storage.data(), f.T(), f.D), f.int32.offs_view(), f.engine.view, f.mode, Context{}); })},
      // ------------------------------------------------------------- linear
      {"linear", "weight", "null pointer", kInvalid, "weight: pointer is null", linear_call([](LinearArgs& a, QF&) { a.weight = nullptr; })},
      {"linear", "weight", "not prepared (default object)", kInvalid, "weight: not a prepared weight", linear_call([](LinearArgs& a, QF&) { static const PreparedWeights empty; a.weight = &empty; })},
      {"linear", "x, x_bf16", "both given", kInvalid, "x, x_bf16: expected exactly one", linear_call([](LinearArgs& a, QF& f) { static std::vector<bfloat16> xb(std::size_t(3 * 64)); a.x_bf16 = make_view<const bfloat16>(xb.data(), 3, 64); })},
      {"linear", "x, x_bf16", "neither given", kInvalid, "got neither", linear_call([](LinearArgs& a, QF&) { a.x = {}; a.x_scale = {}; })},
      {"linear", "x", "K of another weight (row bytes 16)", kInvalid, "x: expected 32 bytes per row", linear_call([](LinearArgs& a, QF&) { a.x.shape[1] = 16; })},
      {"linear", "x_scale", "shape of 257 to 384 rows", kInvalid, "x_scale: expected", linear_call([](LinearArgs& a, QF&) { a.x_scale.shape[0] = 3; })},
      {"linear", "alpha", "NaN", kInvalid, "alpha: expected a finite GEMM factor", linear_call([](LinearArgs& a, QF&) { a.alpha = NAN; })},
      {"linear", "column_alpha", "shape [N - 1]", kInvalid, "column_alpha: expected", linear_call([](LinearArgs& a, QF& f) { static std::vector<float> c(64, 1.0f); a.column_alpha = make_view<const float>(c.data(), f.N() - 1); })},
      {"linear", "column_alpha", "an infinite factor", kInvalid, "column_alpha: expected finite GEMM factors", linear_call([](LinearArgs& a, QF& f) { static std::vector<float> c(64, INFINITY); a.column_alpha = make_view<const float>(c.data(), f.N()); })},
      {"linear", "bias, bias_bf16", "both given", kInvalid, "bias, bias_bf16: expected at most one", linear_call([](LinearArgs& a, QF& f) { static std::vector<float> b(64); static std::vector<bfloat16> b16(64); a.bias = make_view<const float>(b.data(), f.N()); a.bias_bf16 = make_view<const bfloat16>(b16.data(), f.N()); })},
      {"linear", "bias", "shape [N + 1]", kInvalid, "bias: expected", linear_call([](LinearArgs& a, QF& f) { static std::vector<float> b(64); a.bias = make_view<const float>(b.data(), f.N() + 1); })},
      {"linear", "y, y_f32", "both given", kInvalid, "y, y_f32: expected exactly one output", linear_call([](LinearArgs& a, QF& f) { static std::vector<float> y(std::size_t(64 * 64)); a.y_f32 = make_view(y.data(), f.M(), f.N()); })},
      {"linear", "y", "shape [M, N - 1]", kInvalid, "y: expected", linear_call([](LinearArgs& a, QF&) { a.y.shape[1] -= 1; })},
      {"linear", "y", "rows overlapping (row stride N / 2)", kInvalid, "y: ", linear_call([](LinearArgs& a, QF& f) { a.y.strides[0] = f.N() / 2; })},
      {"linear", "y", "overlaps x (y over the activations' bytes)", kInvalid, "y: overlaps x", linear_call([](LinearArgs& a, QF& f) { a.y = make_view(reinterpret_cast<bfloat16*>(f.hidden.data()), f.M(), f.N()); })},
      // ------------------------------------------------------------- fused experts
      {"fused_experts", "experts", "null pointer", kInvalid, "experts: pointer is null", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.experts = nullptr; })},
      {"fused_experts", "experts", "not prepared (default object)", kInvalid, "experts: no experts", moe_call([](FusedExpertsArgs& a, MoeFixture&) { static const PreparedExperts empty; a.experts = &empty; })},
      {"fused_experts", "experts", "w3_alpha of E + 1 factors", kInvalid, "experts.w3_alpha: expected none or one factor per expert (2), got 3", moe_call([](FusedExpertsArgs&, MoeFixture& f) { f.experts.w3_alpha.assign(std::size_t(MoeFixture::kE + 1), 1.0f); })},
      {"fused_experts", "x", "shape [T, H - 16]", kInvalid, "x: expected", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.x.shape[1] -= 16; })},
      {"fused_experts", "topk_ids", "shape [T - 1, k]", kInvalid, "topk_ids: expected", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.topk_ids.shape[0] -= 1; })},
      {"fused_experts", "topk_weights", "shape [T, k - 1]", kInvalid, "topk_weights: expected", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.topk_weights.shape[1] -= 1; })},
      {"fused_experts", "expert_offset", "-2^40 (beyond int32 ids)", kInvalid, "expert_offset: expected a value in int32's range", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.expert_offset = -(int64_t(1) << 40); })},
      {"fused_experts", "activation", "out of the enum (7)", kInvalid, "activation: expected kSiluGated or kSwigluOai", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.activation = static_cast<MoeActivation>(7); })},
      {"fused_experts", "w13_bias", "shape [E, 2I - 1]", kInvalid, "w13_bias: expected", moe_call([](FusedExpertsArgs& a, MoeFixture&) { static std::vector<float> b(64); a.w13_bias = make_view<const float>(b.data(), 2, 31); })},
      {"fused_experts", "y, y_f32", "both given", kInvalid, "y, y_f32: expected exactly one output", moe_call([](FusedExpertsArgs& a, MoeFixture&) { static std::vector<float> y(std::size_t(3 * 32)); a.y_f32 = make_view(y.data(), 3, 32); })},
      {"fused_experts", "y, y_f32", "neither given", kInvalid, "got neither", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.y = {}; })},
      {"fused_experts", "y", "shape [T, H - 1]", kInvalid, "y: expected", moe_call([](FusedExpertsArgs& a, MoeFixture&) { a.y.shape[1] -= 1; })},
      {"fused_experts", "y", "overlaps x (y over the activations' bytes)", kInvalid, "y: overlaps x", moe_call([](FusedExpertsArgs& a, MoeFixture& f) { a.y = make_view(f.x.data(), 3, 32); })},
      {sm, "kv, kv_fp8", "both given", kInvalid, "kv, kv_fp8: expected exactly one latent cache", sm_call([](SA& a, SF& f, auto&, auto&) { a.kv_fp8 = make_view<const uint8_t>(f.kv8.data(), SF::kSlots, SF::kRow); })},
      {sm, "kv, kv_fp8", "neither given", kInvalid, "got neither", sm_call([](SA& a, SF&, auto&, auto&) { a.kv = {}; })},
      {sm, "out", "shape [T, H - 1, d_v]", kInvalid, "out: expected", sm_call([](SA& a, SF&, auto&, auto&) { a.out.shape[1] -= 1; })},
      {sm, "out", "d_v = d_qk (no rope part)", kInvalid, "out: expected 0 < d_v = out.shape[2] < d_qk", sm_call([](SA& a, SF&, auto& out, auto&) { a.out = make_view(out.data(), SF::kT, SF::kH, SF::kDqk); })},
      {sm, "out", "d_v = 96 with the fp8 cache (not a multiple of 128)", kInvalid, "out: expected d_v = out.shape[2] a multiple of 128 with the fp8 cache", sm_call([](SA& a, SF& f, auto& out, auto&) { a.kv = {}; a.kv_fp8 = make_view<const uint8_t>(f.kv8.data(), SF::kSlots, SF::kRow); a.out = make_view(out.data(), SF::kT, SF::kH, int64_t(96)); })},
      {sm, "out", "two elements at one address (head stride 0)", kInvalid, "out: elements overlap", sm_call([](SA& a, SF&, auto&, auto&) { a.out.strides[1] = 0; })},
      {sm, "q", "shape [T, H, d_qk - 1] (kv's row is d_qk)", kInvalid, "kv: expected", sm_call([](SA& a, SF&, auto&, auto&) { a.q.shape[2] -= 1; })},
      {sm, "kv", "row stride 2 (values not contiguous)", kInvalid, "kv: expected unit stride along a row, got 2", sm_call([](SA& a, SF& f, auto&, auto&) { a.kv = {f.kv.data(), {SF::kSlots / 2, SF::kDqk}, {2 * SF::kDqk, 2}}; })},
      {sm, "kv_fp8", "row of d_v + 2 * d_rope bytes (no scales)", kInvalid, "kv_fp8: expected", sm_call([](SA& a, SF& f, auto&, auto&) { a.kv = {}; a.kv_fp8 = make_view<const uint8_t>(f.kv8.data(), SF::kSlots, SF::kDv + 2 * SF::kDr); })},
      {sm, "indices", "shape [T - 1, top_k]", kInvalid, "indices: expected", sm_call([](SA& a, SF&, auto&, auto&) { a.indices.shape[0] -= 1; })},
      {sm, "topk_length", "shape [T + 1]", kInvalid, "topk_length: expected", sm_call([](SA& a, SF& f, auto&, auto&) { f.length.push_back(0); a.topk_length = make_view<const int32_t>(f.length.data(), SF::kT + 1); })},
      {sm, "lse", "shape [T, H + 1]", kInvalid, "lse: expected", sm_call([](SA& a, SF&, auto&, auto& lse) { a.lse = make_view(lse.data(), SF::kT, SF::kH + 1); })},
      {sm, "sm_scale", "NaN", kInvalid, "sm_scale: expected a finite value", sm_call([](SA& a, SF&, auto&, auto&) { a.sm_scale = kNaN; })},
      {sm, "sm_scale", "+inf", kInvalid, "sm_scale: expected a finite value", sm_call([](SA& a, SF&, auto&, auto&) { a.sm_scale = kInf; })},
      {sm, "indices", "-2 (only -1 means skip)", kRange, "indices: indices[1, 2] = -2, expected -1 or a slot in [0, num_slots = 8)", sm_call([](SA&, SF& f, auto&, auto&) { f.indices[6] = -2; })},
      {sm, "indices", "num_slots (one past the cache)", kRange, "indices: indices[0, 3] = 8", sm_call([](SA&, SF& f, auto&, auto&) { f.indices[3] = int32_t(SF::kSlots); })},
      {sm, "indices", "num_slots with the fp8 cache", kRange, "indices: indices[0, 1] = 8", sm_call([](SA& a, SF& f, auto&, auto&) { a.kv = {}; a.kv_fp8 = make_view<const uint8_t>(f.kv8.data(), SF::kSlots, SF::kRow); f.indices[1] = int32_t(SF::kSlots); })},
      {sm, "topk_length", "-1", kRange, "topk_length: topk_length[2] = -1, expected in [0, top_k = 4]", sm_call([](SA&, SF& f, auto&, auto&) { f.length[2] = -1; })},
      {sm, "topk_length", "top_k + 1", kRange, "topk_length: topk_length[1] = 5", sm_call([](SA&, SF& f, auto&, auto&) { f.length[1] = int32_t(SF::kTopK + 1); })},
      {sm, "out", "overlaps q (out over q's bytes)", kInvalid, "out: overlaps q", sm_call([](SA& a, SF& f, auto&, auto&) { a.out = make_view(f.q.data(), SF::kT, SF::kH, SF::kDv); })},
      {sm, "out", "overlaps kv (out over the cache's bytes)", kInvalid, "out: overlaps kv", sm_call([](SA& a, SF& f, auto&, auto&) { a.out = make_view(f.kv.data(), SF::kT, SF::kH, SF::kDv); })},
      {sm, "out", "overlaps lse (lse over out's bytes)", kInvalid, "out: overlaps lse", sm_call([](SA& a, SF&, auto& out, auto&) { a.lse = make_view(reinterpret_cast<float*>(out.data()), SF::kT, SF::kH); })},
      {sm, "lse", "overlaps kv (lse over the cache's bytes)", kInvalid, "lse: overlaps kv", sm_call([](SA& a, SF& f, auto&, auto&) { a.lse = make_view(reinterpret_cast<float*>(f.kv.data()), SF::kT, SF::kH); })},
      {sm, "q", "shape [2^40, 2^40, d_qk]: the element count overflows int64", kInvalid, "q: the element count of shape [1099511627776, 1099511627776, 160] overflows int64", sm_call([](SA& a, SF&, auto&, auto&) { a.q.shape[0] = a.q.shape[1] = int64_t(1) << 40; })},
      {sm, "indices", "top_k = 2^58 (a stride-0 view, every topk_length 0): the score scratch overflows", kBudget, "indices: top_k = 288230376151711744 needs a score scratch larger than the address space", sm_call([](SA& a, SF& f, auto&, auto&) { f.length.assign(3, 0); a.indices = {f.indices.data(), {SF::kT, int64_t(1) << 58}, {0, 0}}; })},
  };
  for (BadInput& r : checkpoint_bad_inputs()) rows.push_back(std::move(r));
  return rows;
}

class BadInputs : public ::testing::TestWithParam<int> {};

TEST_P(BadInputs, RejectedWithoutWriting) {
  const BadInput row = bad_inputs()[size_t(GetParam())];
  SCOPED_TRACE(std::string(row.entry) + " / " + row.argument + ": " + row.defect);
  const Outcome o = row.run();
  ASSERT_FALSE(o.status.ok()) << "accepted";
  EXPECT_EQ(o.status.code(), row.code) << o.status.to_string();
  EXPECT_NE(o.status.message().find(row.fragment), std::string::npos)
      << "message \"" << o.status.message() << "\" lacks \"" << row.fragment << "\"";
  EXPECT_TRUE(o.unchanged) << "an output or the cache changed before the error";
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputs, ::testing::Range(0, int(bad_inputs().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           const BadInput row = bad_inputs()[size_t(info.param)];
                           std::string name =
                               std::to_string(info.param) + "_" + row.entry + "_" + row.argument;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// ----------------------------------------------------------------- the documented table
std::string escape(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string table_markdown() {
  std::ostringstream os;
  os << "| # | entry point | argument | bad input | status code | message contains |\n";
  os << "|---|---|---|---|---|---|\n";
  int i = 0;
  for (const BadInput& r : bad_inputs()) {
    os << "| " << i++ << " | `" << r.entry << "` | `" << escape(r.argument) << "` | "
       << escape(r.defect) << " | `" << status_code_name(r.code) << "` | `" << escape(r.fragment)
       << "` |\n";
  }
  return os.str();
}

constexpr const char* kBegin =
    "<!-- BEGIN TABLE: generated from tests/cpu/bad_inputs_test.cpp -->\n";
constexpr const char* kEnd = "<!-- END TABLE -->\n";

TEST(BadInputs, DocumentedTableMatches) {
  // The source tree comes from CMake: __FILE__ is relative under ccache's base_dir.
  const std::filesystem::path doc =
      std::filesystem::path(QUANTKV_SOURCE_DIR) / "docs" / "bad_inputs.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in.good()) << "cannot read " << doc;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const size_t b = text.find(kBegin), e = text.find(kEnd);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e)
      << doc << " lacks the table markers";
  const std::string documented = text.substr(b + std::strlen(kBegin), e - b - std::strlen(kBegin));
  const std::string generated = table_markdown();
  if (documented != generated && std::getenv("QUANTKV_UPDATE_DOCS") != nullptr) {
    text.replace(b + std::strlen(kBegin), e - b - std::strlen(kBegin), generated);
    std::ofstream(doc) << text;
    GTEST_SKIP() << "rewrote " << doc;
  }
  EXPECT_EQ(documented, generated) << doc << " is out of date: rerun with QUANTKV_UPDATE_DOCS=1";
}

}  // namespace
}  // namespace quantkv
