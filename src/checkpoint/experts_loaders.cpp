// The MoE experts loaders (quantkv/checkpoint.hpp, docs/checkpoints.md): gpt-oss's stacked
// MXFP4 tensors go to prepare_experts as they lie in the mapped file (their [E, N, K/32, 16]
// blocks are [E, N, K/2] row-major bytes); per-expert projections are read by the shard reader
// and each expert's [gate; up] rows stacked in a buffer of one expert before it is prepared.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/out_of_memory.hpp"
#include "quantkv/checkpoint.hpp"
#include "quantkv/scale_layout.hpp"
#include "shard_reader.hpp"

namespace quantkv {
namespace {

using checkpoint_detail::check_shape;
using checkpoint_detail::codes_per_unit;
using checkpoint_detail::float_element;
using checkpoint_detail::get_tensor;
using checkpoint_detail::read_shard;
using checkpoint_detail::shape_str;
using checkpoint_detail::Shard;
using checkpoint_detail::str;
using checkpoint_detail::tensor_error;
using checkpoint_detail::Tensors;

// ------------------------------------------------------------------ gpt-oss (stacked MXFP4)

// The tensor names of one stacked layer: Hugging Face's or gpt-oss's own.
struct GptOssNames {
  std::string w13_blocks, w13_scales, w13_bias, w2_blocks, w2_scales, w2_bias;
};

GptOssNames gpt_oss_names(const Tensors& f, const std::string& p) {
  if (f.has(p + ".mlp1_weight.blocks")) {
    return {p + ".mlp1_weight.blocks", p + ".mlp1_weight.scales", p + ".mlp1_bias",
            p + ".mlp2_weight.blocks", p + ".mlp2_weight.scales", p + ".mlp2_bias"};
  }
  return {p + ".gate_up_proj_blocks", p + ".gate_up_proj_scales", p + ".gate_up_proj_bias",
          p + ".down_proj_blocks",    p + ".down_proj_scales",    p + ".down_proj_bias"};
}

bool has_gpt_oss(const Tensors& f, const std::string& p) {
  return f.has(p + ".gate_up_proj_blocks") || f.has(p + ".mlp1_weight.blocks");
}

// One stacked MXFP4 matrix: blocks U8 [E, N, K/32, 16] (F4 [E, N, K/32, 32]), scales e8m0
// [E, N, K/32].
struct StackedMx {
  int64_t e = 0, n = 0, k = 0;
  const uint8_t* data = nullptr;    // [E, N, K/2]
  const uint8_t* scales = nullptr;  // [E, N, K/32]
};

Status read_stacked_mx(const Tensors& f, const std::string& blocks_name,
                       const std::string& scales_name, StackedMx* m) {
  const SafetensorsTensor* blocks = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, blocks_name, {"U8", "F4"}, &blocks));
  const int64_t block_extent = 32 / codes_per_unit(*blocks);
  const std::vector<int64_t>& s = blocks->shape;
  if (s.size() != 4 || s[3] != block_extent || s[0] == 0 || s[1] == 0 || s[2] == 0) {
    return tensor_error(blocks_name, "expected a non-empty [E, N, K/32, " + str(block_extent) +
                                         "] (32 e2m1 values per block), got " + shape_str(s));
  }
  const SafetensorsTensor* scales = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, scales_name, {"U8", "F8_E8M0"}, &scales));
  QUANTKV_RETURN_IF_ERROR(check_shape(*scales, {s[0], s[1], s[2]}, "[E, N, K / 32]"));
  *m = {s[0], s[1], s[2] * 32, blocks->data, scales->data};
  return Status::Ok();
}

