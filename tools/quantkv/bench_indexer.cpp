// `quantkv bench`: the indexer at DeepSeek-V3.2's shapes.
#include <cmath>
#include <string>
#include <vector>

#include "bench_shapes.hpp"
#include "progress.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "synthetic.hpp"

namespace quantkv::tool {
namespace {

constexpr int64_t kHeads = 64, kDim = 128, kTopK = 2048, kPage = 64;

struct IndexerCase {
  std::string name;
  int64_t batch;       // sequences
  int64_t new_tokens;  // per sequence
  int64_t cache_len;   // tokens cached before the call, per sequence
};

std::vector<IndexerCase> indexer_cases(bool quick) {
  if (quick) return {{"prefill T=512 causal", 1, 512, 0}, {"decode B=2x1 @ 8K", 2, 1, 8192}};
  return {{"prefill T=4096 causal", 1, 4096, 0},
          {"decode B=8x1 @ 32K", 8, 1, 32768},
          {"decode B=8x1 @ 128K", 8, 1, 131072},
          // MTP: 4 query rows per sequence, each K tile read once for the 4 (docs/indexer.md).
          {"decode MTP B=8x4 @ 32K", 8, 4, 32768}};
}

// Random e4m3 codes without the two NaN codes (0x7F, 0xFF).
void fill_e4m3(uint8_t* data, int64_t count, uint64_t seed, int threads) {
  fill_bytes(data, count, 0, 0xFF, seed, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < count; ++i) {
    if ((data[i] & 0x7F) == 0x7F) data[i] = uint8_t(data[i] - 1);
  }
}

Status run_case(const BenchPlan& plan, const IndexerCase& c, BenchResult* result) {
  const int64_t keys = c.cache_len + c.new_tokens;  // per sequence
  const int64_t t = c.batch * c.new_tokens;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = 1;
  cfg.page_size = kPage;
  cfg.num_heads = 1;
  cfg.head_size = kDim;
  cfg.scale_granularity = kDim;
  cfg.batch_size = c.batch;
  cfg.max_pages_per_seq = (keys + kPage - 1) / kPage;
  cfg.num_blocks = c.batch * cfg.max_pages_per_seq;
  PagedKVCache cache;
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(cfg, 7, &cache));
  fill_e4m3(cache.raw_blocks().data(), int64_t(cache.raw_blocks().size()), 1, plan.threads);
  fill_normal(cache.raw_scales().data(), 1, int64_t(cache.raw_scales().size()), 1.0f, 2, 0,
              plan.threads);
  for (float& s : cache.raw_scales()) s = std::fabs(s) / 448.0f + 1e-4f;  // scales are positive
  for (int64_t b = 0; b < c.batch; ++b) {
    QUANTKV_RETURN_IF_ERROR(cache.reserve(b, keys));
    QUANTKV_RETURN_IF_ERROR(cache.set_cache_length(b, c.cache_len));
  }
  std::vector<uint8_t> q(std::size_t(t * kHeads * kDim));
  fill_e4m3(q.data(), int64_t(q.size()), 3, plan.threads);
  std::vector<float> q_s(std::size_t(t * kHeads));
  fill_normal(q_s.data(), t, kHeads, 1.0f / std::sqrt(float(kHeads * kDim)), 4, 0, plan.threads);
  std::vector<uint32_t> offs(std::size_t(c.batch + 1));
  for (int64_t b = 0; b <= c.batch; ++b) offs[b] = uint32_t(b * c.new_tokens);
  std::vector<int32_t> out(std::size_t(t * kTopK));

  Context ctx;
  ctx.num_threads = plan.threads;
  const PagedKVCacheCollection view = cache.view();
  auto call = [&] {
    return mla_indexer_ragged_float8_paged(
        make_view(out.data(), t, kTopK),
        make_view(reinterpret_cast<const float8_e4m3fn*>(q.data()), t, kHeads, kDim),
        make_view<const float>(q_s.data(), t, kHeads),
        make_view<const uint32_t>(offs.data(), c.batch + 1), view, 0, MaskType::kCausal, ctx);
  };
  result->op = "indexer";
  result->name = c.name;
  result->shape = "H=64 D=128 top_k=2048 page=64";
  result->compute = CeilingKind::kBf16Dot;
  // Causal: token i of a sequence sees cache_len + i + 1 keys.
  double visible = 0;
  for (int64_t i = 0; i < c.new_tokens; ++i) visible += double(c.cache_len + i + 1);
  result->flops = 2.0 * double(c.batch) * visible * kHeads * kDim;
  result->bytes =
      double(c.batch * keys) * (kDim + 4) + double(t) * kHeads * (kDim + 4) + double(t) * kTopK * 4;
  Progress progress("indexer " + c.name, 0, plan.progress);
  return time_call(plan, /*cold=*/c.new_tokens <= 8, call, &result->seconds, &result->reps);
}

}  // namespace

Status bench_indexer(const BenchPlan& plan, std::vector<BenchResult>* results) {
  for (const IndexerCase& c : indexer_cases(plan.quick)) {
    BenchResult r;
    QUANTKV_RETURN_IF_ERROR(run_case(plan, c, &r));
    results->push_back(r);
  }
  return Status::Ok();
}

}  // namespace quantkv::tool
