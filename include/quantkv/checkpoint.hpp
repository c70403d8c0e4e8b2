// Quantised checkpoints: a safetensors reader (memory-mapped, header parsed with nlohmann-json)
// and loaders that turn one attention layer's q/k/v projections into a PreparedQkvWeights plus
// the per-section GEMM scales of the fused QKV, any linear layer into prepared weights, and one
// layer's mixture-of-experts tensors into PreparedExperts (docs/checkpoints.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/moe.hpp"
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
  std::string dtype;  // "U8", "F8_E4M3", "F8_E8M0", "BF16", "F32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping (valid while the file object lives)
  std::size_t bytes = 0;
};

// Bits of one element of a safetensors dtype: 4 (F4: e2m1, two per byte, element 2i in the
// low nibble as torch's float4_e2m1fn_x2), 6 (F6_E2M3, F6_E3M2), 8 (BOOL, U8, I8, the F8_*
// kinds incl. the FNUZ ones and F8_E8M0), 16, 32 or 64 (C64 included); 0 for a name the format
// does not define (safetensors 0.8 defines 22). A tensor takes numel * bits / 8 bytes, which
// must be a whole number (the header's shape counts elements, not bytes, for F4 and F6).
int safetensors_dtype_bits(std::string_view dtype);
// Bytes of one element: safetensors_dtype_bits / 8; 0 for an unknown name or a sub-byte
// dtype (F4, F6_*), whose elements have no byte size of their own.
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

// ------------------------------------------------------------------ checkpoints
// A checkpoint as users hold it: one .safetensors file, or a Hugging Face sharded checkpoint,
// several .safetensors files and an index `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor name: shard file name}}, the shard names relative
// to the index's directory). The index is parsed with nlohmann-json like the headers; a shard
// is mapped and its header parsed when one of its tensors is first read (so loading one layer
// opens only the shards that hold it). Copies share the opened shards; reads are thread-safe.
class SafetensorsCheckpoint {
 public:
  // `path` is a .safetensors file, an index (a name ending in ".json"), or a directory holding
  // model.safetensors.index.json, else model.safetensors, else exactly one
  // *.safetensors.index.json, else exactly one *.safetensors. Errors name the path and the
  // problem ("checkpoint index ...: not valid JSON", "... missing object \"weight_map\"",
  // "... names 'f', expected a file name inside the index's directory", "checkpoint directory
  // ...: expected ...").
  static Status open(const std::string& path, SafetensorsCheckpoint* out);
  // A checkpoint of one file already opened (or parsed).
  static SafetensorsCheckpoint of_file(SafetensorsFile file);

  // The index (sharded) or the file path: what the loaders' messages name.
  const std::string& label() const;
  bool sharded() const;
  // Whether the checkpoint has `name`: the weight_map's word alone (no shard is opened).
  bool contains(std::string_view name) const;
  // Every tensor name, sorted: the weight_map's keys, or the file's tensors.
  std::vector<std::string> tensor_names() const;
  // The tensor `name` (valid while a copy of this checkpoint lives). Errors: "tensor 'x':
  // missing from LABEL" (an index: "missing from the weight_map of LABEL"), the shard the map names
  // cannot be opened or parsed ("tensor 'x': weight_map of LABEL names shard 'f': ..."), or it
  // does not hold the tensor ("tensor 'x': weight_map of LABEL puts it in 'f', which does not
  // hold it").
  Status tensor(std::string_view name, const SafetensorsTensor** out) const;

  struct State;  // opaque (src/checkpoint/checkpoint_index.cpp)

 private:
  std::shared_ptr<State> state_;
};

// ------------------------------------------------------------------ q/k/v loaders
// The checkpoint conventions recognised (docs/checkpoints.md has each with its source).
enum class CheckpointFormat : int {
  kNVFP4CompressedTensors =
      0,               // weight_packed, weight_scale, weight_global_scale, input_global_scale
  kNVFP4ModelOpt = 1,  // weight (U8), weight_scale, weight_scale_2, input_scale
  kMXFP4 = 2,          // weight_blocks [N, K/32, 16], weight_scales [N, K/32] (gpt-oss)
  kMXFP8 = 3,          // weight (F8_E4M3) [N, K], weight_scale e8m0 [N, K/32]
  kMXFP4CompressedTensors = 4,  // weight_packed [N, K/2], weight_scale e8m0 [N, K/32], no
                                // weight_global_scale (mxfp4-pack-quantized)
};
const char* checkpoint_format_name(CheckpointFormat f);
BlockFormat checkpoint_block_format(CheckpointFormat f);