// An optional fp32 / bf16 bias of `shape`, converted to fp32 (empty when absent).
Status read_bias(const Tensors& f, const std::string& name, const std::vector<int64_t>& shape,
                 const char* what, std::vector<float>* out) {
  out->clear();
  if (!f.has(name)) return Status::Ok();
  const SafetensorsTensor* t = nullptr;
  QUANTKV_RETURN_IF_ERROR(get_tensor(f, name, {"F32", "BF16"}, &t));
  QUANTKV_RETURN_IF_ERROR(check_shape(*t, shape, what));
  int64_t count = 1;
  for (const int64_t d : shape) count *= d;
  out->resize(std::size_t(count));
  for (int64_t i = 0; i < count; ++i) (*out)[std::size_t(i)] = float_element(*t, i);
  return Status::Ok();
}

// What the loaders find before anything is prepared (also what inspect lists).
struct ExpertsRead {
  ExpertsCheckpointLayout layout{};
  CheckpointFormat format{};
  int64_t e = 0, h = 0, i = 0;
  StackedMx w13, w2;                  // gpt-oss
  std::vector<Shard> gate, up, down;  // per expert
  std::vector<float> w13_bias, w2_bias;
};

Status read_gpt_oss(const Tensors& f, const std::string& p, ExpertsRead* r) {
  const GptOssNames n = gpt_oss_names(f, p);
  r->layout = ExpertsCheckpointLayout::kGptOss;
  r->format = CheckpointFormat::kMXFP4;
  QUANTKV_RETURN_IF_ERROR(read_stacked_mx(f, n.w13_blocks, n.w13_scales, &r->w13));
  QUANTKV_RETURN_IF_ERROR(read_stacked_mx(f, n.w2_blocks, n.w2_scales, &r->w2));
  if (r->w13.n % 2 != 0) {
    return tensor_error(n.w13_blocks,
                        "expected an even number of rows 2I (gate and up "
                        "interleaved), got " +
                            str(r->w13.n));
  }
  r->e = r->w13.e;
  r->h = r->w13.k;
  r->i = r->w13.n / 2;
  const std::vector<int64_t> want = {r->e, r->h, r->i / 32, 16};
  if (r->w2.e != r->e || r->w2.n != r->h || r->w2.k != r->i) {
    return tensor_error(n.w2_blocks, "expected [E, H, I/32, 16] = " + shape_str(want) +
                                         " (E, H, I of " + n.w13_blocks +
                                         "), got E = " + str(r->w2.e) + ", H = " + str(r->w2.n) +
                                         ", I = " + str(r->w2.k));
  }
  QUANTKV_RETURN_IF_ERROR(read_bias(f, n.w13_bias, {r->e, 2 * r->i}, "[E, 2I]", &r->w13_bias));
  return read_bias(f, n.w2_bias, {r->e, r->h}, "[E, H]", &r->w2_bias);
}

// ------------------------------------------------------------------ per expert

// The names of one expert's three projections: gate_proj / up_proj / down_proj, or Mixtral's
// w1 / w3 / w2.
struct ExpertNames {
  std::string gate, up, down;
};

bool has_projection(const Tensors& f, const std::string& p) {
  return f.has(p + ".weight_packed") || f.has(p + ".weight") || f.has(p + ".weight_blocks") ||
         f.has(p + ".blocks");
}

ExpertNames expert_names(const Tensors& f, const std::string& p, int64_t e) {
  const std::string base = p + "." + str(e) + ".";
  if (!has_projection(f, base + "gate_proj") && has_projection(f, base + "w1")) {
    return {base + "w1", base + "w3", base + "w2"};
  }
  return {base + "gate_proj", base + "up_proj", base + "down_proj"};
}

// E: one more than the largest index e of a name PREFIX.{e}.<something>.
int64_t count_experts(const Tensors& f, const std::string& p) {
  const std::string lead = p + ".";
  int64_t count = 0;
  for (const std::string& name : f.names()) {
    if (name.size() <= lead.size() || name.compare(0, lead.size(), lead) != 0) continue;
    std::size_t at = lead.size();
    int64_t e = 0;
    bool digits = false;
    while (at < name.size() && name[at] >= '0' && name[at] <= '9' && e < (int64_t(1) << 40)) {
      e = e * 10 + (name[at++] - '0');
      digits = true;
    }
    if (digits && at < name.size() && name[at] == '.') count = std::max(count, e + 1);
  }
  return count;
}

