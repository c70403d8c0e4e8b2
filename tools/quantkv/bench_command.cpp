#include "bench_command.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
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
// machine: `quantkv bench` warns about it (exit 0), or fails with --strict (exit 1).
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

// The ceiling that binds for `r`, with its unit: "20.9 GB/s", "908 GOP/s".
std::string ceiling_value(const BenchResult& r, const ceilings::Ceilings& c) {
  char text[64] = "?";
  switch (r.bound(c)) {
    case CeilingKind::kBf16Dot:
      std::snprintf(text, sizeof text, "%.3g GFLOP/s", c.bf16_gflops);
      break;
    case CeilingKind::kInt8Dot:
      std::snprintf(text, sizeof text, "%.3g GOP/s", c.int8_gops);
      break;
    case CeilingKind::kReadBandwidth:
      std::snprintf(text, sizeof text, "%.3g GB/s", c.read_gbs);
      break;
  }
  return text;
}

// One line per result above its ceiling, naming the shape, its ratio and the ceiling; a warning,
// or an error with --strict.
std::vector<std::string> ceiling_messages(const std::string& isa, const ceilings::Ceilings& c,
                                          const std::vector<BenchResult>& results, bool strict) {
  std::vector<std::string> messages;
  for (const BenchResult* r : ceiling_errors(c, results)) {
    char text[768];
    std::snprintf(text, sizeof text,
                  "%s: %s %s (%s, isa %s) ran at %.3f of its %s ceiling (%s measured in this run): "
                  "a ratio above %.1f means that ceiling was measured too low (say, during a "
                  "burst of load from other processes), not that the kernel beats the machine%s",
                  strict ? "error" : "warning", r->op.c_str(), r->name.c_str(), r->shape.c_str(),
                  isa.c_str(), r->ratio(c), ceiling_name(r->bound(c)), ceiling_value(*r, c).c_str(),
                  kMaxRatio,
                  strict ? "" : "; rerun on a quiet machine (--strict makes this an error)");
    messages.push_back(text);
  }
  return messages;
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
  std::printf(
      "\nratio = achieved rate / the roofline at the shape's intensity: GFLOP/s over the"
      " compute ceiling (bf16 dot: indexer, int8 dot: QKV), or GB/s over the read"
      " bandwidth where bandwidth x intensity is lower (the ceiling column names the one"
      " that binds).\n");
}

// One level's measurements: its ceilings and every shape, timed in the same run.
struct IsaRun {
  std::string isa;
  ceilings::Ceilings c;
  std::vector<BenchResult> results;
};

// The fields of one run (inside an object the caller opened).
void run_json_fields(JsonWriter& j, const IsaRun& run, int threads, const BenchOptions& o) {
  const ceilings::Ceilings& c = run.c;
  const std::vector<BenchResult>& results = run.results;
  j.field("command", "bench").field("quick", o.quick).field("op", o.op);
  j.field("threads", threads).field("isa", run.isa);
  j.begin_object("ceilings")
      .field("bf16_gflops", c.bf16_gflops)
      .field("int8_gops", c.int8_gops)
      .field("read_gbs", c.read_gbs)
      .end_object();
  j.begin_array("results");
  for (const BenchResult& r : results) {
    j.begin_object()
        .field("op", r.op)
        .field("case", r.name)
        .field("shape", r.shape)
        .field("seconds", r.seconds)
        .field("reps", r.reps)
        .field("flops", r.flops)
        .field("bytes", r.bytes)
        .field("gflops", r.gflops())
        .field("gbs", r.gbs())
        .field("intensity", r.intensity())
        .field("ceiling", ceiling_name(r.bound(c)))
        .field("ratio", r.ratio(c))
        .end_object();
  }
  j.end_array();
  // Results above their ceiling (ratio > 1): an error in the ceilings, reported, not a result.
  j.begin_array("ceiling_errors");
  for (const BenchResult* r : ceiling_errors(c, results)) j.item(r->op + " " + r->name);
  j.end_array();
  // Without --strict they are warnings (exit 0): the lines printed on stderr.
  j.field("strict", o.strict);
  j.begin_array("warnings");
  if (!o.strict) {
    for (const std::string& m : ceiling_messages(run.isa, c, results, false)) j.item(m);
  }
  j.end_array();
  if (o.svg.empty())
    j.null_field("svg");
  else
    j.field("svg", o.svg);
}

