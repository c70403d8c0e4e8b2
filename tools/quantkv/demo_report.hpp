// What `quantkv demo` prints: a readable report, or JSON (--json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "demo_layer.hpp"

namespace quantkv::tool {

struct SequenceReport {
  int64_t prompt = 0;  // prompt tokens
  int64_t length = 0;  // tokens cached at the end
  int64_t kv_pages_after_prompt = 0;
  int64_t kv_pages = 0;            // MLA cache pages at the end
  int64_t index_pages = 0;         // indexer cache pages at the end
  std::vector<uint32_t> page_ids;  // the MLA cache pages, in logical order
};

// The documented accuracy bounds (docs/demo.md), by format. Measured on the built-in presets
// with seeds 1..20; the bounds leave a margin above the worst case seen.
struct DemoBounds {
  double q_rel_err_max;   // ||Q - Q_fp32|| / ||Q_fp32|| over the checked rows
  double kv_rel_err_max;  // same for the latent K read back from the paged cache
  double recall_min;      // indexer top-k recall vs fp32 scores on the same fp32 inputs
};
DemoBounds demo_bounds(BlockFormat format);

struct DemoRun {
  DemoConfig config;
  std::string isa;
  std::vector<int64_t> prompts;
  std::vector<SequenceReport> sequences;
  int64_t kv_num_blocks = 0;
  double weight_quantize_seconds = 0;
  PhaseStats prefill, decode;
  CheckStats checks;
  std::vector<IndexSample> samples;

  double q_rel_err() const;
  double kv_rel_err() const;
  double recall() const;            // NaN when no checked row had more keys than top_k
  double pipeline_recall() const;   // NaN likewise
  double unrotated_recall() const;  // recall without the Hadamard rotation; NaN when not run
  double mxfp4_recall() const;      // recall over an MXFP4 index-K cache; NaN when not run
};

void print_demo_report(const DemoRun& run);
std::string demo_json(const DemoRun& run);

}  // namespace quantkv::tool