Status expert_error(int64_t e, const std::string& what) {
  return invalid_argument("expert " + str(e) + ": " + what);
}

// One expert's projection `p` in the layout and shape of `want` (expert 0's), or any when
// `want` is null.
Status read_expert_shard(const Tensors& f, int64_t e, const std::string& p, const Shard* want,
                         int64_t n, int64_t k, Shard* s) {
  QUANTKV_RETURN_IF_ERROR(read_shard(f, p, /*per_section=*/false, s));
  if (want != nullptr && s->format != want->format) {
    return expert_error(e, "projection '" + p + "': expected the layout of expert 0 (" +
                               checkpoint_format_name(want->format) + "), got " +
                               checkpoint_format_name(s->format));
  }
  if ((n > 0 && s->n != n) || (k > 0 && s->k != k)) {
    return expert_error(e, "projection '" + p + "': expected [N, K] = [" + str(n) + ", " + str(k) +
                               "], got [" + str(s->n) + ", " + str(s->k) + "]");
  }
  return Status::Ok();
}

// An optional per-expert bias: present on expert 0 means present on every expert.
Status read_expert_bias(const Tensors& f, const std::string& p, int64_t n, bool required,
                        std::vector<float>* dst) {
  if (!required) return Status::Ok();
  std::vector<float> b;
  QUANTKV_RETURN_IF_ERROR(read_bias(f, p + ".bias", {n}, "[N]", &b));
  if (b.empty()) {
    return tensor_error(p + ".bias", "missing (expert 0's projections have biases)");
  }
  dst->insert(dst->end(), b.begin(), b.end());
  return Status::Ok();
}

Status read_per_expert(const Tensors& f, const std::string& p, ExpertsRead* r) {
  r->layout = ExpertsCheckpointLayout::kPerExpert;
  r->e = count_experts(f, p);
  if (r->e == 0) {
    return invalid_argument("prefix '" + p + "': no experts in " + f.label() + " (looked for " + p +
                            ".0.gate_proj, " + p + ".0.w1)");
  }
  // The shards grow expert by expert: a name with a huge index fails on the first expert
  // missing, before anything of that size is allocated.
  const bool biases = f.has(expert_names(f, p, 0).gate + ".bias");
  for (int64_t e = 0; e < r->e; ++e) {
    const ExpertNames n = expert_names(f, p, e);
    const auto k = std::size_t(e);
    r->gate.emplace_back();
    r->up.emplace_back();
    r->down.emplace_back();
    const Shard* first = e == 0 ? nullptr : &r->gate[0];
    QUANTKV_RETURN_IF_ERROR(
        read_expert_shard(f, e, n.gate, first, e == 0 ? 0 : r->i, r->h, &r->gate[k]));
    if (e == 0) {
      r->format = r->gate[0].format;
      r->i = r->gate[0].n;
      r->h = r->gate[0].k;
    }
    QUANTKV_RETURN_IF_ERROR(read_expert_shard(f, e, n.up, &r->gate[0], r->i, r->h, &r->up[k]));
    QUANTKV_RETURN_IF_ERROR(read_expert_shard(f, e, n.down, &r->gate[0], r->h, r->i, &r->down[k]));
    QUANTKV_RETURN_IF_ERROR(read_expert_bias(f, n.gate, r->i, biases, &r->w13_bias));
    QUANTKV_RETURN_IF_ERROR(read_expert_bias(f, n.up, r->i, biases, &r->w13_bias));
    QUANTKV_RETURN_IF_ERROR(read_expert_bias(f, n.down, r->h, biases, &r->w2_bias));
  }
  return Status::Ok();
}

