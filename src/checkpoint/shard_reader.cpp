// The shard reader (shard_reader.hpp): one projection's tensors in any of the five layouts.
#include "shard_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quantkv/formats.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::checkpoint_detail {

std::string str(int64_t v) { return std::to_string(v); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + str(s[i]);
  return out + "]";
}

Status tensor_error(const std::string& name, const std::string& what) {
  return invalid_argument("tensor '" + name + "': " + what);
}

// The tensor `name`, of one of `dtypes` (names joined for the message).
Status get_tensor(const Tensors& f, const std::string& name,
                  std::initializer_list<const char*> dtypes, const SafetensorsTensor** out) {
  const SafetensorsTensor* t = nullptr;
  QUANTKV_RETURN_IF_ERROR(f.get(name, &t));
  std::string want;
  for (const char* d : dtypes) {
    if (t->dtype == d) {
      *out = t;
      return Status::Ok();
    }
    want += (want.empty() ? "" : " or ") + std::string(d);
  }
  return tensor_error(name, "expected dtype " + want + ", got " + t->dtype);
}

Status check_shape(const SafetensorsTensor& t, const std::vector<int64_t>& want, const char* what) {
  if (t.shape != want) {
    return tensor_error(t.name, std::string("expected shape ") + what + " = " + shape_str(want) +
                                    ", got " + shape_str(t.shape));
  }
  return Status::Ok();
}

// Packed e2m1 data comes as U8 (two codes per byte: the last extent counts bytes) or as
// safetensors' F4 (torch's float4_e2m1fn_x2: the same bytes, the last extent counts codes).
// Both keep code 2i in the low nibble.
bool is_packed_fp4(const SafetensorsTensor& t) { return t.dtype == "U8" || t.dtype == "F4"; }
int64_t codes_per_unit(const SafetensorsTensor& t) { return t.dtype == "F4" ? 1 : 2; }

float float_element(const SafetensorsTensor& t, int64_t i) {
  float v = 0.0f;
  if (t.dtype == "F32") {
    std::memcpy(&v, t.data + 4 * i, 4);
  } else {
    uint16_t b = 0;
    std::memcpy(&b, t.data + 2 * i, 2);
    const uint32_t u = uint32_t(b) << 16;
    std::memcpy(&v, &u, 4);
  }
  return v;
}

namespace {

// A global scale: F32 (or BF16) of shape [] or [1] (or, with `per_section`, [3]: one per
// q/k/v section), each finite and > 0; a single value is repeated into out[0..2].
Status get_global(const Tensors& f, const std::string& name, bool per_section, float out[3],
                  int* sections) {
  const SafetensorsTensor* t = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, name, {"F32", "BF16"}, &t));
  const bool three = per_section && t->shape == std::vector<int64_t>{3};
  if (!(t->shape.empty() || t->shape == std::vector<int64_t>{1} || three)) {
    return tensor_error(name, std::string("expected a scalar (shape [] or [1])") +
                                  (per_section ? " or one per q/k/v section ([3])" : "") +
                                  ", got " + shape_str(t->shape));
  }
  const int count = three ? 3 : 1;
  for (int i = 0; i < count; ++i) {
    out[i] = float_element(*t, i);
    if (!std::isfinite(out[i]) || out[i] <= 0.0f) {
      return tensor_error(name,
                          "expected a finite positive global scale, got " + std::to_string(out[i]));
    }
  }
  for (int i = count; i < 3; ++i) out[i] = out[0];
  *sections = std::max(*sections, count);
  return Status::Ok();
}

