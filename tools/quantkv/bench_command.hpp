// `quantkv bench`: the machine's ceilings, then the standard shapes of both operations, as a
// table (or JSON) and a roofline-style SVG plot.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli_common.hpp"

namespace quantkv::tool {

struct BenchOptions {
  std::string op = "all";  // all | indexer | qkv
  bool quick = false;
  std::string svg = "quantkv_bench.svg";  // empty: no plot
  // Comma-separated ISA levels (or "all": every level this CPU runs, scalar excluded): each
  // measured in turn, ceilings included, then one table side by side. Empty: one level.
  std::string isas;
  // A ratio above 1 (a ceiling measured too low) fails the run (exit 1) instead of a warning.
  bool strict = false;
  // Testing only (hidden option): every measured ceiling is multiplied by this, so that a ratio
  // above 1 can be produced on purpose, whatever the machine's noise.
  double ceiling_scale = 1.0;
  CommonOptions common;
};

CLI::App* add_bench_command(CLI::App* app, BenchOptions* options);
int run_bench(const CLI::App& command, const BenchOptions& options);

}  // namespace quantkv::tool
