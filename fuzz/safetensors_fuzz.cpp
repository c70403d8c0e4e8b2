// The safetensors header parser, the q/k/v loaders and the experts loader on arbitrary bytes:
// either a named error or a file whose every tensor lies inside the data, with bytes = elements x
// dtype bits / 8 (whole) and no two tensors sharing a byte; loading from it never crashes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "quantkv/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  SafetensorsFile f;
  const Status s = SafetensorsFile::parse(data, size, "fuzz", &f);
  if (!s.ok()) {
    if (s.message().empty()) std::abort();  // every error names its problem
    return 0;
  }
  std::vector<std::pair<const uint8_t*, std::size_t>> spans;
  for (const SafetensorsTensor& t : f.tensors()) {
    const int bits = safetensors_dtype_bits(t.dtype);
    if (bits == 0) std::abort();
    std::size_t want_bits = std::size_t(bits);
    for (int64_t d : t.shape) want_bits *= std::size_t(d);
    if (want_bits % 8 != 0 || want_bits / 8 != t.bytes || t.data < data + 8 ||
        t.data + t.bytes > data + size)
      std::abort();
    if (t.bytes > 0) spans.emplace_back(t.data, t.bytes);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i - 1].first + spans[i - 1].second > spans[i].first) std::abort();
  }
  for (const QuantizedProjection& p : list_quantized_projections(f)) {
    const std::size_t dot = p.name.rfind('.');
    QkvCheckpointWeights w;
    (void)load_qkv_weights(f, dot == std::string::npos ? p.name : p.name.substr(0, dot), &w,
                           Context{});
  }
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::of_file(f);
  for (const QuantizedExperts& g : list_quantized_experts(ckpt)) {
    LoadedExperts e;
    (void)load_experts(ckpt, g.prefix, &e, Context{});
  }
  return 0;
}
