// What every subcommand shares: --threads, --isa, --json, --progress, and the way errors
// reach the user (one line on stderr, a non-zero exit code, never a stack trace).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "quantkv/status.hpp"

namespace quantkv::tool {

struct CommonOptions {
  int threads = 0;        // 0: all (OMP_NUM_THREADS or every core)
  std::string isa;        // empty: the best the CPU has (or QUANTKV_ISA)
  bool json = false;      // machine-readable output on stdout instead of the report
  bool progress = false;  // progress lines even when stderr is not a terminal
};

void add_common_options(CLI::App* app, CommonOptions* options);

// Applies --isa and resolves --threads to a positive count.
Status apply_common_options(const CommonOptions& options, int* threads);

// A duration for people: "850 us", "1.23 ms", "4.56 s".
std::string format_seconds(double seconds);

// Exit codes: 1 for a failed operation (a library Status), 2 for bad command-line input.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// "quantkv: error: <message>" on stderr; returns kExitFailure.
int report_failure(const Status& status);
// "quantkv <sub>: <message>", then a usage line; returns kExitUsage.
int report_usage_error(const CLI::App& app, const std::string& message);

}  // namespace quantkv::tool
