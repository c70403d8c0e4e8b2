#include "demo_command.hpp"

#include <charconv>
#include <cstdio>

#include "demo_layer.hpp"
#include "demo_report.hpp"
#include "model_presets.hpp"
#include "progress.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::tool {
namespace {

struct SizeOption {
  const char* flag;
  int64_t DemoOptions::*value;
  int64_t ModelShape::*field;
  const char* help;
};

const SizeOption kSizeOptions[] = {
    {"--hidden", &DemoOptions::hidden, &ModelShape::hidden, "Hidden size (K of the QKV GEMM)"},
    {"--q-lora", &DemoOptions::q_lora, &ModelShape::q_lora,
     "Q columns of the QKV GEMM (q_lora_rank)"},
    {"--kv-lora", &DemoOptions::kv_lora, &ModelShape::kv_lora, "Latent KV width (kv_lora_rank)"},
    {"--rope-dim", &DemoOptions::rope_dim, &ModelShape::rope_dim, "Rotary part of the MLA key"},
    {"--index-heads", &DemoOptions::index_heads, &ModelShape::index_heads, "Indexer heads H"},
    {"--index-dim", &DemoOptions::index_dim, &ModelShape::index_dim, "Indexer head size D"},
    {"--top-k", &DemoOptions::top_k, &ModelShape::top_k, "Keys the indexer selects per token"},
    {"--page-size", &DemoOptions::page_size, &ModelShape::page_size, "Tokens per cache page"},
    {"--tokens", &DemoOptions::tokens, &ModelShape::tokens,
     "Prompt tokens of the longest sequence"},
    {"--seqs", &DemoOptions::seqs, &ModelShape::seqs, "Sequences in the batch"},
    {"--decode-steps", &DemoOptions::decode_steps, &ModelShape::decode_steps,
     "Decode steps (one token per sequence each)"},
    {"--check-rows", &DemoOptions::check_rows, &ModelShape::check_rows,
     "Rows per batch compared against fp32"},
};

// Sizes: whole numbers in [0, 2^30] (0 is rejected later where it makes no sense, with the
// option's name).
const CLI::Validator kCount(
    [](std::string& text) -> std::string {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || v < 0 ||
          v > (int64_t(1) << 30)) {
        return "expected a whole number from 0 to 2^30, got '" + text + "'";
      }
      return {};
    },
    "COUNT");

Status parse_format(const std::string& name, BlockFormat* out) {
  if (name == "nvfp4")
    *out = BlockFormat::kNVFP4;
  else if (name == "mxfp4")
    *out = BlockFormat::kMXFP4;
  else if (name == "mxfp8")
    *out = BlockFormat::kMXFP8;
  else
    return invalid_argument("--format: expected nvfp4, mxfp4 or mxfp8, got '" + name + "'");
  return Status::Ok();
}

// The preset, then every size option that was given.
Status resolve_shape(const CLI::App& command, const DemoOptions& o, ModelShape* shape) {
  QUANTKV_RETURN_IF_ERROR(find_model_preset(o.quick ? "deepseek-v3.2-tiny" : o.preset, shape));
  for (const SizeOption& opt : kSizeOptions) {
    if (command.count(opt.flag) > 0) (*shape).*opt.field = o.*opt.value;
  }
  return validate_model_shape(*shape);
}

Status run_layer(DemoLayer& layer, const DemoConfig& cfg, DemoRun* run) {
  const ModelShape& s = cfg.shape;
  const int64_t batch = int64_t(run->prompts.size());
  {
    Progress progress("prefill", 0, cfg.progress);
    layer.set_progress(&progress);
    const Status status = layer.run_batch(run->prompts, "prompt", &run->prefill);
    layer.set_progress(nullptr);
    QUANTKV_RETURN_IF_ERROR(status);
  }
  for (int64_t b = 0; b < batch; ++b) {
    run->sequences[b].kv_pages_after_prompt = layer.kv_pages(b);
  }
  Progress progress("decode", s.decode_steps, cfg.progress);
  layer.set_progress(&progress);
  const std::vector<int64_t> one(std::size_t(batch), 1);
  Status status;
  for (int64_t step = 1; step <= s.decode_steps && status.ok(); ++step) {
    status = layer.run_batch(one, "decode step " + std::to_string(step), &run->decode);
    progress.advance();
  }
  layer.set_progress(nullptr);
  return status;
}

}  // namespace

