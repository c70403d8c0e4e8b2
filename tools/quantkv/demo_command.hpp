// `quantkv demo`: one DeepSeek-V3.2-style decoder layer end to end on synthetic data.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "checkpoint_command.hpp"
#include "cli_common.hpp"

namespace quantkv::tool {

struct DemoOptions {
  std::string preset = "deepseek-v3.2-mini";
  bool quick = false;
  std::string format = "nvfp4";
  uint64_t seed = 42;
  // Explicit sizes; an option given on the command line overrides the preset's value.
  int64_t hidden = 0, q_lora = 0, kv_lora = 0, rope_dim = 0, index_heads = 0, index_dim = 0;
  int64_t top_k = 0, page_size = 0, tokens = 0, seqs = 0, decode_steps = 0, check_rows = 0;
  CommonOptions common;
  CheckpointDemoOptions checkpoint;  // --checkpoint FILE --prefix P: the QKV step on its weights
};

// Registers the subcommand and its options; `options` receives the parsed values.
CLI::App* add_demo_command(CLI::App* app, DemoOptions* options);
int run_demo(const CLI::App& command, const DemoOptions& options);

}  // namespace quantkv::tool
