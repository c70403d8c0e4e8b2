#include "demo_report.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "cli_common.hpp"
#include "json.hpp"

namespace quantkv::tool {
namespace {

double ratio_or_nan(double num, double den) {
  return den > 0 ? num / den : std::numeric_limits<double>::quiet_NaN();
}

double rate(const PhaseStats& p, int step) {
  return p.seconds[step] > 0 ? p.work[step] / p.seconds[step] / 1e9 : 0.0;
}

void print_phase(const char* title, const PhaseStats& p) {
  std::printf("\n%s: %lld tokens in %lld batch%s, %s\n", title, static_cast<long long>(p.tokens),
              static_cast<long long>(p.batches), p.batches == 1 ? "" : "es",
              format_seconds(p.total_seconds()).c_str());
  for (int step = 0; step < kNumDemoSteps; ++step) {
    std::printf("  %-34s %10s  %8.1f %s\n", demo_step_name(step),
                format_seconds(p.seconds[step]).c_str(), rate(p, step), demo_step_unit(step));
  }
}

const char* verdict(bool ok) { return ok ? "ok" : "OUTSIDE THE BOUND"; }

// One accuracy line: a label, a value, what it is held against.
void accuracy_line(const std::string& label, double value, const std::string& note) {
  std::printf("  %-40s %7.4f   %s\n", label.c_str(), value, note.c_str());
}

std::string bound_note(const char* relation, double bound, bool ok) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "bound %s %.2f  %s", relation, bound, verdict(ok));
  return buf;
}

void print_accuracy(const DemoRun& run) {
  const CheckStats& c = run.checks;
  const DemoBounds bounds = demo_bounds(run.config.format);
  const std::string format = block_format_name(run.config.format);
  const long long top_k = run.config.shape.top_k;
  std::printf("\nAccuracy against fp32 on the unquantised data (%lld rows checked)\n",
              static_cast<long long>(c.rows_checked));
  accuracy_line("Q relative error (" + format + " GEMM)", run.q_rel_err(),
                bound_note("<=", bounds.q_rel_err_max, run.q_rel_err() <= bounds.q_rel_err_max));
  accuracy_line("latent KV relative error (paged cache)", run.kv_rel_err(),
                bound_note("<=", bounds.kv_rel_err_max, run.kv_rel_err() <= bounds.kv_rel_err_max));
  if (c.contested_rows == 0) {
    std::printf(
        "  %-40s     n/a   every checked row sees at most top-k = %lld keys: all are "
        "selected\n",
        "indexer top-k recall", top_k);
  } else {
    accuracy_line("indexer top-k recall (fp8 vs fp32)", run.recall(),
                  bound_note(">=", bounds.recall_min, run.recall() >= bounds.recall_min) + "  (" +
                      std::to_string(c.contested_rows) + " rows see more than " +
                      std::to_string(top_k) + " keys)");
    if (c.rotation_compared) {
      accuracy_line("  the same without the Hadamard rotation", run.unrotated_recall(),
                    "no bound: what rotate_activation buys on this data");
    }
    if (c.mxfp4_compared) {
      accuracy_line("  the same with an MXFP4 K cache", run.mxfp4_recall(),
                    "no bound: DeepSeek-V4's fp4 index-K cache, half the bytes");
    }
    accuracy_line("pipeline top-k recall (all quantised)", run.pipeline_recall(),
                  "no bound: " + format + " Q feeds the indexer; depends on the data");
  }
  std::printf(
      "  %-40s %s\n", ("index checks (all " + std::to_string(c.rows_validated) + " rows)").c_str(),
      c.index_errors == 0 ? "ok: distinct, visible, best first, -1 tail" : "FAILED on some rows");
}

