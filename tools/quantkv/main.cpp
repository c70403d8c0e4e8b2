// The quantkv program. Subcommands: info, demo, bench, inspect.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "bench_command.hpp"
#include "checkpoint_command.hpp"
#include "cli_common.hpp"
#include "demo_command.hpp"
#include "info_command.hpp"

namespace {

// The subcommand the user named (even when its parsing failed), or the program itself.
const CLI::App& failing_command(const CLI::App& app) {
  for (const CLI::App* sub :
       app.get_subcommands([](const CLI::App* s) { return s->count() > 0; })) {
    return *sub;
  }
  return app;
}

int run(int argc, char** argv) {
  CLI::App app{"quantkv: low-precision LLM inference kernels over a paged KV cache", "quantkv"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Print version, CPU features, ISA level, threads, CUDA");
  quantkv::tool::DemoOptions demo_options;
  CLI::App* demo = quantkv::tool::add_demo_command(&app, &demo_options);
  quantkv::tool::BenchOptions bench_options;
  CLI::App* bench = quantkv::tool::add_bench_command(&app, &bench_options);
  quantkv::tool::InspectOptions inspect_options;
  CLI::App* inspect = quantkv::tool::add_inspect_command(&app, &inspect_options);
  // CLI11 only says "a subcommand is required" for an unknown word; name it instead.
  if (argc > 1 && argv[1][0] != '-' &&
      std::as_const(app)
          .get_subcommands([&](const CLI::App* s) { return s->check_name(argv[1]); })
          .empty()) {
    return quantkv::tool::report_usage_error(app, std::string("unknown command '") + argv[1] +
                                                      "' (expected info, demo, bench or inspect)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the option or value, then the usage line (no help dump).
    return quantkv::tool::report_usage_error(failing_command(app), e.what());
  }
  if (*info) return quantkv::tool::run_info();
  if (*demo) return quantkv::tool::run_demo(*demo, demo_options);
  if (*bench) return quantkv::tool::run_bench(*bench, bench_options);
  if (*inspect) return quantkv::tool::run_inspect(inspect_options);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing should throw past the commands; if something does (e.g. out of memory), say so in
  // one line instead of terminating with a trace.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "quantkv: error: out of memory (are the sizes too large?)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quantkv: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "quantkv: error: unexpected failure\n");
  }
  return quantkv::tool::kExitFailure;
}
