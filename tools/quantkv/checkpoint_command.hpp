// `quantkv inspect FILE` and `quantkv demo --checkpoint FILE --prefix P`: the checkpoint
// loaders from the command line (docs/checkpoints.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli_common.hpp"

namespace quantkv::tool {

struct InspectOptions {
  std::string file;
};
CLI::App* add_inspect_command(CLI::App* app, InspectOptions* options);
int run_inspect(const InspectOptions& options);

struct CheckpointDemoOptions {
  std::string file, prefix;
  std::string activations = "bf16";  // bf16 (weight-only) or quantized (the weight's format)
  int64_t head_size = 64;
  int64_t tokens = 64;
  uint64_t seed = 42;
};
// `demo --checkpoint FILE --prefix P`: the QKV step on the checkpoint's weights with Gaussian
// activations, the error against fp64 on the dequantised weights.
int run_checkpoint_demo(const CheckpointDemoOptions& options, const CommonOptions& common);

}  // namespace quantkv::tool