// One quantised projection found in a file.
struct QuantizedProjection {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj"
  CheckpointFormat format{};
  int64_t n = 0, k = 0;  // output rows, input columns
  float weight_factor =
      1.0f;  // dequantised = value * |block scale| * weight_factor (1 / g_w; 1 for MX)
  float input_global = 1.0f;  // the activation quantiser's global multiplier g_a (1 for MX / none)
  int scale_sections = 1;     // 3 when the global scales are per q/k/v section (shape [3])
};
// Every projection of the five layouts in `file`, sorted by name (`quantkv inspect`). A
// projection with per-section global scales (shape [3], a fused qkv_proj) is listed with its
// q section's factors and scale_sections = 3.
std::vector<QuantizedProjection> list_quantized_projections(const SafetensorsFile& file);
std::vector<QuantizedProjection> list_quantized_projections(const SafetensorsCheckpoint& ckpt);

// One attention layer's q/k/v weights ready for the fused QKV.
struct QkvCheckpointWeights {
  CheckpointFormat format{};
  PreparedQkvWeights weights;  // [q; k; v] rows, format checkpoint_block_format(format)
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

// Loads `prefix`.q_proj, .k_proj and .v_proj in whichever of the five layouts the tensors
// have (the three shards in the same one); an empty prefix reads q_proj, k_proj and v_proj (no
// leading dot). The 3-shard case of load_stacked_linear_weights. A tensor that does not fit
// (missing, wrong dtype or shape, K not a multiple of the block, shards of different formats or K)
// is an error naming it.
Status load_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                        QkvCheckpointWeights* out, const Context& ctx);
Status load_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view prefix,
                        QkvCheckpointWeights* out, const Context& ctx);

// The rows of each section of a fused q/k/v projection, stacked q, k, v (from the model's
// config: num_attention_heads * head_dim, num_key_value_heads * head_dim twice).
struct QkvSections {
  int64_t q = 0, k = 0, v = 0;
};

// Loads one fused projection `projection` (e.g. "model.layers.0.self_attn.qkv_proj": Phi-3,
// vLLM's QKVParallelLinear), rows [q; k; v] of `sections`, in any of the five layouts. Its global
// scales are one for the whole tensor (shape [] or [1]) or one per section (shape [3]). The
// result equals loading the same rows as three shards with those scales. Errors as
// load_qkv_weights, plus "sections: ..." when a section is empty or they do not sum to N.
Status load_fused_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                              QkvSections sections, QkvCheckpointWeights* out, const Context& ctx);

// The dequantised fp32 weight [N, K] of the same projections (rows q, k, v), for references
// and the demo's error report.
Status dequantize_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                              std::vector<float>* out, int64_t* n, int64_t* k);
Status dequantize_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view prefix,
                              std::vector<float>* out, int64_t* n, int64_t* k);
Status dequantize_fused_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                                    QkvSections sections, std::vector<float>* out, int64_t* n,
                                    int64_t* k);

// ------------------------------------------------------------------ any linear layer
// One linear layer's weight (or several stacked row-wise) ready for the fused QKV's weight
// path: o_proj, gate_proj, up_proj, down_proj, a fused gate_up_proj, an expert's projections.
struct LinearCheckpointWeights {
  CheckpointFormat format{};
  PreparedQkvWeights weights;         // the shards' rows stacked in order, format
                                      // checkpoint_block_format(format)
  std::vector<int64_t> section_rows;  // rows of each shard, in order (sum: weights.n)
  // Per section: dequantised = value * |block scale| * weight_factor (1 / g_w of the shard; 1
  // for MX formats).
  std::vector<float> weight_factor;
  // The activation quantiser's global multiplier (NVFP4): the most conservative of the shards'
  // (the smallest multiplier, the largest calibrated amax), as the q/k/v loader; 1 for MX.
  float input_global = 1.0f;
  // [N]: each output column's factor: weight_factor of its section (weight_only), or
  // weight_factor / input_global (W4A4: the GEMM's per-column scale).
  std::vector<float> column_factors(bool weight_only) const;
};

// Loads one projection by the name `quantkv inspect` lists (e.g.
// "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj", "mlp.gate_up_proj",
// "q_proj" in a file without layer prefix) in any of the five layouts: one section. Its global
// scales must be one for the tensor (shape [] or [1]). Errors name the tensor as
// load_qkv_weights, or "projection 'P': no quantised weight in ...".
Status load_linear_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                           LinearCheckpointWeights* out, const Context& ctx);