Status read_experts(const Tensors& f, std::string_view prefix, ExpertsCheckpointLayout layout,
                    ExpertsRead* r) {
  const std::string p(prefix);
  switch (layout) {
    case ExpertsCheckpointLayout::kGptOss:
      return read_gpt_oss(f, p, r);
    case ExpertsCheckpointLayout::kPerExpert:
      return read_per_expert(f, p, r);
    case ExpertsCheckpointLayout::kAuto:
      return has_gpt_oss(f, p) ? read_gpt_oss(f, p, r) : read_per_expert(f, p, r);
  }
  return invalid_argument("layout: expected kAuto, kGptOss or kPerExpert, got " +
                          str(int64_t(layout)));
}

// ------------------------------------------------------------------ preparing

Status prepare_gpt_oss(const ExpertsRead& r, PreparedExperts* out, const Context& ctx) {
  const int64_t e = r.e, h = r.h, i = r.i;
  ExpertsSource s;
  s.format = BlockFormat::kMXFP4;
  s.w13 = make_view(r.w13.data, e, 2 * i, h / 2);
  s.w13_scale = make_view(r.w13.scales, e, 2 * i, h / 32);
  s.w2 = make_view(r.w2.data, e, h, i / 2);
  s.w2_scale = make_view(r.w2.scales, e, h, i / 32);
  return prepare_experts(s, out, ctx);
}

// Each expert on its own (one expert's [gate; up] stacked at a time), then moved into `out`.
Status prepare_per_expert(const ExpertsRead& r, PreparedExperts* out, const Context& ctx) {
  const BlockFormat bf = checkpoint_block_format(r.format);
  const int64_t h = r.h, i = r.i, sfv = sf_vector_size(bf);
  const int64_t rb13 = row_bytes(bf, h), rb2 = row_bytes(bf, i);
  std::vector<uint8_t> w13(std::size_t(2 * i * rb13)), s13(std::size_t(2 * i * (h / sfv)));
  PreparedExperts all;
  for (std::size_t e = 0; e < std::size_t(r.e); ++e) {
    const Shard &g = r.gate[e], &u = r.up[e], &d = r.down[e];
    std::memcpy(w13.data(), g.data, std::size_t(i * rb13));
    std::memcpy(w13.data() + i * rb13, u.data, std::size_t(i * rb13));
    std::memcpy(s13.data(), g.scales, std::size_t(i * (h / sfv)));
    std::memcpy(s13.data() + i * (h / sfv), u.scales, std::size_t(i * (h / sfv)));
    // Gate's and up's own factors (w13_alpha, w3_alpha): equal when the quantiser gave them one
    // global scale, as llm-compressor does; up's columns then take the same factor.
    const float w13_alpha = g.weight_factor[0], w3_alpha = u.weight_factor[0];
    const float w2_alpha = d.weight_factor[0];
    // One activation quantiser feeds gate and up: the smaller multiplier (larger amax).
    const float x_global = std::min(g.input_global[0], u.input_global[0]);
    const float h_global = d.input_global[0];
    ExpertsSource s;
    s.format = bf;
    s.w13 = make_view<const uint8_t>(w13.data(), 1, 2 * i, rb13);
    s.w13_scale = make_view<const uint8_t>(s13.data(), 1, 2 * i, h / sfv);
    s.w2 = make_view(d.data, 1, h, rb2);
    s.w2_scale = make_view(d.scales, 1, h, i / sfv);
    s.w13_alpha = make_view(&w13_alpha, 1);
    s.w2_alpha = make_view(&w2_alpha, 1);
    s.w3_alpha = make_view(&w3_alpha, 1);
    s.x_global = make_view(&x_global, 1);
    s.h_global = make_view(&h_global, 1);
    PreparedExperts one;
    const Status st = prepare_experts(s, &one, ctx);
    if (!st.ok()) return Status(st.code(), "expert " + str(int64_t(e)) + ": " + st.message());
    all.w13.push_back(std::move(one.w13[0]));
    all.w2.push_back(std::move(one.w2[0]));
    all.w13_alpha.push_back(one.w13_alpha[0]);
    all.w2_alpha.push_back(one.w2_alpha[0]);
    all.w3_alpha.push_back(one.w3_alpha[0]);
    all.x_global.push_back(one.x_global[0]);
    all.h_global.push_back(one.h_global[0]);
  }
  *out = std::move(all);
  return Status::Ok();
}

