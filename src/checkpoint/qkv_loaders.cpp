// The loaders of the five checkpoint layouts (docs/checkpoints.md): each shard is read in place
// from the mapped file and checked, the shards' rows are stacked (q, k, v; gate, up; or one
// projection alone) and prepared once (prepare_weights) with their row-major scales as stored:
// no swizzle round trip.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "quantkv/checkpoint.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + str(s[i]);
  return out + "]";
}

// The tensors the loaders read: one file, or a checkpoint (one file or shards).
class Tensors {
 public:
  explicit Tensors(const SafetensorsFile& f) : file_(&f) {}
  explicit Tensors(const SafetensorsCheckpoint& c) : ckpt_(&c) {}
  bool has(const std::string& name) const {
    return file_ != nullptr ? file_->find(name) != nullptr : ckpt_->contains(name);
  }
  // Errors: missing, or (sharded) its shard cannot be read or does not hold it.
  Status get(const std::string& name, const SafetensorsTensor** out) const {
    if (ckpt_ != nullptr) return ckpt_->tensor(name, out);
    *out = file_->find(name);
    return *out != nullptr
               ? Status::Ok()
               : invalid_argument("tensor '" + name + "': missing from " + file_->label());
  }
  const std::string& label() const { return file_ != nullptr ? file_->label() : ckpt_->label(); }
  std::vector<std::string> names() const {
    if (ckpt_ != nullptr) return ckpt_->tensor_names();
    std::vector<std::string> out;
    for (const SafetensorsTensor& t : file_->tensors()) out.push_back(t.name);
    return out;
  }

 private:
  const SafetensorsFile* file_ = nullptr;
  const SafetensorsCheckpoint* ckpt_ = nullptr;
};

// One projection in the library's byte layout: data [n, row_bytes(k)] (packed e2m1 with the
// even element in the low nibble, or e4m3) and linear scales [n, k / SFV], both pointing into
// the mapped file. Global scales are one per tensor or (a fused projection) one per section.
struct Shard {
  CheckpointFormat format{};
  int64_t n = 0, k = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  int scale_sections = 1;              // 3: the global scales below differ per q/k/v section
  float weight_factor[3] = {1, 1, 1};  // dequantised = value * |scale| * weight_factor (1 / g_w)
  float input_global[3] = {1, 1, 1};   // g_a
};

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
    if (t->dtype == "F32") {
      std::memcpy(&out[i], t->data + 4 * i, 4);
    } else {
      uint16_t b = 0;
      std::memcpy(&b, t->data + 2 * i, 2);
      const uint32_t u = uint32_t(b) << 16;
      std::memcpy(&out[i], &u, 4);
    }
    if (!std::isfinite(out[i]) || out[i] <= 0.0f) {
      return tensor_error(name,
                          "expected a finite positive global scale, got " + std::to_string(out[i]));
    }
  }
  for (int i = count; i < 3; ++i) out[i] = out[0];
  *sections = std::max(*sections, count);
  return Status::Ok();
}

// Packed e2m1 data comes as U8 (two codes per byte: the last extent counts bytes) or as
// safetensors' F4 (torch's float4_e2m1fn_x2: the same bytes, the last extent counts codes).
// Both keep code 2i in the low nibble.
bool is_packed_fp4(const SafetensorsTensor& t) { return t.dtype == "U8" || t.dtype == "F4"; }
int64_t codes_per_unit(const SafetensorsTensor& t) { return t.dtype == "F4" ? 1 : 2; }

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

// "projection 'p': expected <want>, got <got>": a shard that does not fit the first.
Status shard_mismatch(const std::string& p, const std::string& want, const std::string& got) {
  return invalid_argument("projection '" + p + "': expected " + want + ", got " + got);
}

// The projections `names`, one shard each, in the same layout and of the same K as the first
// (`first`: how the messages call it).
Status read_stacked_shards(const Tensors& f, const std::vector<std::string>& names,
                           const std::string& first, std::vector<Shard>* shards) {
  if (names.empty()) {
    return invalid_argument(
        "projections: expected at least one projection name, got an empty list");
  }
  shards->assign(names.size(), Shard{});
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& p = names[i];
    Shard& s = (*shards)[i];
    QUANTKV_RETURN_IF_ERROR(read_shard(f, p, /*per_section=*/false, &s));
    if (i > 0 && s.format != (*shards)[0].format) {
      return shard_mismatch(p,
                            std::string("the layout of ") + first + " (" +
                                checkpoint_format_name((*shards)[0].format) + ")",
                            checkpoint_format_name(s.format));
    }
    if (i > 0 && s.k != (*shards)[0].k) {
      return shard_mismatch(p, "K = " + str((*shards)[0].k) + " of " + first, str(s.k));
    }
  }
  return Status::Ok();
}