// Data [N, row_bytes(K)] (U8; F4 [N, K]) and scales [N, K / SFV] with K a multiple of the
// block.
Status read_blocked(const Tensors& f, const std::string& data_name, const std::string& scale_name,
                    std::initializer_list<const char*> scale_dtypes, BlockFormat bf, Shard* s) {
  const SafetensorsTensor* data = nullptr;
  const SafetensorsTensor* scales = nullptr;
  const bool fp8 = bf == BlockFormat::kMXFP8;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, data_name,
                                     fp8 ? std::initializer_list<const char*>{"F8_E4M3"}
                                         : std::initializer_list<const char*>{"U8", "F4"},
                                     &data));
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, scale_name, scale_dtypes, &scales));
  const int sfv = sf_vector_size(bf);
  if (data->shape.size() != 2 || data->shape[0] == 0 || data->shape[1] == 0) {
    return tensor_error(data_name, "expected a non-empty 2-D weight [N, " +
                                       std::string(fp8 || data->dtype == "F4" ? "K" : "K/2") +
                                       "], got " + shape_str(data->shape));
  }
  s->n = data->shape[0];
  s->k = fp8 ? data->shape[1] : data->shape[1] * codes_per_unit(*data);
  if (s->k % sfv != 0) {
    return tensor_error(data_name, "expected K = " + str(s->k) + " to be a multiple of the " +
                                       block_format_name(bf) + " block of " + str(sfv));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape(*scales, {s->n, s->k / sfv}, "[N, K / block]"));
  s->data = data->data;
  s->scales = scales->data;
  return Status::Ok();
}

Status read_nvfp4_compressed_tensors(const Tensors& f, const std::string& p, bool per_section,
                                     Shard* s) {
  s->format = CheckpointFormat::kNVFP4CompressedTensors;
  QUANTKV_RETURN_IF_ERROR(read_blocked(f, p + ".weight_packed", p + ".weight_scale", {"F8_E4M3"},
                                       BlockFormat::kNVFP4, s));
  // compressed-tensors stores the quantiser's multipliers (448 * 6 / amax) themselves.
  float g[3];
  QUANTKV_RETURN_IF_ERROR(
      get_global(f, p + ".weight_global_scale", per_section, g, &s->scale_sections));
  for (int i = 0; i < 3; ++i) s->weight_factor[i] = 1.0f / g[i];
  if (f.has(p + ".input_global_scale")) {
    QUANTKV_RETURN_IF_ERROR(
        get_global(f, p + ".input_global_scale", per_section, s->input_global, &s->scale_sections));
  }
  return Status::Ok();
}

// compressed-tensors' mxfp4-pack-quantized: weight_packed like NVFP4, an e8m0 weight_scale
// [N, K/32] (U8, or F8_E8M0 with a scale_dtype of torch.float8_e8m0fnu) and no global scale.
Status read_mxfp4_compressed_tensors(const Tensors& f, const std::string& p, Shard* s) {
  s->format = CheckpointFormat::kMXFP4CompressedTensors;
  return read_blocked(f, p + ".weight_packed", p + ".weight_scale", {"U8", "F8_E8M0"},
                      BlockFormat::kMXFP4, s);
}

// weight_packed is NVFP4 with a weight_global_scale (or an fp8 weight_scale), else MXFP4.
Status read_compressed_tensors(const Tensors& f, const std::string& p, bool per_section, Shard* s) {
  if (!f.has(p + ".weight_global_scale") && f.has(p + ".weight_scale")) {
    const SafetensorsTensor* scale = nullptr;
    QUANTKV_RETURN_IF_ERROR(f.get(p + ".weight_scale", &scale));
    if (scale->dtype == "U8" || scale->dtype == "F8_E8M0") {
      return read_mxfp4_compressed_tensors(f, p, s);
    }
  }
  return read_nvfp4_compressed_tensors(f, p, per_section, s);
}