// One level: the run's object. Several (--isas): {"command", "threads", "runs": [run...]}.
std::string bench_json(const std::vector<IsaRun>& runs, int threads, const BenchOptions& o) {
  JsonWriter j;
  j.begin_object();
  if (runs.size() == 1) {
    run_json_fields(j, runs[0], threads, o);
  } else {
    j.field("command", "bench").field("threads", threads);
    j.begin_array("runs");
    for (const IsaRun& run : runs) {
      j.begin_object();
      run_json_fields(j, run, threads, o);
      j.end_object();
    }
    j.end_array();
  }
  j.end_object();
  return j.str();
}

std::string plot(const ceilings::Ceilings& c, int threads,
                 const std::vector<BenchResult>& results) {
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
  cmd->add_option("--isas", o->isas,
                  "Measure several ISA levels in one run, side by side (e.g. avx2,avx512; "
                  "\"all\": every level this CPU runs but scalar)");
  cmd->add_flag("--strict", o->strict,
                "Fail (exit 1) when a ratio is above 1, i.e. a ceiling was measured too low; "
                "without it that is a warning and the exit code is 0 (CI runs with --strict)");
  // Testing only, hidden: scales every measured ceiling so a ratio above 1 is deterministic.
  cmd->add_option("--testing-ceiling-scale", o->ceiling_scale)
      ->check(CLI::PositiveNumber)
      ->group("");
  add_common_options(cmd, &o->common);
  return cmd;
}

namespace {

// The levels `--isas` names, in the order given; "all": every level this CPU runs but scalar
// (minutes at the full shapes), or scalar alone on a CPU without SIMD kernels.
Status parse_isa_list(const std::string& text, std::vector<IsaLevel>* levels) {
  if (text == "all") {
    for (IsaLevel l : kAllIsaLevels) {
      if (l != IsaLevel::kScalar && isa_level_supported(l)) levels->push_back(l);
    }
    if (levels->empty()) levels->push_back(IsaLevel::kScalar);
    return Status::Ok();
  }
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) {
    IsaLevel l;
    if (!parse_isa_level(name, &l).ok()) {
      return invalid_argument("--isas: unknown ISA level \"" + name + "\" in \"" + text + "\"");
    }
    if (!isa_level_supported(l)) {
      return invalid_argument("--isas: this CPU cannot run " + name);
    }
    if (std::find(levels->begin(), levels->end(), l) == levels->end()) levels->push_back(l);
  }
  if (levels->empty())
    return invalid_argument("--isas: expected a comma-separated list of ISA levels");
  return Status::Ok();
}

// The ceilings on the active level, each times --testing-ceiling-scale (1 but in tests).
ceilings::Ceilings measure_ceilings(const BenchPlan& plan, const BenchOptions& o, double seconds) {
  ceilings::Ceilings c = ceilings::measure_all(plan.threads, seconds);
  c.bf16_gflops *= o.ceiling_scale;
  c.int8_gops *= o.ceiling_scale;
  c.read_gbs *= o.ceiling_scale;
  return c;
}

