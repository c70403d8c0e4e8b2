#include "cli_common.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::tool {

void add_common_options(CLI::App* app, CommonOptions* o) {
  app->add_option("--threads", o->threads, "Worker threads (0: all cores)")
      ->check(CLI::Range(0, 4096));
  std::vector<std::string> levels;  // every name; one the CPU lacks fails with its reason
  for (IsaLevel l : kAllIsaLevels) levels.push_back(isa_level_name(l));
  app->add_option("--isa", o->isa, "Force a code path (default: the best this CPU supports)")
      ->check(CLI::IsMember(levels));
  app->add_flag("--json", o->json, "Print machine-readable JSON on stdout instead of the report");
  app->add_flag("--progress", o->progress,
                "Show progress of long steps on stderr even when it is not a terminal");
}

Status apply_common_options(const CommonOptions& o, int* threads) {
  if (!o.isa.empty()) {
    IsaLevel level;
    QUANTKV_RETURN_IF_ERROR(parse_isa_level(o.isa, &level));
    const Status set = set_isa_level(level);
    if (!set.ok()) return invalid_argument("--isa " + o.isa + ": " + set.message());
  }
  Context ctx;
  ctx.num_threads = o.threads;
  *threads = resolved_num_threads(ctx);
  return Status::Ok();
}

std::string format_seconds(double seconds) {
  char buf[32];
  if (seconds < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0f us", seconds * 1e6);
  else if (seconds < 1.0)
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

int report_failure(const Status& status) {
  std::fprintf(stderr, "quantkv: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

int report_usage_error(const CLI::App& app, const std::string& message) {
  std::string path = app.get_name();
  for (const CLI::App* p = app.get_parent(); p != nullptr; p = p->get_parent()) {
    path = (p->get_name().empty() ? "quantkv" : p->get_name()) + " " + path;
  }
  std::fprintf(stderr, "%s: error: %s\nusage: %s [OPTIONS]  (run '%s --help' for the options)\n",
               path.c_str(), message.c_str(), path.c_str(), path.c_str());
  return kExitUsage;
}

}  // namespace quantkv::tool