Status read_nvfp4_modelopt(const Tensors& f, const std::string& p, bool per_section, Shard* s) {
  s->format = CheckpointFormat::kNVFP4ModelOpt;
  QUANTKV_RETURN_IF_ERROR(
      read_blocked(f, p + ".weight", p + ".weight_scale", {"F8_E4M3"}, BlockFormat::kNVFP4, s));
  // ModelOpt stores the dequantisation factors amax / (448 * 6): the inverse multipliers.
  QUANTKV_RETURN_IF_ERROR(
      get_global(f, p + ".weight_scale_2", per_section, s->weight_factor, &s->scale_sections));
  if (f.has(p + ".input_scale")) {
    float in[3];
    QUANTKV_RETURN_IF_ERROR(get_global(f, p + ".input_scale", per_section, in, &s->scale_sections));
    for (int i = 0; i < 3; ++i) s->input_global[i] = 1.0f / in[i];
  }
  return Status::Ok();
}

Status read_mxfp4(const Tensors& f, const std::string& p, Shard* s) {
  s->format = CheckpointFormat::kMXFP4;
  // gpt-oss's Hugging Face checkpoints name them <param>_blocks / _scales, its own
  // checkpoints <param>.blocks / .scales.
  const bool hf = f.has(p + ".weight_blocks");
  const std::string blocks_name = hf ? p + ".weight_blocks" : p + ".blocks";
  const std::string scales_name = hf ? p + ".weight_scales" : p + ".scales";
  const SafetensorsTensor* blocks = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, blocks_name, {"U8", "F4"}, &blocks));
  const int64_t block_extent = 32 / codes_per_unit(*blocks);  // 16 bytes or 32 F4 codes
  if (blocks->shape.size() != 3 || blocks->shape[2] != block_extent || blocks->shape[0] == 0 ||
      blocks->shape[1] == 0) {
    return tensor_error(blocks_name, "expected [N, K/32, " + str(block_extent) +
                                         "] (32 e2m1 values per block as " +
                                         (block_extent == 16 ? "16 U8 bytes" : "32 F4 codes") +
                                         "), got " + shape_str(blocks->shape));
  }
  const SafetensorsTensor* scales = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, scales_name, {"U8", "F8_E8M0"}, &scales));
  s->n = blocks->shape[0];
  s->k = blocks->shape[1] * 32;
  QUANTKV_RETURN_IF_ERROR(check_shape(*scales, {s->n, s->k / 32}, "[N, K / 32]"));
  s->data = blocks->data;  // [N, K/32, 16] is [N, K/2] row-major
  s->scales = scales->data;
  return Status::Ok();
}

Status read_mxfp8(const Tensors& f, const std::string& p, Shard* s) {
  s->format = CheckpointFormat::kMXFP8;
  return read_blocked(f, p + ".weight", p + ".weight_scale", {"U8", "F8_E8M0"}, BlockFormat::kMXFP8,
                      s);
}

}  // namespace

// Reads projection `p` in whichever layout its tensors have; `per_section` admits global
// scales of shape [3] (a fused q/k/v projection).
Status read_shard(const Tensors& f, const std::string& p, bool per_section, Shard* s) {
  if (f.has(p + ".weight_packed")) return read_compressed_tensors(f, p, per_section, s);
  if (f.has(p + ".weight_blocks") || f.has(p + ".blocks")) return read_mxfp4(f, p, s);
  if (f.has(p + ".weight")) {
    const SafetensorsTensor* w = nullptr;
    QUANTKV_RETURN_IF_ERROR(f.get(p + ".weight", &w));
    if (w->dtype == "F8_E4M3") return read_mxfp8(f, p, s);
    if (is_packed_fp4(*w)) return read_nvfp4_modelopt(f, p, per_section, s);
    return tensor_error(w->name,
                        "expected a quantised weight (U8 or F4 packed e2m1 with "
                        "weight_scale_2, or F8_E4M3 with e8m0 weight_scale), got dtype " +
                            w->dtype);
  }
  return invalid_argument("projection '" + p + "': no quantised weight in " + f.label() +
                          " (looked for " + p +
                          ".weight_packed, .weight, .weight_blocks, .blocks)");
}

}  // namespace quantkv::checkpoint_detail
