#include "checkpoint_command.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "quantkv/checkpoint.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::tool {

CLI::App* add_inspect_command(CLI::App* app, InspectOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "inspect",
      "List the quantised projections a checkpoint holds (name, format, shapes, scales) and its "
      "MoE expert groups (per layer: format, E, H, I, layout)");
  cmd->add_option(
         "file", o->file,
         "A .safetensors file, a sharded checkpoint's index (.json) or a directory holding either")
      ->required();
  return cmd;
}

int run_inspect(const InspectOptions& o) {
  SafetensorsCheckpoint f;
  const Status s = SafetensorsCheckpoint::open(o.file, &f);
  if (!s.ok()) return report_failure(s);
  const auto experts = list_quantized_experts(f);
  // Per-expert projections are listed once, as their layer's expert group.
  std::vector<QuantizedProjection> projections;
  for (QuantizedProjection& p : list_quantized_projections(f)) {
    bool in_group = false;
    for (const QuantizedExperts& g : experts) {
      in_group = in_group || p.name.compare(0, g.prefix.size() + 1, g.prefix + ".") == 0;
    }
    if (!in_group) projections.push_back(std::move(p));
  }
  std::printf("%s: %zu tensors, %zu quantised projections, %zu MoE expert groups\n", o.file.c_str(),
              f.tensor_names().size(), projections.size(), experts.size());
  if (!projections.empty()) {
    std::printf("%-48s %-28s %8s %8s %14s %14s\n", "projection", "format", "N", "K",
                "weight factor", "input global");
  }
  for (const QuantizedProjection& p : projections) {
    std::printf("%-48s %-28s %8lld %8lld %14.6g %14.6g\n", p.name.c_str(),
                checkpoint_format_name(p.format), static_cast<long long>(p.n),
                static_cast<long long>(p.k), double(p.weight_factor), double(p.input_global));
  }
  if (!experts.empty()) {
    std::printf("%-48s %-28s %6s %8s %8s %-16s %-12s %s\n", "experts", "format", "E", "H", "I",
                "layout", "gate/up", "bias");
  }
  for (const QuantizedExperts& g : experts) {
    std::printf("%-48s %-28s %6lld %8lld %8lld %-16s %-12s %s\n", g.prefix.c_str(),
                checkpoint_format_name(g.format), static_cast<long long>(g.num_experts),
                static_cast<long long>(g.hidden), static_cast<long long>(g.intermediate),
                experts_layout_name(g.layout),
                g.gate_up == GateUpLayout::kInterleaved ? "interleaved" : "halves",
                g.has_bias ? "yes" : "no");
  }
  return 0;
}

namespace {

// ‖got − want‖ / ‖want‖ over a column range of [rows, n] matrices.
struct ErrorSum {
  double diff = 0, ref = 0;
  void add(double got, double want) {
    diff += (got - want) * (got - want);
    ref += want * want;
  }
  double relative() const { return ref > 0 ? std::sqrt(diff / ref) : 0.0; }
};

Status make_cache(int64_t kv_heads, int64_t head, int64_t tokens, PagedKVCache* cache) {
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kF32;
  cfg.kv_dim = 2;
  cfg.num_layers = 1;
  cfg.page_size = 16;
  cfg.num_heads = kv_heads;
  cfg.head_size = head;
  cfg.batch_size = 1;
  cfg.max_pages_per_seq = (tokens + 15) / 16;
  cfg.num_blocks = cfg.max_pages_per_seq;
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(cfg, 7, cache));
  return cache->reserve(0, tokens);
}

}  // namespace

