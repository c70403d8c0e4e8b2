// Built-in model shapes for `quantkv demo`: one decoder layer of a DeepSeek-V3.2-style model.
// The fused QKV projection is DeepSeek's fused_qkv_a_proj (hidden -> [q_lora | kv_lora + rope]),
// whose latent KV goes into an MLA cache (kv_dim 1, one head); the lightning indexer projects
// q_lora to H x D query heads, hidden to one D-wide key and H head weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quantkv/status.hpp"

namespace quantkv::tool {

struct ModelShape {
  std::string name;
  int64_t hidden = 0;       // K of the QKV GEMM (DeepSeek: 7168)
  int64_t q_lora = 0;       // q_dim: the Q columns of the GEMM (q_lora_rank, 1536)
  int64_t kv_lora = 0;      // latent KV width (kv_lora_rank, 512)
  int64_t rope_dim = 0;     // rotary part of the MLA key (qk_rope_head_dim, 64)
  int64_t index_heads = 0;  // indexer H (64)
  int64_t index_dim = 0;    // indexer D (128)
  int64_t top_k = 0;        // keys the indexer selects per token (2048)
  int64_t page_size = 0;    // tokens per cache page
  // Run sizes.
  int64_t tokens = 0;        // prompt tokens of the longest sequence
  int64_t seqs = 0;          // sequences in the batch (2..4 by default)
  int64_t decode_steps = 0;  // one new token per sequence per step
  int64_t check_rows = 0;    // rows (tokens) compared against the fp32 computation

  int64_t kv_width() const { return kv_lora + rope_dim; }  // MLA cache head_size
  int64_t qkv_n() const { return q_lora + kv_width(); }    // N of the QKV GEMM
};

// "deepseek-v3.2" (full shapes), "deepseek-v3.2-mini" (the default: seconds on 2 cores),
// "deepseek-v3.2-tiny" (what --quick runs).
const std::vector<ModelShape>& model_presets();
std::vector<std::string> model_preset_names();
Status find_model_preset(const std::string& name, ModelShape* out);

// Checks a shape after the command line's overrides; the message names the option.
Status validate_model_shape(const ModelShape& shape);

// Prompt lengths of the sequences: the longest has `tokens`, the others step down evenly,
// each ending a little before a page boundary so that decoding crosses into a new page.
std::vector<int64_t> prompt_lengths(const ModelShape& shape);

}  // namespace quantkv::tool