// `prefix`.q_proj, .k_proj, .v_proj; an empty prefix: q_proj, k_proj, v_proj.
Status read_qkv_shards(const Tensors& f, std::string_view prefix, std::vector<Shard>* shards) {
  const std::string lead = prefix.empty() ? std::string() : std::string(prefix) + ".";
  return read_stacked_shards(f, {lead + "q_proj", lead + "k_proj", lead + "v_proj"}, "q_proj",
                             shards);
}

// One projection `projection` alone (a single section).
Status read_single_shard(const Tensors& f, std::string_view projection,
                         std::vector<Shard>* shards) {
  const std::string p(projection);
  return read_stacked_shards(f, {p}, p, shards);
}

// The fused projection's rows split into its q, k, v sections (views into the same tensor),
// each with its section's global scales.
Status read_fused_shards(const Tensors& f, std::string_view projection, QkvSections sections,
                         std::vector<Shard>* shards) {
  const std::string p(projection);
  Shard fused;
  QUANTKV_RETURN_IF_ERROR(read_shard(f, p, /*per_section=*/true, &fused));
  const int64_t rows[3] = {sections.q, sections.k, sections.v};
  if (rows[0] < 1 || rows[1] < 1 || rows[2] < 1 || rows[0] > fused.n || rows[1] > fused.n ||
      rows[2] > fused.n || rows[0] + rows[1] + rows[2] != fused.n) {
    return invalid_argument("sections: expected q + k + v = N = " + str(fused.n) + " rows of '" +
                            p + "' (each >= 1), got " + str(rows[0]) + " + " + str(rows[1]) +
                            " + " + str(rows[2]));
  }
  const BlockFormat bf = checkpoint_block_format(fused.format);
  const int64_t rb = row_bytes(bf, fused.k), kb = fused.k / sf_vector_size(bf);
  int64_t row0 = 0;
  shards->assign(3, fused);
  for (int i = 0; i < 3; ++i) {
    Shard& s = (*shards)[i];
    s.n = rows[i];
    s.data = fused.data + row0 * rb;
    s.scales = fused.scales + row0 * kb;
    s.scale_sections = 1;
    s.weight_factor[0] = fused.weight_factor[i];
    s.input_global[0] = fused.input_global[i];
    row0 += rows[i];
  }
  return Status::Ok();
}

Status stack_shards(const std::vector<Shard>& shards, LinearCheckpointWeights* out,
                    const Context& ctx) {
  const BlockFormat bf = checkpoint_block_format(shards[0].format);
  const int64_t k = shards[0].k, kb_count = k / sf_vector_size(bf), rb = row_bytes(bf, k);
  int64_t n = 0;
  for (const Shard& s : shards) n += s.n;
  // Stack the shards: data rows and linear scale rows in order.
  std::vector<uint8_t> data(std::size_t(n * rb)), linear(std::size_t(n * kb_count));
  int64_t row = 0;
  for (const Shard& s : shards) {
    std::memcpy(data.data() + row * rb, s.data, std::size_t(s.n * rb));
    std::memcpy(linear.data() + row * kb_count, s.scales, std::size_t(s.n * kb_count));
    row += s.n;
  }
  // The checkpoint's row-major scales go to the packer as they are (no swizzle round trip).
  LinearCheckpointWeights w;
  WeightSource source;
  source.data = TensorView<const uint8_t, 2>{data.data(), {n, rb}, {rb, 1}};
  source.scale_rows = TensorView<const uint8_t, 2>{linear.data(), {n, kb_count}, {kb_count, 1}};
  source.format = bf;
  QUANTKV_RETURN_IF_ERROR(prepare_weights(source, &w.weights, ctx));
  w.format = shards[0].format;
  w.input_global = shards[0].input_global[0];
  for (const Shard& s : shards) {
    w.section_rows.push_back(s.n);
    w.weight_factor.push_back(s.weight_factor[0]);
    // One activation quantiser feeds every section: the smallest multiplier (largest
    // calibrated amax) never saturates any shard's calibration.
    w.input_global = std::min(w.input_global, s.input_global[0]);
  }
  *out = std::move(w);
  return Status::Ok();
}

void deliver(LinearCheckpointWeights&& w, LinearCheckpointWeights* out) { *out = std::move(w); }

