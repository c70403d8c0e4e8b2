// Quantised checkpoints: a safetensors reader (memory-mapped, header parsed with nlohmann-json)
// and loaders that turn one attention layer's q/k/v projections into a PreparedQkvWeights plus
// the per-section GEMM scales of the fused QKV (docs/checkpoints.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/status.hpp"

namespace quantkv {

// ------------------------------------------------------------------ safetensors
// The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {str: str}}, then the raw little-endian tensor bytes; offsets are relative
// to the first byte after the header.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // "U8", "F8_E4M3", "F8_E8M0", "BF16", "F32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping (valid while the file object lives)
  std::size_t bytes = 0;
};

// Bytes of one element of a safetensors dtype; 0 for a name the format does not define.
std::size_t safetensors_dtype_size(std::string_view dtype);

class SafetensorsFile {
 public:
  // Maps `path` read-only (no full read) and parses its header. Errors name the file and the
  // problem: "truncated file", "header length ... past the end of the file", "header is not
  // valid JSON", "header is not a JSON object", "tensor 'x': unknown dtype", "tensor 'x':
  // data_offsets ... outside the data", "tensor 'x': overlaps tensor 'y'", ...
  static Status open(const std::string& path, SafetensorsFile* out);
  // Parses an in-memory file (the bytes must outlive the object; the fuzz target's entry).
  static Status parse(const uint8_t* bytes, std::size_t size, std::string_view label,
                      SafetensorsFile* out);

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsTensor* find(std::string_view name) const;
  const std::string& label() const { return label_; }

 private:
  std::shared_ptr<const void> mapping_;  // keeps the mapped file alive
  std::string label_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// ------------------------------------------------------------------ q/k/v loaders
// The checkpoint conventions recognised (docs/checkpoints.md has each with its source).
enum class CheckpointFormat : int {
  kNVFP4CompressedTensors = 0,  // weight_packed, weight_scale, weight_global_scale, input_global_scale
  kNVFP4ModelOpt = 1,           // weight (U8), weight_scale, weight_scale_2, input_scale
  kMXFP4 = 2,                   // weight_blocks [N, K/32, 16], weight_scales [N, K/32] (gpt-oss)
  kMXFP8 = 3,                   // weight (F8_E4M3) [N, K], weight_scale e8m0 [N, K/32]
};
const char* checkpoint_format_name(CheckpointFormat f);
BlockFormat checkpoint_block_format(CheckpointFormat f);

// One quantised projection found in a file.
struct QuantizedProjection {
  std::string name;              // e.g. "model.layers.0.self_attn.q_proj"
  CheckpointFormat format{};
  int64_t n = 0, k = 0;          // output rows, input columns
  float weight_factor = 1.0f;    // dequantised = value * |block scale| * weight_factor (1 / g_w; 1 for MX)
  float input_global = 1.0f;     // the activation quantiser's global multiplier g_a (1 for MX / none)
};
// Every projection of the four layouts in `file`, sorted by name (`quantkv inspect`).
std::vector<QuantizedProjection> list_quantized_projections(const SafetensorsFile& file);

// One attention layer's q/k/v weights ready for the fused QKV.
struct QkvCheckpointWeights {
  CheckpointFormat format{};
  PreparedQkvWeights weights;       // [q; k; v] rows, format checkpoint_block_format(format)
  int64_t q_rows = 0, k_rows = 0, v_rows = 0;
  // The dequantised weight is block value * |block scale| * weight_factor.<section>, with
  // weight_factor = 1 / g_w of the shard (1 for MX formats).
  SectionScales weight_factor;
  // The activation quantiser's global multiplier for quantize_dynamic_block_scaled (NVFP4):
  // the most conservative of the shards' (the one with the largest calibrated amax); 1 for MX.
  float input_global = 1.0f;
  // section_sf of the W4A4 call: weight_factor / input_global.
  SectionScales gemm_scales() const;
};

// Loads `prefix`.q_proj, .k_proj and .v_proj in whichever of the four layouts the tensors
// have (the three shards in the same one). A tensor that does not fit (missing, wrong dtype or shape,
// K not a multiple of the block, shards of different formats or K) is an error naming it.
Status load_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                        QkvCheckpointWeights* out, const Context& ctx);

// The dequantised fp32 weight [N, K] of the same projections (rows q, k, v), for references
// and the demo's error report.
Status dequantize_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                              std::vector<float>* out, int64_t* n, int64_t* k);

}  // namespace quantkv