void print_pages(const DemoRun& run) {
  const ModelShape& s = run.config.shape;
  std::printf("\nPages (page size %lld; %lld pages in the pool, handed out shuffled)\n",
              static_cast<long long>(s.page_size), static_cast<long long>(run.kv_num_blocks));
  for (std::size_t b = 0; b < run.sequences.size(); ++b) {
    const SequenceReport& seq = run.sequences[b];
    std::string ids;
    for (std::size_t i = 0; i < seq.page_ids.size() && i < 8; ++i) {
      if (i) ids += ' ';
      ids += std::to_string(seq.page_ids[i]);
    }
    if (seq.page_ids.size() > 8) ids += " ...";
    std::printf(
        "  seq %zu  %5lld -> %5lld tokens  KV pages %3lld -> %3lld  (indexer %lld)  "
        "pages: %s\n",
        b, static_cast<long long>(seq.prompt), static_cast<long long>(seq.length),
        static_cast<long long>(seq.kv_pages_after_prompt), static_cast<long long>(seq.kv_pages),
        static_cast<long long>(seq.index_pages), ids.c_str());
  }
}

void print_samples(const DemoRun& run) {
  std::printf("\nSelected keys (positions, best score first)\n");
  for (const IndexSample& s : run.samples) {
    std::string list;
    for (const int32_t i : s.indices) {
      list += ' ';
      list += std::to_string(i);
    }
    const int64_t n = std::min(run.config.shape.top_k, s.visible);
    std::printf("  seq %lld @ %-5lld %-15s top %lld of %lld:%s%s\n", static_cast<long long>(s.seq),
                static_cast<long long>(s.position), s.when.c_str(), static_cast<long long>(n),
                static_cast<long long>(s.visible), list.c_str(),
                int64_t(s.indices.size()) < n ? " ..." : "");
  }
}

void json_phase(JsonWriter& j, const char* key, const PhaseStats& p) {
  j.begin_object(key);
  j.field("tokens", p.tokens).field("batches", p.batches).field("seconds", p.total_seconds());
  j.begin_array("steps");
  for (int step = 0; step < kNumDemoSteps; ++step) {
    j.begin_object()
        .field("name", demo_step_name(step))
        .field("seconds", p.seconds[step])
        .field("rate", rate(p, step))
        .field("unit", demo_step_unit(step))
        .end_object();
  }
  j.end_array().end_object();
}

}  // namespace

DemoBounds demo_bounds(BlockFormat format) {
  switch (format) {
    case BlockFormat::kNVFP4:
      return {0.16, 0.16, 0.95};
    case BlockFormat::kMXFP4:
      return {0.19, 0.19, 0.95};
    case BlockFormat::kMXFP8:
      return {0.05, 0.05, 0.95};
  }
  return {0, 0, 1};
}

double DemoRun::q_rel_err() const { return std::sqrt(ratio_or_nan(checks.q_err2, checks.q_ref2)); }
double DemoRun::kv_rel_err() const {
  return std::sqrt(ratio_or_nan(checks.kv_err2, checks.kv_ref2));
}
double DemoRun::recall() const {
  return ratio_or_nan(double(checks.recall_hits), double(checks.recall_total));
}
double DemoRun::unrotated_recall() const {
  if (!checks.rotation_compared) return std::nan("");
  return ratio_or_nan(double(checks.unrotated_hits), double(checks.recall_total));
}
double DemoRun::mxfp4_recall() const {
  if (!checks.mxfp4_compared) return std::nan("");
  return ratio_or_nan(double(checks.mxfp4_hits), double(checks.recall_total));
}
double DemoRun::pipeline_recall() const {
  return ratio_or_nan(double(checks.pipeline_hits), double(checks.pipeline_total));
}

