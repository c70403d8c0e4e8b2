// SafetensorsCheckpoint over a fuzzed model.safetensors.index.json: the input bytes are the
// index, written into a directory that also holds two real shards (L.q_proj in one, L.k_proj
// and L.v_proj in the other, NVFP4 compressed-tensors) and a file that is not a safetensors
// file. Opening the directory and the index, reading every tensor the weight_map names,
// listing the projections and loading L's q/k/v must each give either a named error or a
// result that agrees with the shards; never a crash, a leak or a read outside a mapping.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../tests/safetensors_writer.hpp"
#include "quantkv/checkpoint.hpp"

namespace {

using quantkv::testing::ct_shard;
using quantkv::testing::StEntry;
using quantkv::testing::write_safetensors;

// The directory and its shards, made once per process (removed at exit).
const quantkv::testing::TempDir& shard_dir() {
  static const quantkv::testing::TempDir* dir = [] {
    auto* d = new quantkv::testing::TempDir();
    std::vector<StEntry> kv = ct_shard("L.k_proj", 16, 32);
    for (StEntry& e : ct_shard("L.v_proj", 16, 32)) kv.push_back(std::move(e));
    d->write("model-00001-of-00002.safetensors", write_safetensors(ct_shard("L.q_proj", 16, 32)));
    d->write("model-00002-of-00002.safetensors", write_safetensors(kv));
    d->write("notes.txt", std::vector<uint8_t>{'n', 'o', 't', ' ', 's', 't'});
    std::atexit([] { delete dir; });
    return d;
  }();
  return *dir;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FUZZ FINDING: %s\n", what);
    std::abort();
  }
}

void check_status(const quantkv::Status& s) {
  check(s.ok() || !s.message().empty(), "error without a message");
}

void exercise(const std::string& path) {
  using namespace quantkv;
  SafetensorsCheckpoint ckpt;
  const Status opened = SafetensorsCheckpoint::open(path, &ckpt);
  check_status(opened);
  if (!opened.ok()) return;
  for (const std::string& name : ckpt.tensor_names()) {
    check(ckpt.contains(name), "tensor_names() lists a name contains() denies");
    const SafetensorsTensor* t = nullptr;
    const Status s = ckpt.tensor(name, &t);
    check_status(s);
    if (s.ok()) check(t != nullptr && t->name == name, "tensor() gave another tensor");
  }
  for (const QuantizedProjection& p : list_quantized_projections(ckpt)) {
    check(!p.name.empty(), "a listed projection without a name");
  }
  QkvCheckpointWeights w;
  const Status loaded = load_qkv_weights(ckpt, "L", &w, Context{});
  check_status(loaded);
  if (loaded.ok()) check(w.q_rows == 16 && w.k_rows == 16 && w.v_rows == 16, "wrong section rows");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const quantkv::testing::TempDir& dir = shard_dir();
  if (dir.path().empty()) return 0;
  const std::string index =
      dir.write("model.safetensors.index.json", std::vector<uint8_t>(data, data + size));
  exercise(dir.path());  // the directory: finds the index by its standard name
  exercise(index);
  return 0;
}
