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
#include "shard_reader.hpp"

namespace quantkv {
namespace {

using checkpoint_detail::read_shard;
using checkpoint_detail::Shard;
using checkpoint_detail::str;
using checkpoint_detail::Tensors;

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