CLI::App* add_demo_command(CLI::App* app, DemoOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "demo", "Run one DeepSeek-V3.2-style decoder layer (fused QKV + indexer) on synthetic data");
  std::string presets;
  for (const std::string& n : model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  auto* preset = cmd->add_option("--preset", o->preset, "Model shapes: " + presets)
                     ->check(CLI::IsMember(model_preset_names()))
                     ->capture_default_str();
  cmd->add_flag("--quick", o->quick, "Small and fast (the deepseek-v3.2-tiny preset)")
      ->excludes(preset);
  cmd->add_option("--format", o->format, "Block-scaled format of the QKV GEMM")
      ->check(CLI::IsMember({"nvfp4", "mxfp4", "mxfp8"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the synthetic weights and activations")
      ->capture_default_str();
  for (const SizeOption& opt : kSizeOptions) {
    cmd->add_option(opt.flag, o->*opt.value, opt.help)->check(kCount);
  }
  auto* ckpt = cmd->add_option(
      "--checkpoint", o->checkpoint.file,
      "Run the QKV step on a quantised checkpoint instead (.safetensors file, index or directory)");
  cmd->add_option("--prefix", o->checkpoint.prefix,
                  "Attention module of the checkpoint (q_proj/k_proj/v_proj below it)")
      ->needs(ckpt);
  cmd->add_option("--activations", o->checkpoint.activations,
                  "With --checkpoint: bf16 (weight-only) or quantized (the weight's format)")
      ->check(CLI::IsMember({"bf16", "quantized"}))
      ->capture_default_str()
      ->needs(ckpt);
  cmd->add_option("--head-size", o->checkpoint.head_size, "With --checkpoint: K/V head size")
      ->check(kCount)
      ->capture_default_str()
      ->needs(ckpt);
  add_common_options(cmd, &o->common);
  return cmd;
}

int run_demo(const CLI::App& command, const DemoOptions& o) {
  if (!o.checkpoint.file.empty()) {
    if (o.checkpoint.prefix.empty()) {
      return report_usage_error(command,
                                "--checkpoint needs --prefix (e.g. model.layers.0.self_attn)");
    }
    CheckpointDemoOptions ck = o.checkpoint;
    ck.seed = o.seed;
    return run_checkpoint_demo(ck, o.common);
  }
  DemoConfig cfg;
  Status status = resolve_shape(command, o, &cfg.shape);
  if (status.ok()) status = parse_format(o.format, &cfg.format);
  if (!status.ok()) return report_usage_error(command, status.message());
  status = apply_common_options(o.common, &cfg.threads);
  if (!status.ok()) return report_usage_error(command, status.message());
  cfg.seed = o.seed;
  cfg.progress = progress_enabled(o.common.progress);

  DemoRun run;
  run.config = cfg;
  run.isa = isa_level_name(active_isa());
  run.prompts = prompt_lengths(cfg.shape);
  run.sequences.resize(run.prompts.size());
  DemoLayer layer;
  {
    Progress progress("synthetic weights", 0, cfg.progress);
    status = layer.init(cfg, run.prompts);
  }
  if (status.ok()) status = run_layer(layer, cfg, &run);
  if (!status.ok()) return report_failure(status);
  run.weight_quantize_seconds = layer.weight_quantize_seconds();
  for (std::size_t b = 0; b < run.prompts.size(); ++b) {
    SequenceReport& seq = run.sequences[b];
    seq.prompt = run.prompts[b];
    seq.length = layer.length(int64_t(b));
    seq.kv_pages = layer.kv_pages(int64_t(b));
    seq.index_pages = layer.index_pages(int64_t(b));
    seq.page_ids = layer.kv_page_ids(int64_t(b));
  }
  run.kv_num_blocks = layer.kv_num_blocks();
  run.checks = layer.checks();
  run.samples = layer.samples();
  if (o.common.json) {
    std::fputs(demo_json(run).c_str(), stdout);
  } else {
    print_demo_report(run);
  }
  return 0;
}

}  // namespace quantkv::tool