int run_checkpoint_demo(const CheckpointDemoOptions& o, const CommonOptions& common) {
  int threads = 0;
  Status s = apply_common_options(common, &threads);
  if (!s.ok()) return report_failure(s);
  Context ctx;
  ctx.num_threads = threads;
  SafetensorsCheckpoint f;
  s = SafetensorsCheckpoint::open(o.file, &f);
  QkvCheckpointWeights w;
  if (s.ok()) s = load_qkv_weights(f, o.prefix, &w, ctx);
  std::vector<float> deq;
  int64_t n = 0, k = 0;
  if (s.ok()) s = dequantize_qkv_weights(f, o.prefix, &deq, &n, &k);
  if (!s.ok()) return report_failure(s);
  if (w.k_rows != w.v_rows || w.k_rows % o.head_size != 0) {
    return report_failure(
        invalid_argument("--head-size: k_proj and v_proj rows (" + std::to_string(w.k_rows) + ", " +
                         std::to_string(w.v_rows) + ") must be equal multiples of the head size " +
                         std::to_string(o.head_size)));
  }
  const BlockFormat bf = checkpoint_block_format(w.format);
  const int64_t m = o.tokens, q_dim = w.q_rows;
  // Gaussian activations, rounded to bf16 (what a model hands the projection).
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bfloat16> x(std::size_t(m * k));
  std::vector<float> x32(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i].bits = float_to_bf16(normal(rng));
    x32[i] = bf16_to_float(x[i].bits);
  }
  PagedKVCache cache;
  s = make_cache(w.k_rows / o.head_size, o.head_size, m, &cache);
  if (!s.ok()) return report_failure(s);
  std::vector<uint32_t> offsets = {0, uint32_t(m)};
  std::vector<bfloat16> q(std::size_t(m * q_dim));
  const auto offs = make_view<const uint32_t>(offsets.data(), 2);
  const auto out = make_view(q.data(), m, q_dim);
  const bool weight_only = o.activations == "bf16";
  if (weight_only) {
    s = fused_qkv_matmul_weight_only(make_view<const bfloat16>(x.data(), m, k), offs, w.weights,
                                     w.weight_factor, cache.view(), 0, out, ctx);
  } else {
    const int64_t kb = k / sf_vector_size(bf);
    std::vector<uint8_t> xq(std::size_t(m * row_bytes(bf, k)));
    std::vector<uint8_t> xs(std::size_t(swizzled_scale_elements(m, kb)));
    const auto xs_view = make_view<uint8_t, 5>(xs.data(), swizzled_scale_shape(m, kb));
    s = quantize_dynamic_block_scaled(make_view<const bfloat16>(x.data(), m, k), w.input_global, bf,
                                      make_view(xq.data(), m, row_bytes(bf, k)), xs_view, ctx);
    if (s.ok()) {
      s = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          make_view<const uint8_t>(xq.data(), m, row_bytes(bf, k)), offs, w.weights,
          TensorView<const uint8_t, 5>(xs_view), w.gemm_scales(), cache.view(), 0, out, ctx);
    }
  }
  if (!s.ok()) return report_failure(s);

  // fp64 on the bf16 activations and the dequantised fp32 weights.
  ErrorSum err[3];
  const PagedKVCacheCollection kv = cache.view();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i) want += double(x32[r * k + i]) * double(deq[c * k + i]);
      if (c < q_dim) {
        err[0].add(bf16_to_float(q[r * q_dim + c].bits), want);
        continue;
      }
      const int64_t col = c - q_dim, kvi = col < w.k_rows ? 0 : 1, within = col - kvi * w.k_rows;
      const float got = reinterpret_cast<const float*>(kv.blocks)[kv.element_offset(
          kv.page_of(0, r), kvi, 0, r % kv.page_size, within / o.head_size, within % o.head_size)];
      err[1 + kvi].add(got, want);
    }
  }
  std::printf("checkpoint %s, prefix %s: %s, q/k/v rows %lld/%lld/%lld, K = %lld\n", o.file.c_str(),
              o.prefix.c_str(), checkpoint_format_name(w.format), static_cast<long long>(w.q_rows),
              static_cast<long long>(w.k_rows), static_cast<long long>(w.v_rows),
              static_cast<long long>(k));
  std::printf("weight factors q/k/v %.6g / %.6g / %.6g, input global %.6g, isa %s, %d threads\n",
              double(w.weight_factor.q), double(w.weight_factor.k), double(w.weight_factor.v),
              double(w.input_global), isa_level_name(active_isa()), threads);
  std::printf(
      "QKV step on %lld Gaussian tokens, %s activations; relative error against fp64 on the "
      "dequantised weights:\n",
      static_cast<long long>(m), weight_only ? "bf16 (weight-only)" : "quantised");
  const char* names[3] = {"Q (bf16 output)", "K (fp32 cache)", "V (fp32 cache)"};
  for (int i = 0; i < 3; ++i) std::printf("  %-18s %.4f\n", names[i], err[i].relative());
  return 0;
}

}  // namespace quantkv::tool
