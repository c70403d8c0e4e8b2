#include "bench_command.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_shapes.hpp"
#include "cli_common.hpp"
#include "json.hpp"
#include "progress.hpp"
#include "quantkv/cpu_features.hpp"
#include "svg_plot.hpp"

namespace quantkv::tool {
namespace {

// A ratio above this means the ceiling is wrong (measured low), not that the kernel beat the
// machine: `quantkv bench` reports it as an error in its ceilings.
constexpr double kMaxRatio = 1.0;

bool exceeds_ceiling(const BenchResult& r, const ceilings::Ceilings& c) {
  return !(r.ratio(c) <= kMaxRatio);  // NaN counts as an error too
}

// The results whose rate is above their ceiling.
std::vector<const BenchResult*> ceiling_errors(const ceilings::Ceilings& c,
                                               const std::vector<BenchResult>& results) {
  std::vector<const BenchResult*> errors;
  for (const BenchResult& r : results) {
    if (exceeds_ceiling(r, c)) errors.push_back(&r);
  }
  return errors;
}

// Each ceiling is a best-of measurement: a second measurement can only raise it (a burst of
// load from other processes during the first one makes it low).
ceilings::Ceilings best_of(const ceilings::Ceilings& a, const ceilings::Ceilings& b) {
  ceilings::Ceilings c;
  c.bf16_gflops = std::max(a.bf16_gflops, b.bf16_gflops);
  c.int8_gops = std::max(a.int8_gops, b.int8_gops);
  c.read_gbs = std::max(a.read_gbs, b.read_gbs);
  return c;
}

void report_ceiling_errors(const ceilings::Ceilings& c, const std::vector<BenchResult>& results) {
  for (const BenchResult* r : ceiling_errors(c, results)) {
    std::fprintf(stderr,
                 "error: %s %s ran at %.3f of its %s ceiling: a ratio above %.1f means the "
                 "ceiling measured in this run is wrong (too low), not that the kernel beats the "
                 "machine\n",
                 r->op.c_str(), r->name.c_str(), r->ratio(c), ceiling_name(r->bound(c)), kMaxRatio);
  }
}

void print_table(const ceilings::Ceilings& c, int threads, const std::string& isa,
                 const std::vector<BenchResult>& results) {
  std::printf("Ceilings (%d threads, isa %s, measured in this run)\n", threads, isa.c_str());
  std::printf("  bf16 dot %.1f GFLOP/s   int8 dot %.1f GOP/s   read %.1f GB/s\n\n", c.bf16_gflops,
              c.int8_gops, c.read_gbs);
  std::printf("%-8s %-24s %-32s %10s %9s %8s %8s  %-9s %6s\n", "op", "case", "shape", "time",
              "GFLOP/s", "GB/s", "flop/B", "ceiling", "ratio");
  for (const BenchResult& r : results) {
    std::printf("%-8s %-24s %-32s %10s %9.1f %8.1f %8.1f  %-9s %6.3f%s\n", r.op.c_str(),
                r.name.c_str(), r.shape.c_str(), format_seconds(r.seconds).c_str(), r.gflops(),
                r.gbs(), r.intensity(), ceiling_name(r.bound(c)), r.ratio(c),
                exceeds_ceiling(r, c) ? "  CEILING ERROR" : "");
  }
  std::printf("\nratio = achieved rate / the roofline at the shape's intensity: GFLOP/s over the"
              " compute ceiling (bf16 dot: indexer, int8 dot: QKV), or GB/s over the read"
              " bandwidth where bandwidth x intensity is lower (the ceiling column names the one"
              " that binds).\n");
}

std::string bench_json(const ceilings::Ceilings& c, int threads, const std::string& isa,
                       const BenchOptions& o, const std::vector<BenchResult>& results) {
  JsonWriter j;
  j.begin_object();
  j.field("command", "bench").field("quick", o.quick).field("op", o.op);
  j.field("threads", threads).field("isa", isa);
  j.begin_object("ceilings")
      .field("bf16_gflops", c.bf16_gflops)
      .field("int8_gops", c.int8_gops)
      .field("read_gbs", c.read_gbs)
      .end_object();
  j.begin_array("results");
  for (const BenchResult& r : results) {
    j.begin_object()
        .field("op", r.op).field("case", r.name).field("shape", r.shape)
        .field("seconds", r.seconds).field("reps", r.reps)
        .field("flops", r.flops).field("bytes", r.bytes)
        .field("gflops", r.gflops()).field("gbs", r.gbs()).field("intensity", r.intensity())
        .field("ceiling", ceiling_name(r.bound(c))).field("ratio", r.ratio(c))
        .end_object();
  }
  j.end_array();
  // Results above their ceiling (ratio > 1): an error in the ceilings, reported, not a result.
  j.begin_array("ceiling_errors");
  for (const BenchResult* r : ceiling_errors(c, results)) j.item(r->op + " " + r->name);
  j.end_array();
  if (o.svg.empty()) j.null_field("svg");
  else j.field("svg", o.svg);
  j.end_object();
  return j.str();
}

std::string plot(const ceilings::Ceilings& c, int threads, const std::vector<BenchResult>& results) {
  std::vector<RooflinePoint> points;
  for (const BenchResult& r : results) {
    points.push_back({r.name, r.op, r.intensity(), r.gflops()});
  }
  char bf16[64], int8[64];
  std::snprintf(bf16, sizeof bf16, "bf16 dot %.0f GFLOP/s", c.bf16_gflops);
  std::snprintf(int8, sizeof int8, "int8 dot %.0f GOP/s", c.int8_gops);
  return roofline_svg("quantkv bench: achieved rate vs this machine's ceilings (" +
                          std::to_string(threads) + " threads)",
                      points, {{bf16, c.bf16_gflops}, {int8, c.int8_gops}}, c.read_gbs);
}

}  // namespace

CLI::App* add_bench_command(CLI::App* app, BenchOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "bench", "Measure the machine's ceilings, then time both operations at standard shapes");
  cmd->add_option("--op", o->op, "Run one operation only")
      ->check(CLI::IsMember({"all", "indexer", "qkv"}))
      ->capture_default_str();
  cmd->add_flag("--quick", o->quick, "Small shapes and short timing (under a minute on 2 cores)");
  cmd->add_option("--svg", o->svg, "Where to write the roofline plot (\"\" for none)")
      ->capture_default_str();
  add_common_options(cmd, &o->common);
  return cmd;
}