// Loads several projections stacked row-wise in the given order, one section each, each keeping
// its own weight factor (e.g. {"L.mlp.gate_proj", "L.mlp.up_proj"}, vLLM's
// MergedColumnParallelLinear). All in the same layout and of the same K: "projection 'P':
// expected the layout of FIRST (...), got ..." / "expected K = k of FIRST, got ...";
// "projections: expected at least one projection name, got an empty list".
Status load_stacked_linear_weights(const SafetensorsCheckpoint& ckpt,
                                   const std::vector<std::string>& projections,
                                   LinearCheckpointWeights* out, const Context& ctx);

// The dequantised fp32 weight [N, K] of one projection (value * |block scale| * weight_factor),
// for references.
Status dequantize_linear_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                                 std::vector<float>* out, int64_t* n, int64_t* k);

// ------------------------------------------------------------------ MoE experts
// How one layer's experts are stored (docs/checkpoints.md has each with its source).
enum class ExpertsCheckpointLayout : int {
  kAuto = 0,  // load_experts: detect from the tensor names (stacked first, then per expert)
  // MXFP4 stacked over the experts, gate and up interleaved row by row (gpt-oss):
  // PREFIX.gate_up_proj_blocks [E, 2I, H/32, 16], _scales [E, 2I, H/32], _bias [E, 2I],
  // PREFIX.down_proj_blocks [E, H, I/32, 16], _scales, _bias [E, H] (Hugging Face, PREFIX
  // "model.layers.L.mlp.experts"); or gpt-oss's own names PREFIX.mlp1_weight.blocks / .scales,
  // PREFIX.mlp1_bias, PREFIX.mlp2_weight.*, PREFIX.mlp2_bias (PREFIX "block.L.mlp").
  kGptOss = 1,
  // One projection per expert and matrix, PREFIX.{e}.gate_proj / up_proj / down_proj (or
  // Mixtral's w1 / w3 / w2), each in any of the five projection layouts (NVFP4 compressed-tensors
  // or ModelOpt, MXFP4 compressed-tensors, ...); w13 = [gate; up] (GateUpLayout::kHalves).
  kPerExpert = 2,
};
const char* experts_layout_name(ExpertsCheckpointLayout layout);

// One layer's experts found in a checkpoint (`quantkv inspect`).
struct QuantizedExperts {
  std::string prefix;  // e.g. "model.layers.0.mlp.experts"
  ExpertsCheckpointLayout layout{};
  CheckpointFormat format{};
  int64_t num_experts = 0, hidden = 0, intermediate = 0;  // E, H, I
  GateUpLayout gate_up = GateUpLayout::kHalves;
  bool has_bias = false;
};
// Every expert group whose tensors read without error, sorted by prefix.
std::vector<QuantizedExperts> list_quantized_experts(const SafetensorsCheckpoint& ckpt);

// One layer's experts ready for fused_experts, with what the call needs besides them.
struct LoadedExperts {
  CheckpointFormat format{};
  ExpertsCheckpointLayout layout{};
  PreparedExperts experts;  // w13_alpha / w2_alpha: 1 / g_w (NVFP4), 1 (MX); per expert
                            // also w3_alpha (up's own); x_global / h_global: the activation
                            // global scales (1 when none is stored)
  GateUpLayout gate_up = GateUpLayout::kHalves;
  // The layout's convention: kSwigluOai for gpt-oss, kSiluGated per expert (a model whose config
  // says otherwise sets its own).
  MoeActivation activation = MoeActivation::kSiluGated;
  std::vector<float> w13_bias;  // [E, 2I] fp32 row-major, empty when the checkpoint has none
  std::vector<float> w2_bias;   // [E, H] fp32 row-major, or empty
  // Sets args->experts (pointing at this object), gate_up, activation and the biases' views.
  void apply_to(FusedExpertsArgs* args) const;
};

// Loads the experts under `prefix` ("model.layers.0.mlp.experts", "block.0.mlp", as
// list_quantized_experts names them) in `layout` (kAuto: detected). Per expert, gate and up must
// carry the same weight global scale (PreparedExperts holds one w13 factor per expert and
// rescaling e4m3 block scales is not exact): "expert e: gate_proj and up_proj have different
// weight global scales (a, b)"; x_global is the smaller of their input global scales (the dense
// loaders' rule), h_global down_proj's. Errors name the tensor and the problem (missing, dtype,
// shape against the first expert or the other matrix), "expert e: ..." when one expert does not
// fit the first (layout, format, shapes), or "prefix 'P': no experts in LABEL (looked for ...)".
// Nothing is written to `out` before success.
Status load_experts(const SafetensorsCheckpoint& ckpt, std::string_view prefix, LoadedExperts* out,
                    const Context& ctx,
                    ExpertsCheckpointLayout layout = ExpertsCheckpointLayout::kAuto);

}  // namespace quantkv