void print_demo_report(const DemoRun& run) {
  const ModelShape& s = run.config.shape;
  std::printf("quantkv demo: one decoder layer of %s (synthetic weights, seed %llu)\n",
              s.name.c_str(), static_cast<unsigned long long>(run.config.seed));
  std::printf("  %s GEMM, isa %s, %d threads\n", block_format_name(run.config.format),
              run.isa.c_str(), run.config.threads);
  std::printf("\nShapes\n");
  std::printf(
      "  fused QKV        hidden %lld -> q %lld | kv latent %lld + rope %lld  (weight %lld x "
      "%lld, quantised and repacked in %s)\n",
      static_cast<long long>(s.hidden), static_cast<long long>(s.q_lora),
      static_cast<long long>(s.kv_lora), static_cast<long long>(s.rope_dim),
      static_cast<long long>(s.qkv_n()), static_cast<long long>(s.hidden),
      format_seconds(run.weight_quantize_seconds).c_str());
  std::printf("  MLA KV cache     bf16, 1 head x %lld, page %lld\n",
              static_cast<long long>(s.kv_width()), static_cast<long long>(s.page_size));
  std::printf(
      "  indexer          H %lld x D %lld, top-k %lld, fp8 K cache with one power-of-two "
      "scale per token\n",
      static_cast<long long>(s.index_heads), static_cast<long long>(s.index_dim),
      static_cast<long long>(s.top_k));
  std::string prompts;
  for (const int64_t p : run.prompts) {
    if (!prompts.empty()) prompts += " / ";
    prompts += std::to_string(p);
  }
  std::printf("  batch            %zu sequences, prompts of %s tokens, then %lld decode steps\n",
              run.prompts.size(), prompts.c_str(), static_cast<long long>(s.decode_steps));
  print_pages(run);
  print_phase("Prefill", run.prefill);
  if (run.decode.batches > 0) print_phase("Decode", run.decode);
  print_samples(run);
  print_accuracy(run);
}

std::string demo_json(const DemoRun& run) {
  const ModelShape& s = run.config.shape;
  JsonWriter j;
  j.begin_object();
  j.field("command", "demo").field("preset", s.name);
  j.field("format", block_format_name(run.config.format)).field("isa", run.isa);
  j.field("threads", run.config.threads).field("seed", uint64_t(run.config.seed));
  j.begin_object("shapes")
      .field("hidden", s.hidden)
      .field("q_dim", s.q_lora)
      .field("kv_lora", s.kv_lora)
      .field("rope_dim", s.rope_dim)
      .field("kv_head_size", s.kv_width())
      .field("qkv_n", s.qkv_n())
      .field("index_heads", s.index_heads)
      .field("index_dim", s.index_dim)
      .field("top_k", s.top_k)
      .field("page_size", s.page_size)
      .field("decode_steps", s.decode_steps)
      .end_object();
  j.field("weight_quantize_seconds", run.weight_quantize_seconds);
  j.field("kv_num_blocks", run.kv_num_blocks);
  j.begin_array("sequences");
  for (const SequenceReport& seq : run.sequences) {
    j.begin_object()
        .field("prompt_tokens", seq.prompt)
        .field("final_tokens", seq.length)
        .field("kv_pages_after_prompt", seq.kv_pages_after_prompt)
        .field("kv_pages", seq.kv_pages)
        .field("index_pages", seq.index_pages);
    j.begin_array("page_ids", true);
    for (const uint32_t id : seq.page_ids) j.item(int64_t(id));
    j.end_array().end_object();
  }
  j.end_array();
  json_phase(j, "prefill", run.prefill);
  json_phase(j, "decode", run.decode);
  j.begin_array("samples");
  for (const IndexSample& smp : run.samples) {
    j.begin_object()
        .field("seq", smp.seq)
        .field("position", smp.position)
        .field("visible", smp.visible)
        .field("when", smp.when);
    j.begin_array("indices", true);
    for (const int32_t i : smp.indices) j.item(int64_t(i));
    j.end_array().end_object();
  }
  j.end_array();
  const CheckStats& c = run.checks;
  const DemoBounds b = demo_bounds(run.config.format);
  j.begin_object("accuracy")
      .field("rows_checked", c.rows_checked)
      .field("q_rel_err", run.q_rel_err())
      .field("kv_rel_err", run.kv_rel_err())
      .field("contested_rows", c.contested_rows)
      .field("recall", run.recall())
      .field("recall_without_rotation", run.unrotated_recall())
      .field("recall_mxfp4_cache", run.mxfp4_recall())
      .field("pipeline_recall", run.pipeline_recall())
      .field("rows_validated", c.rows_validated)
      .field("index_errors", c.index_errors);
  j.begin_object("bounds")
      .field("q_rel_err_max", b.q_rel_err_max)
      .field("kv_rel_err_max", b.kv_rel_err_max)
      .field("recall_min", b.recall_min)
      .end_object();
  j.end_object();
  j.end_object();
  return j.str();
}

}  // namespace quantkv::tool