// The ceilings and every shape on the active level.
Status measure_level(const BenchPlan& plan, const BenchOptions& o, IsaRun* run) {
  run->isa = isa_level_name(active_isa());
  {
    Progress progress("ceilings (" + run->isa + ")", 0, plan.progress);
    run->c = measure_ceilings(plan, o, o.quick ? 0.05 : 0.2);
  }
  Status status = Status::Ok();
  if (o.op != "qkv") status = bench_indexer(plan, &run->results);
  if (status.ok() && o.op != "indexer") status = bench_qkv(plan, &run->results);
  QUANTKV_RETURN_IF_ERROR(status);
  // A ratio above 1: measure the ceilings again (up to 3 times; on a shared machine a burst
  // of load during the first measurement makes it low) before calling it an error.
  for (int again = 0; again < 3 && !ceiling_errors(run->c, run->results).empty(); ++again) {
    Progress progress("ceilings (again: a ratio was above 1)", 0, plan.progress);
    run->c = best_of(run->c, measure_ceilings(plan, o, o.quick ? 0.1 : 0.4));
  }
  return Status::Ok();
}

// Every level's time and ratio per shape, side by side (the levels were measured one after
// the other in this run, each against its own ceilings).
void print_comparison(const std::vector<IsaRun>& runs) {
  std::printf("\nSide by side (each ratio against its own level's ceilings of this run)\n");
  std::printf("%-8s %-24s", "op", "case");
  for (const IsaRun& run : runs) std::printf(" %10s %6s", run.isa.c_str(), "ratio");
  std::printf("\n");
  for (std::size_t i = 0; i < runs[0].results.size(); ++i) {
    const BenchResult& first = runs[0].results[i];
    std::printf("%-8s %-24s", first.op.c_str(), first.name.c_str());
    for (const IsaRun& run : runs) {
      const BenchResult& r = run.results[i];
      std::printf(" %10s %6.3f", format_seconds(r.seconds).c_str(), r.ratio(run.c));
    }
    std::printf("\n");
  }
}

}  // namespace

int run_bench(const CLI::App& command, const BenchOptions& o) {
  BenchPlan plan;
  Status status = apply_common_options(o.common, &plan.threads);
  if (!status.ok()) return report_usage_error(command, status.message());
  std::vector<IsaLevel> levels;
  if (!o.isas.empty()) {
    if (!o.common.isa.empty())
      return report_usage_error(command, "--isas and --isa: give one of them");
    status = parse_isa_list(o.isas, &levels);
    if (!status.ok()) return report_usage_error(command, status.message());
  } else {
    levels.push_back(active_isa());
  }
  if (!o.svg.empty()) {  // fail before minutes of measuring, not after
    status = write_text_file(o.svg, "");
    if (!status.ok()) return report_usage_error(command, status.message());
  }
  plan.quick = o.quick;
  plan.progress = progress_enabled(o.common.progress);

  const IsaLevel previous = active_isa();
  std::vector<IsaRun> runs(levels.size());
  for (std::size_t i = 0; i < levels.size() && status.ok(); ++i) {
    status = set_isa_level(levels[i]);
    if (status.ok()) status = measure_level(plan, o, &runs[i]);
  }
  (void)set_isa_level(previous);
  if (!status.ok()) return report_failure(status);
  if (!o.svg.empty()) {  // the plot of the last level measured (the best with "all")
    status = write_text_file(o.svg, plot(runs.back().c, plan.threads, runs.back().results));
    if (!status.ok()) return report_failure(status);
  }
  if (o.common.json) {
    std::fputs(bench_json(runs, plan.threads, o).c_str(), stdout);
  } else {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (i > 0) std::printf("\n");
      print_table(runs[i].c, plan.threads, runs[i].isa, runs[i].results);
    }
    if (runs.size() > 1) print_comparison(runs);
    if (!o.svg.empty()) std::printf("plot: %s\n", o.svg.c_str());
  }
  // A ratio above 1: a warning (exit 0), or with --strict an error (exit 1).
  bool above = false;
  for (const IsaRun& run : runs) {
    for (const std::string& m : ceiling_messages(run.isa, run.c, run.results, o.strict)) {
      std::fprintf(stderr, "%s\n", m.c_str());
      above = true;
    }
  }
  return above && o.strict ? kExitFailure : 0;
}

}  // namespace quantkv::tool
