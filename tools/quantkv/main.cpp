// The quantkv program. Subcommands: info (more come with the demo and bench).
#include <CLI/CLI.hpp>

#include "info_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"quantkv: low-precision LLM inference kernels over a paged KV cache"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Print version, CPU features, ISA level, threads, CUDA");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*info) return quantkv::tool::run_info();
  return 0;
}