std::vector<std::string> candidate_prefixes(const Tensors& f) {
  static const char* kStacked[] = {".gate_up_proj_blocks", ".mlp1_weight.blocks"};
  static const char* kFirstExpert[] = {".0.gate_proj.", ".0.w1."};
  std::vector<std::string> out;
  for (const std::string& name : f.names()) {
    for (const char* suffix : kStacked) {
      const std::size_t len = std::strlen(suffix);
      if (name.size() > len && name.compare(name.size() - len, len, suffix) == 0) {
        out.push_back(name.substr(0, name.size() - len));
      }
    }
    for (const char* mid : kFirstExpert) {
      const std::size_t at = name.find(mid);
      if (at != std::string::npos && at > 0) out.push_back(name.substr(0, at));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

const char* experts_layout_name(ExpertsCheckpointLayout layout) {
  switch (layout) {
    case ExpertsCheckpointLayout::kAuto:
      return "auto";
    case ExpertsCheckpointLayout::kGptOss:
      return "gpt-oss stacked";
    case ExpertsCheckpointLayout::kPerExpert:
      return "per expert";
  }
  return "unknown";
}

void LoadedExperts::apply_to(FusedExpertsArgs* args) const {
  const int64_t e = experts.num_experts(), h = experts.hidden(), i = experts.intermediate();
  args->experts = &experts;
  args->gate_up = gate_up;
  args->activation = activation;
  args->w13_bias = w13_bias.empty() ? TensorView<const float, 2>{}
                                    : make_view<const float>(w13_bias.data(), e, 2 * i);
  args->w2_bias =
      w2_bias.empty() ? TensorView<const float, 2>{} : make_view<const float>(w2_bias.data(), e, h);
}

std::vector<QuantizedExperts> list_quantized_experts(const SafetensorsCheckpoint& ckpt) {
  const Tensors f(ckpt);
  std::vector<QuantizedExperts> out;
  for (const std::string& p : candidate_prefixes(f)) {
    ExpertsRead r;
    if (!read_experts(f, p, ExpertsCheckpointLayout::kAuto, &r).ok()) continue;
    out.push_back({p, r.layout, r.format, r.e, r.h, r.i,
                   r.layout == ExpertsCheckpointLayout::kGptOss ? GateUpLayout::kInterleaved
                                                                : GateUpLayout::kHalves,
                   !r.w13_bias.empty() || !r.w2_bias.empty()});
  }
  return out;
}

Status load_experts(const SafetensorsCheckpoint& ckpt, std::string_view prefix, LoadedExperts* out,
                    const Context& ctx, ExpertsCheckpointLayout layout) {
  return run_entry_point("load_experts", ctx, [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    const Tensors f(ckpt);
    ExpertsRead r;
    QUANTKV_RETURN_IF_ERROR(read_experts(f, prefix, layout, &r));
    LoadedExperts loaded;
    const bool gpt_oss = r.layout == ExpertsCheckpointLayout::kGptOss;
    QUANTKV_RETURN_IF_ERROR(gpt_oss ? prepare_gpt_oss(r, &loaded.experts, ctx)
                                    : prepare_per_expert(r, &loaded.experts, ctx));
    loaded.format = r.format;
    loaded.layout = r.layout;
    loaded.gate_up = gpt_oss ? GateUpLayout::kInterleaved : GateUpLayout::kHalves;
    loaded.activation = gpt_oss ? MoeActivation::kSwigluOai : MoeActivation::kSiluGated;
    loaded.w13_bias = std::move(r.w13_bias);
    loaded.w2_bias = std::move(r.w2_bias);
    *out = std::move(loaded);
    return Status::Ok();
  });
}

}  // namespace quantkv