int run_bench(const CLI::App& command, const BenchOptions& o) {
  BenchPlan plan;
  Status status = apply_common_options(o.common, &plan.threads);
  if (!status.ok()) return report_usage_error(command, status.message());
  if (!o.svg.empty()) {  // fail before minutes of measuring, not after
    status = write_text_file(o.svg, "");
    if (!status.ok()) return report_usage_error(command, status.message());
  }
  plan.quick = o.quick;
  plan.progress = progress_enabled(o.common.progress);
  const std::string isa = isa_level_name(active_isa());

  ceilings::Ceilings c;
  {
    Progress progress("ceilings", 0, plan.progress);
    c = ceilings::measure_all(plan.threads, o.quick ? 0.05 : 0.2);
  }
  std::vector<BenchResult> results;
  if (o.op != "qkv") status = bench_indexer(plan, &results);
  if (status.ok() && o.op != "indexer") status = bench_qkv(plan, &results);
  if (!status.ok()) return report_failure(status);
  // A ratio above 1: measure the ceilings again (up to 3 times; on a shared machine a burst
  // of load during the first measurement makes it low) before calling it an error.
  for (int again = 0; again < 3 && !ceiling_errors(c, results).empty(); ++again) {
    Progress progress("ceilings (again: a ratio was above 1)", 0, plan.progress);
    c = best_of(c, ceilings::measure_all(plan.threads, o.quick ? 0.1 : 0.4));
  }
  if (!o.svg.empty()) {
    status = write_text_file(o.svg, plot(c, plan.threads, results));
    if (!status.ok()) return report_failure(status);
  }
  if (o.common.json) {
    std::fputs(bench_json(c, plan.threads, isa, o, results).c_str(), stdout);
  } else {
    print_table(c, plan.threads, isa, results);
    if (!o.svg.empty()) std::printf("plot: %s\n", o.svg.c_str());
  }
  report_ceiling_errors(c, results);
  return ceiling_errors(c, results).empty() ? 0 : 1;
}

}  // namespace quantkv::tool
