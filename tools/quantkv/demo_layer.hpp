// The layer `quantkv demo` runs: NVFP4 (or MX) fused QKV into a paged MLA cache, then the
// DeepSeek-V3.2 lightning indexer over its own fp8 K cache, on synthetic weights and
// activations. Each batch (a prefill or one decode step) goes through the same steps and is
// checked, on sampled rows, against fp32 arithmetic on the unquantised data.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model_presets.hpp"
#include "progress.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/rope.hpp"
#include "quantkv/status.hpp"

namespace quantkv::tool {

struct DemoConfig {
  ModelShape shape;
  BlockFormat format = BlockFormat::kNVFP4;
  uint64_t seed = 42;
  int threads = 1;
  bool progress = false;
};

// The steps of one batch, in order.
enum DemoStep : int {
  kStepQuantize = 0,  // activations -> block-scaled (library: quantize_dynamic_block_scaled)
  kStepQkv,           // fused QKV GEMM, K/V into the paged cache (library)
  kStepProjections,   // indexer projections wq_b, wk, weights_proj (fp32, demo glue)
  kStepKStore,        // indexer K store (library)
  kStepQPrepare,      // indexer Q prepare (library)
  kStepIndexer,       // indexer top-k (library)
  kNumDemoSteps
};
const char* demo_step_name(int step);
const char* demo_step_unit(int step);  // "GB/s" or "GFLOP/s"

// Time and work of one phase (prefill, or all decode steps together).
struct PhaseStats {
  int64_t batches = 0;
  int64_t tokens = 0;
  std::array<double, kNumDemoSteps> seconds{};
  std::array<double, kNumDemoSteps> work{};  // bytes or flops, by demo_step_unit
  double total_seconds() const;
};

// Agreement with the fp32 computation on the unquantised data, summed over checked rows.
struct CheckStats {
  int64_t rows_checked = 0;
  double q_err2 = 0, q_ref2 = 0;    // Q output (bf16) vs x . W^T in fp32
  double kv_err2 = 0, kv_ref2 = 0;  // latent KV read back from the paged cache vs fp32
  // Rows with more visible keys than top_k (the others select every key).
  int64_t contested_rows = 0;
  int64_t recall_hits = 0, recall_total = 0;  // indexer vs fp32 scores on its own fp32 inputs
  int64_t unrotated_hits = 0;      // the same without the Hadamard rotation (RoPE, fp8 only)
  bool rotation_compared = false;  // index_dim is a power of two: both variants ran
  int64_t mxfp4_hits = 0;          // the same keys in an MXFP4 index-K cache (DeepSeek-V4)
  bool mxfp4_compared = false;     // index_dim is a multiple of 32: the MXFP4 cache ran
  int64_t pipeline_hits = 0, pipeline_total = 0;  // everything quantised vs everything fp32
  int64_t rows_validated = 0;                     // every row's indices: distinct, visible, -1 tail
  int64_t index_errors = 0;
};

// A sample of the selected keys, for the report.
struct IndexSample {
  int64_t seq = 0;
  int64_t position = 0;          // absolute position of the query token
  int64_t visible = 0;           // keys it could choose from (causal)
  std::string when;              // "prompt end", "decode step 8"
  std::vector<int32_t> indices;  // the first few, best first
};

class DemoLayer {
 public:
  // Synthetic weights (quantised once), empty caches sized for the whole run.
  Status init(const DemoConfig& config, const std::vector<int64_t>& prompt_lengths);

  // One batch: `new_tokens[b]` tokens for sequence b (a prefill, or 1 each for a decode step).
  Status run_batch(const std::vector<int64_t>& new_tokens, const std::string& label,
                   PhaseStats* stats);

  // Where run_batch reports its current step (may be null).
  void set_progress(Progress* progress) { progress_ = progress; }

  const CheckStats& checks() const { return checks_; }
  const std::vector<IndexSample>& samples() const { return samples_; }
  double weight_quantize_seconds() const { return weight_quantize_seconds_; }
  int64_t length(int64_t b) const { return kv_cache_.cache_length(b); }
  int64_t kv_pages(int64_t b) const { return kv_cache_.pages_used(b); }
  int64_t index_pages(int64_t b) const { return index_cache_.pages_used(b); }
  std::vector<uint32_t> kv_page_ids(int64_t b);
  int64_t kv_num_blocks() const { return kv_cache_.config().num_blocks; }

 private:
  struct Batch;
  Status quantize_and_project(Batch& batch, PhaseStats* stats);
  Status run_indexer(Batch& batch, PhaseStats* stats);
  void check_batch(const Batch& batch);
  void validate_indices(const Batch& batch);
  void keep_samples(const Batch& batch, const std::string& label);
  void to_engine_activations(Batch& batch) const;
  IndexerFrontEnd front_end(const Batch& batch, bool rotate) const;
  Status index(Batch& batch, PagedKVCache& cache, const IndexerFrontEnd& fe,
               std::vector<int32_t>* indices, PhaseStats* stats);
  Status index_mxfp4(Batch& batch, const IndexerFrontEnd& fe);

  DemoConfig cfg_;
  Progress* progress_ = nullptr;
  std::vector<float> w_qkv_;           // [N, hidden] fp32, the unquantised weight
  std::vector<uint8_t> w_qkv_data_;    // [N, row_bytes(hidden)]
  std::vector<uint8_t> w_qkv_scales_;  // 5-D swizzled
  float w_global_ = 1.0f;              // the weight's global multiplier g_w (NVFP4)
  PreparedQkvWeights w_prepared_;      // repacked once for the CPU kernels, as a model would
  std::vector<float> wq_b_;            // [H * D, q_lora]
  std::vector<float> wk_;              // [D, hidden]
  std::vector<float> ww_;              // [H, hidden]
  PagedKVCache kv_cache_;              // MLA latent: bf16, kv_dim 1, 1 head of kv_width
  PagedKVCache index_cache_;  // indexer K: e4m3, kv_dim 1, 1 head of D, one scale per token
  std::vector<std::vector<float>>
      keys_;  // per sequence [length, D]: fp32 indexer keys (RoPE applied)
  // The cos/sin table of every position the run reaches [max_positions, rope], the rope part of
  // the indexer (leading, half-split; min(rope_dim, index_dim / 2) even) and the second indexer
  // cache that stores the same keys without the Hadamard rotation (for the recall comparison).
  std::vector<float> freqs_mla_, freqs_index_;
  int64_t max_positions_ = 0, index_rope_ = 0;
  PagedKVCache index_cache_unrotated_;
  // The same keys (rotated) in the engines' MXFP4 layout (IndexKFormat::kMxfp4), over
  // index_cache_'s page table: the recall an FP4 index-K cache keeps.
  std::vector<uint8_t> index_mxfp4_;
  uint64_t batch_counter_ = 0;
  double weight_quantize_seconds_ = 0;
  CheckStats checks_;
  std::vector<IndexSample> samples_;
};

}  // namespace quantkv::tool