void deliver(LinearCheckpointWeights&& w, QkvCheckpointWeights* out) {
  QkvCheckpointWeights q;
  q.format = w.format;
  q.weights = std::move(w.weights);
  q.q_rows = w.section_rows[0];
  q.k_rows = w.section_rows[1];
  q.v_rows = w.section_rows[2];
  q.weight_factor = {w.weight_factor[0], w.weight_factor[1], w.weight_factor[2]};
  q.input_global = w.input_global;
  *out = std::move(q);
}

Status dequantize_shards(const std::vector<Shard>& shards, std::vector<float>* out, int64_t* n_out,
                         int64_t* k_out) {
  const BlockFormat bf = checkpoint_block_format(shards[0].format);
  const int64_t k = shards[0].k, sfv = sf_vector_size(bf), kb_count = k / sfv;
  const int64_t rb = row_bytes(bf, k);
  int64_t n = 0;
  for (const Shard& s : shards) n += s.n;
  std::vector<float> w(std::size_t(n * k), 0.0f);
  int64_t row0 = 0;
  for (const Shard& s : shards) {
    const float factor = s.weight_factor[0];
    for (int64_t r = 0; r < s.n; ++r) {
      float* dst = w.data() + (row0 + r) * k;
      for (int64_t c = 0; c < k; ++c) {
        const uint8_t code = s.scales[r * kb_count + c / sfv];
        const float scale =
            has_e8m0_scales(bf) ? e8m0_to_float(code) : e4m3_to_float(uint8_t(code & 0x7F));
        const uint8_t byte = s.data[r * rb + (bf == BlockFormat::kMXFP8 ? c : c / 2)];
        const float v = bf == BlockFormat::kMXFP8
                            ? e4m3_to_float(byte)
                            : e2m1_to_float(uint8_t(c % 2 ? byte >> 4 : byte & 0xF));
        dst[c] = v * scale * factor;
      }
    }
    row0 += s.n;
  }
  *out = std::move(w);
  *n_out = n;
  *k_out = k;
  return Status::Ok();
}

// The entry points: `read` fills the shards; the stacking buffers, the swizzled scales and the
// fp32 copy are the library's own allocations, so a std::bad_alloc becomes `resource
// exhausted` (issue 15). Nothing is written to the outputs before success.
template <typename Out, typename Read>
Status load_with(const char* what, Read&& read, Out* out, const Context& ctx) {
  return run_entry_point(what, ctx, [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    std::vector<Shard> shards;
    QUANTKV_RETURN_IF_ERROR(read(&shards));
    LinearCheckpointWeights w;
    QUANTKV_RETURN_IF_ERROR(stack_shards(shards, &w, ctx));
    deliver(std::move(w), out);
    return Status::Ok();
  });
}

template <typename Read>
Status dequantize_with(const char* what, Read&& read, std::vector<float>* out, int64_t* n,
                       int64_t* k) {
  return catch_out_of_memory(what, [&]() -> Status {
    if (out == nullptr || n == nullptr || k == nullptr) {
      return invalid_argument("out, n, k: pointers must not be null");
    }
    std::vector<Shard> shards;
    QUANTKV_RETURN_IF_ERROR(read(&shards));
    return dequantize_shards(shards, out, n, k);
  });
}

std::vector<QuantizedProjection> list_projections(const Tensors& f) {
  static const char* kSuffixes[] = {".weight_packed", ".weight_blocks", ".blocks", ".weight"};
  std::vector<QuantizedProjection> out;
  for (const std::string& name : f.names()) {
    for (const char* suffix : kSuffixes) {
      const std::size_t len = std::strlen(suffix);
      if (name.size() <= len || name.compare(name.size() - len, len, suffix) != 0) continue;
      const std::string base = name.substr(0, name.size() - len);
      Shard s;
      if (read_shard(f, base, /*per_section=*/true, &s).ok() &&
          (out.empty() || out.back().name != base)) {
        out.push_back(
            {base, s.format, s.n, s.k, s.weight_factor[0], s.input_global[0], s.scale_sections});
      }
      break;
    }
  }
  std::sort(out.begin(), out.end(), [](const QuantizedProjection& a, const QuantizedProjection& b) {
    return a.name < b.name;
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const QuantizedProjection& a, const QuantizedProjection& b) {
                          return a.name == b.name;
                        }),
            out.end());
  return out;
}

}  // namespace

