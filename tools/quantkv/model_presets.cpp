#include "model_presets.hpp"

#include <algorithm>

namespace quantkv::tool {

const std::vector<ModelShape>& model_presets() {
  // name, hidden, q_lora, kv_lora, rope, H, D, top_k, page, tokens, seqs, decode, check rows
  static const std::vector<ModelShape> presets = {
      {"deepseek-v3.2", 7168, 1536, 512, 64, 64, 128, 2048, 64, 2560, 2, 8, 128},
      {"deepseek-v3.2-mini", 1024, 256, 128, 32, 16, 64, 64, 16, 320, 3, 8, 1024},
      {"deepseek-v3.2-tiny", 256, 64, 64, 32, 8, 64, 16, 16, 64, 2, 4, 1024},
  };
  return presets;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelShape& s : model_presets()) names.push_back(s.name);
  return names;
}

Status find_model_preset(const std::string& name, ModelShape* out) {
  for (const ModelShape& s : model_presets()) {
    if (s.name == name) {
      *out = s;
      return Status::Ok();
    }
  }
  std::string known;
  for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("--preset: unknown model '" + name + "' (known: " + known + ")");
}

Status validate_model_shape(const ModelShape& s) {
  // Block-scaled formats need K % 32 == 0 (MX: 32 values per scale, NVFP4: 16).
  if (s.hidden <= 0 || s.hidden % 32 != 0) {
    return invalid_argument("--hidden: expected a positive multiple of 32, got " +
                            std::to_string(s.hidden));
  }
  const struct {
    const char* option;
    int64_t value;
  } positive[] = {
      {"--q-lora", s.q_lora},       {"--kv-lora", s.kv_lora}, {"--index-heads", s.index_heads},
      {"--index-dim", s.index_dim}, {"--top-k", s.top_k},     {"--page-size", s.page_size},
      {"--tokens", s.tokens},       {"--seqs", s.seqs},       {"--check-rows", s.check_rows}};
  for (const auto& p : positive) {
    if (p.value <= 0) {
      return invalid_argument(std::string(p.option) + ": expected > 0, got " +
                              std::to_string(p.value));
    }
  }
  if (s.rope_dim < 0)
    return invalid_argument("--rope-dim: expected >= 0, got " + std::to_string(s.rope_dim));
  if (s.decode_steps < 0) {
    return invalid_argument("--decode-steps: expected >= 0, got " + std::to_string(s.decode_steps));
  }
  if (s.tokens < s.seqs) {
    return invalid_argument("--tokens: expected at least one token per sequence (--seqs " +
                            std::to_string(s.seqs) + "), got " + std::to_string(s.tokens));
  }
  return Status::Ok();
}

std::vector<int64_t> prompt_lengths(const ModelShape& s) {
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < s.seqs; ++b) {
    const int64_t even = s.tokens * (s.seqs - b) / s.seqs;
    // Sequence b stops b + 1 tokens short of a page boundary (when it is long enough), so
    // its (b + 2)-th decode step opens a new page.
    int64_t len = even;
    if (b > 0 && even > s.page_size) len = (even / s.page_size) * s.page_size - (b + 1);
    lengths.push_back(std::max<int64_t>(1, len));
  }
  return lengths;
}

}  // namespace quantkv::tool
