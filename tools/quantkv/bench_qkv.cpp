// `quantkv bench`: the NVFP4 fused QKV projection at Llama-like shapes.
#include <string>
#include <vector>

#include "bench_shapes.hpp"
#include "progress.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/scale_layout.hpp"
#include "synthetic.hpp"

namespace quantkv::tool {
namespace {

constexpr int64_t kPage = 64, kHeadSize = 128, kDecodeCache = 1024;

struct QkvModel {
  std::string name;
  int64_t k;         // hidden size
  int64_t q_dim;     // Q columns
  int64_t kv_heads;  // K and V heads of head_size 128
  int64_t n() const { return q_dim + 2 * kv_heads * kHeadSize; }
};

std::vector<QkvModel> qkv_models(bool quick) {
  if (quick) return {{"small", 1024, 1024, 2}};
  return {{"llama3-8b", 4096, 4096, 8}, {"llama-70b", 8192, 8192, 8}};
}
// M = 1 .. 64: batched decode (M sequences of one token each), the serving regime; 512 and
// 2048: prefill of one sequence.
constexpr int64_t kMaxDecodeRows = 64;
std::vector<int64_t> qkv_rows(bool quick) {
  if (quick) return {1, 16, 256};
  return {1, 2, 4, 8, 16, 32, 64, 512, 2048};
}

// Packed fp4 data (every byte is valid) and NVFP4 scales: e4m3 codes 0x30..0x40 (0.5 .. 2),
// laid out in the 5-D swizzled layout.
Status random_operand(int64_t rows, int64_t k, uint64_t seed, int threads,
                      std::vector<uint8_t>* data, std::vector<uint8_t>* scales) {
  data->resize(std::size_t(rows * k / 2));
  fill_bytes(data->data(), int64_t(data->size()), 0, 0xFF, seed, threads);
  const int64_t kb = k / 16;
  std::vector<uint8_t> linear(std::size_t(rows * kb));
  fill_bytes(linear.data(), int64_t(linear.size()), 0x30, 0x40, seed + 1, threads);
  scales->assign(std::size_t(swizzled_scale_elements(rows, kb)), 0);
  return linear_to_swizzled_scales(
      make_view<const uint8_t>(linear.data(), rows, kb),
      make_view<uint8_t, 5>(scales->data(), swizzled_scale_shape(rows, kb)));
}

// The weight as a model holds it: quantised, then repacked once for the CPU kernels (the
// plain entry point would repack it on every call).
struct Weight {
  std::vector<uint8_t> data, scales;
  PreparedQkvWeights prepared;
};

Status run_case(const BenchPlan& plan, const QkvModel& model, const Weight& w, int64_t m,
                BenchResult* result) {
  // Decode: m sequences of one token after 1024 cached; prefill: one sequence.
  const bool decode = m <= kMaxDecodeRows;
  const int64_t batch = decode ? m : 1;
  const int64_t per_seq = decode ? 1 : m;
  const int64_t cached = decode ? kDecodeCache : 0;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kBF16;
  cfg.kv_dim = 2;
  cfg.page_size = kPage;
  cfg.num_heads = model.kv_heads;
  cfg.head_size = kHeadSize;
  cfg.batch_size = batch;
  cfg.max_pages_per_seq = (cached + per_seq + kPage - 1) / kPage;
  cfg.num_blocks = batch * cfg.max_pages_per_seq;
  PagedKVCache cache;
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(cfg, 9, &cache));
  for (int64_t b = 0; b < batch; ++b) {
    QUANTKV_RETURN_IF_ERROR(cache.reserve(b, cached + per_seq));
    QUANTKV_RETURN_IF_ERROR(cache.set_cache_length(b, cached));
  }
  std::vector<uint8_t> a, a_scales;
  QUANTKV_RETURN_IF_ERROR(random_operand(m, model.k, 11, plan.threads, &a, &a_scales));
  std::vector<uint32_t> offs(std::size_t(batch + 1));
  for (int64_t b = 0; b <= batch; ++b) offs[b] = uint32_t(b * per_seq);
  std::vector<bfloat16> out(std::size_t(m * model.q_dim));
  const int64_t kb = model.k / 16;

  Context ctx;
  ctx.num_threads = plan.threads;
  const PagedKVCacheCollection view = cache.view();
  auto call = [&] {
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        make_view<const uint8_t>(a.data(), m, model.k / 2),
        make_view<const uint32_t>(offs.data(), batch + 1), w.prepared,
        make_view<const uint8_t, 5>(a_scales.data(), swizzled_scale_shape(m, kb)), SectionScales{},
        view, 0, make_view(out.data(), m, model.q_dim), ctx);
  };
  result->op = "qkv";
  result->name = model.name + " M=" + std::to_string(m);
  result->shape = "K=" + std::to_string(model.k) + " N=" + std::to_string(model.n()) + " nvfp4";
  // fp4 x fp4 runs as int8 products; small M is bound by streaming the weight once instead
  // where the machine's bandwidth x intensity is below its int8 rate (BenchResult::bound).
  result->compute = CeilingKind::kInt8Dot;
  result->flops = 2.0 * double(m) * double(model.n()) * double(model.k);
  const double operand = double(model.k) / 2 + double(model.k) / 16;  // bytes per row
  result->bytes = double(m + model.n()) * operand + double(m) * double(model.q_dim) * 2 +
                  double(m) * double(model.n() - model.q_dim) * 2;
  Progress progress("qkv " + result->name, 0, plan.progress);
  return time_call(plan, /*cold=*/decode, call, &result->seconds, &result->reps);
}

}  // namespace

Status bench_qkv(const BenchPlan& plan, std::vector<BenchResult>* results) {
  for (const QkvModel& model : qkv_models(plan.quick)) {
    Weight w;
    QUANTKV_RETURN_IF_ERROR(
        random_operand(model.n(), model.k, 5, plan.threads, &w.data, &w.scales));
    Context ctx;
    ctx.num_threads = plan.threads;
    const int64_t kb = model.k / 16;
    QUANTKV_RETURN_IF_ERROR(prepare_qkv_weights(
        make_view<const uint8_t>(w.data.data(), model.n(), model.k / 2),
        make_view<const uint8_t, 5>(w.scales.data(), swizzled_scale_shape(model.n(), kb)),
        BlockFormat::kNVFP4, &w.prepared, ctx));
    for (const int64_t m : qkv_rows(plan.quick)) {
      BenchResult r;
      QUANTKV_RETURN_IF_ERROR(run_case(plan, model, w, m, &r));
      results->push_back(r);
    }
  }
  return Status::Ok();
}

}  // namespace quantkv::tool