const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kNVFP4CompressedTensors:
      return "NVFP4 (compressed-tensors)";
    case CheckpointFormat::kNVFP4ModelOpt:
      return "NVFP4 (ModelOpt)";
    case CheckpointFormat::kMXFP4:
      return "MXFP4 (gpt-oss)";
    case CheckpointFormat::kMXFP8:
      return "MXFP8";
    case CheckpointFormat::kMXFP4CompressedTensors:
      return "MXFP4 (compressed-tensors)";
  }
  return "unknown";
}

BlockFormat checkpoint_block_format(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kMXFP4:
    case CheckpointFormat::kMXFP4CompressedTensors:
      return BlockFormat::kMXFP4;
    case CheckpointFormat::kMXFP8:
      return BlockFormat::kMXFP8;
    default:
      return BlockFormat::kNVFP4;
  }
}

SectionScales QkvCheckpointWeights::gemm_scales() const {
  return {weight_factor.q / input_global, weight_factor.k / input_global,
          weight_factor.v / input_global};
}

std::vector<float> LinearCheckpointWeights::column_factors(bool weight_only) const {
  std::vector<float> out;
  out.reserve(std::size_t(weights.n));
  for (std::size_t i = 0; i < section_rows.size() && i < weight_factor.size(); ++i) {
    const float f = weight_only ? weight_factor[i] : weight_factor[i] / input_global;
    out.insert(out.end(), std::size_t(section_rows[i]), f);
  }
  return out;
}

std::vector<QuantizedProjection> list_quantized_projections(const SafetensorsFile& file) {
  return list_projections(Tensors(file));
}

std::vector<QuantizedProjection> list_quantized_projections(const SafetensorsCheckpoint& ckpt) {
  return list_projections(Tensors(ckpt));
}

Status load_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                        QkvCheckpointWeights* out, const Context& ctx) {
  return load_with(
      "load_qkv_weights",
      [&](std::vector<Shard>* s) { return read_qkv_shards(Tensors(file), prefix, s); }, out, ctx);
}

Status load_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view prefix,
                        QkvCheckpointWeights* out, const Context& ctx) {
  return load_with(
      "load_qkv_weights",
      [&](std::vector<Shard>* s) { return read_qkv_shards(Tensors(ckpt), prefix, s); }, out, ctx);
}

Status load_fused_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                              QkvSections sections, QkvCheckpointWeights* out, const Context& ctx) {
  return load_with(
      "load_fused_qkv_weights",
      [&](std::vector<Shard>* s) {
        return read_fused_shards(Tensors(ckpt), projection, sections, s);
      },
      out, ctx);
}

Status dequantize_qkv_weights(const SafetensorsFile& file, std::string_view prefix,
                              std::vector<float>* out, int64_t* n, int64_t* k) {
  return dequantize_with(
      "dequantize_qkv_weights",
      [&](std::vector<Shard>* s) { return read_qkv_shards(Tensors(file), prefix, s); }, out, n, k);
}

Status dequantize_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view prefix,
                              std::vector<float>* out, int64_t* n, int64_t* k) {
  return dequantize_with(
      "dequantize_qkv_weights",
      [&](std::vector<Shard>* s) { return read_qkv_shards(Tensors(ckpt), prefix, s); }, out, n, k);
}

Status dequantize_fused_qkv_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                                    QkvSections sections, std::vector<float>* out, int64_t* n,
                                    int64_t* k) {
  return dequantize_with(
      "dequantize_fused_qkv_weights",
      [&](std::vector<Shard>* s) {
        return read_fused_shards(Tensors(ckpt), projection, sections, s);
      },
      out, n, k);
}

Status load_linear_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                           LinearCheckpointWeights* out, const Context& ctx) {
  return load_with(
      "load_linear_weights",
      [&](std::vector<Shard>* s) { return read_single_shard(Tensors(ckpt), projection, s); }, out,
      ctx);
}

Status load_stacked_linear_weights(const SafetensorsCheckpoint& ckpt,
                                   const std::vector<std::string>& projections,
                                   LinearCheckpointWeights* out, const Context& ctx) {
  return load_with(
      "load_stacked_linear_weights",
      [&](std::vector<Shard>* s) {
        return read_stacked_shards(Tensors(ckpt), projections,
                                   projections.empty() ? std::string() : projections[0], s);
      },
      out, ctx);
}

Status dequantize_linear_weights(const SafetensorsCheckpoint& ckpt, std::string_view projection,
                                 std::vector<float>* out, int64_t* n, int64_t* k) {
  return dequantize_with(
      "dequantize_linear_weights",
      [&](std::vector<Shard>* s) { return read_single_shard(Tensors(ckpt), projection, s); }, out,
      n, k);
}

}  // namespace quantkv
