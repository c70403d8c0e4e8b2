#include "demo_layer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/threads.hpp"
#include "glue_math.hpp"
#include "quantkv/scale_layout.hpp"
#include "synthetic.hpp"

namespace quantkv::tool {

// The tensors of one batch, kept until its checks are done.
struct DemoLayer::Batch {
  int64_t rows = 0;
  std::vector<uint32_t> offs;                    // [B + 1]
  std::vector<int64_t> cache_len;                // [B] tokens cached before this batch
  std::vector<int32_t> row_seq;                  // [T]
  std::vector<float> x;                          // [T, hidden] unquantised activations
  std::vector<bfloat16> q;                       // [T, q_lora] Q columns of the QKV GEMM
  std::vector<float> q_idx;                      // [T, H * D] indexer queries (bf16 values, from q)
  std::vector<float> k_idx;                      // [T, D] indexer keys (bf16 values, from x)
  std::vector<bfloat16> q_idx_bf16, k_idx_bf16;  // the same as the engine hands them over
  std::vector<float> q_idx_rope, k_idx_rope;     // with RoPE applied in fp32 (the reference)
  std::vector<uint32_t> positions;               // [T]
  std::vector<int32_t> indices_unrotated;        // [T, top_k] without the Hadamard rotation
  std::vector<int32_t> indices_mxfp4;            // [T, top_k] over the MXFP4 K cache
  std::vector<float> w_idx;                      // [T, H] indexer head weights (fp32, from x)
  std::vector<float8_e4m3fn> q_fp8;              // [T, H, D]
  std::vector<float> q_s;                        // [T, H]
  std::vector<int32_t> indices;                  // [T, top_k]

  int64_t position(int64_t row) const {
    const int32_t b = row_seq[row];
    return cache_len[b] + row - offs[b];
  }
};

namespace {

using Clock = std::chrono::steady_clock;

Context make_context(int threads) {
  Context ctx;
  ctx.num_threads = threads;
  return ctx;
}

// Runs `fn` (returning Status) and books its time under `step`.
template <typename Fn>
Status timed(PhaseStats* stats, Progress* progress, int step, double work, Fn&& fn) {
  if (progress != nullptr) progress->stage(demo_step_name(step));
  const auto t0 = Clock::now();
  Status status = fn();
  stats->seconds[step] += std::chrono::duration<double>(Clock::now() - t0).count();
  stats->work[step] += work;
  return status;
}

// NVFP4's global multiplier g = 448 * 6 / amax (contract §5); MX formats ignore it.
float global_multiplier(const std::vector<float>& x, BlockFormat format) {
  if (format != BlockFormat::kNVFP4) return 1.0f;
  float amax = 0.0f;
  for (const float v : x) amax = std::max(amax, std::fabs(v));
  return amax > 0.0f ? kE4M3Max * kE2M1Max / amax : 1.0f;
}

Status quantize_matrix(const std::vector<float>& x, int64_t rows, int64_t k, BlockFormat format,
                       float global, std::vector<uint8_t>* data, std::vector<uint8_t>* scales,
                       const Context& ctx) {
  const int64_t kb = k / sf_vector_size(format);
  data->assign(std::size_t(rows * row_bytes(format, k)), 0);
  scales->assign(std::size_t(swizzled_scale_elements(rows, kb)), 0);
  return quantize_dynamic_block_scaled(
      make_view(x.data(), rows, k), global, format,
      make_view(data->data(), rows, row_bytes(format, k)),
      make_view<uint8_t, 5>(scales->data(), swizzled_scale_shape(rows, kb)), ctx);
}

// Indexer score of every key j < bound for one query: sum_h max(q_h . k_j, 0) * w_h.
std::vector<float> fp32_scores(const float* q,     // [H, D]
                               const float* w,     // [H]
                               const float* keys,  // [bound, D]
                               int64_t bound, int64_t heads, int64_t dim) {
  std::vector<float> dots(std::size_t(heads * bound));
  matmul_nt(q, heads, dim, keys, bound, dots.data(), /*threads=*/1);
  std::vector<float> scores(std::size_t(bound), 0.0f);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < bound; ++j) scores[j] += std::max(dots[h * bound + j], 0.0f) * w[h];
  }
  return scores;
}

// Positions of the n best scores (score descending, position ascending), sorted by position.
std::vector<int32_t> top_positions(const std::vector<float>& scores, int64_t n) {
  std::vector<int32_t> order(scores.size());
  for (std::size_t j = 0; j < order.size(); ++j) order[j] = int32_t(j);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  order.resize(std::size_t(n));
  std::sort(order.begin(), order.end());
  return order;
}

int64_t count_common(std::vector<int32_t> a, const std::vector<int32_t>& sorted_b) {
  std::sort(a.begin(), a.end());
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), sorted_b.begin(), sorted_b.end(),
                        std::back_inserter(both));
  return int64_t(both.size());
}

// fp32 RoPE of one row's rope part, in double (the demo's reference; the library rotates on
// its own): pair i turns by (cs[2i], cs[2i + 1]) = (cos, sin).
void rope_reference(float* x, const float* cs, int64_t rope_dim, bool interleaved) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float& a = interleaved ? x[2 * i] : x[i];
    float& b = interleaved ? x[2 * i + 1] : x[i + half];
    const double c = cs[2 * i], sn = cs[2 * i + 1], a0 = a, b0 = b;
    a = float(a0 * c - b0 * sn);
    b = float(a0 * sn + b0 * c);
  }
}

std::vector<float> freqs_table(int64_t positions, int64_t rope_dim) {
  std::vector<float> f(std::size_t(positions * rope_dim));
  if (rope_dim >= 2) (void)make_freqs_cis(make_view(f.data(), positions, rope_dim), 10000.0);
  return f;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

const char* demo_step_name(int step) {
  static const char* names[kNumDemoSteps] = {
      "quantise activations",  "fused QKV GEMM -> KV cache", "indexer projections (fp32 glue)",
      "indexer K store (fp8)", "indexer Q prepare (fp8)",    "indexer top-k (causal)"};
  return names[step];
}

const char* demo_step_unit(int step) {
  return step == kStepQkv || step == kStepProjections || step == kStepIndexer ? "GFLOP/s" : "GB/s";
}

double PhaseStats::total_seconds() const {
  double s = 0;
  for (const double v : seconds) s += v;
  return s;
}

Status DemoLayer::init(const DemoConfig& config, const std::vector<int64_t>& prompt_lengths) {
  cfg_ = config;
  const ModelShape& s = cfg_.shape;
  const int64_t batch = int64_t(prompt_lengths.size());
  const int threads = cfg_.threads;
  // Weights ~ N(0, 1/fan_in): unit-variance outputs from unit-variance inputs.
  w_qkv_.resize(std::size_t(s.qkv_n() * s.hidden));
  fill_normal(w_qkv_.data(), s.qkv_n(), s.hidden, 1.0f / std::sqrt(float(s.hidden)), cfg_.seed, 1,
              threads);
  wq_b_.resize(std::size_t(s.index_heads * s.index_dim * s.q_lora));
  fill_normal(wq_b_.data(), s.index_heads * s.index_dim, s.q_lora,
              1.0f / std::sqrt(float(s.q_lora)), cfg_.seed, 2, threads);
  wk_.resize(std::size_t(s.index_dim * s.hidden));
  fill_normal(wk_.data(), s.index_dim, s.hidden, 1.0f / std::sqrt(float(s.hidden)), cfg_.seed, 3,
              threads);
  ww_.resize(std::size_t(s.index_heads * s.hidden));
  fill_normal(ww_.data(), s.index_heads, s.hidden, 1.0f / std::sqrt(float(s.hidden)), cfg_.seed, 4,
              threads);

  const auto t0 = Clock::now();
  w_global_ = global_multiplier(w_qkv_, cfg_.format);
  QUANTKV_RETURN_IF_ERROR(quantize_matrix(w_qkv_, s.qkv_n(), s.hidden, cfg_.format, w_global_,
                                          &w_qkv_data_, &w_qkv_scales_, make_context(threads)));
  const int64_t kb = s.hidden / sf_vector_size(cfg_.format);
  QUANTKV_RETURN_IF_ERROR(prepare_qkv_weights(
      make_view<const uint8_t>(w_qkv_data_.data(), s.qkv_n(), row_bytes(cfg_.format, s.hidden)),
      make_view<const uint8_t, 5>(w_qkv_scales_.data(), swizzled_scale_shape(s.qkv_n(), kb)),
      cfg_.format, &w_prepared_, make_context(threads)));
  weight_quantize_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();

  // Both caches hold the prompts plus every decode step; a few spare pages stay in the pool.
  int64_t pages = 0, max_pages = 1;
  for (const int64_t len : prompt_lengths) {
    const int64_t p = (len + s.decode_steps + s.page_size - 1) / s.page_size;
    pages += p;
    max_pages = std::max(max_pages, p);
  }
  PagedKVCacheConfig kv;
  kv.dtype = DType::kBF16;
  kv.num_blocks = pages + batch;
  kv.kv_dim = 1;
  kv.num_layers = 1;
  kv.page_size = s.page_size;
  kv.num_heads = 1;
  kv.head_size = s.kv_width();
  kv.batch_size = batch;
  kv.max_pages_per_seq = max_pages;
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(kv, cfg_.seed + 11, &kv_cache_));
  PagedKVCacheConfig ix = kv;
  ix.dtype = DType::kE4M3;
  ix.head_size = s.index_dim;
  ix.scale_granularity = s.index_dim;  // one scale per token
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(ix, cfg_.seed + 12, &index_cache_));
  QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(ix, cfg_.seed + 13, &index_cache_unrotated_));
  if (s.index_dim % 32 == 0) {
    index_mxfp4_.assign(
        std::size_t(ix.num_blocks * ix.page_size * (s.index_dim / 2 + s.index_dim / 32)), 0);
  }
  keys_.assign(std::size_t(batch), {});
  // RoPE: DeepSeek's MLA rotates the trailing rope_dim of the latent K (interleaved pairs); the
  // indexer the leading min(rope_dim, D / 2) of its q and k (half-split pairs).
  max_positions_ = *std::max_element(prompt_lengths.begin(), prompt_lengths.end()) + s.decode_steps;
  freqs_mla_ = freqs_table(max_positions_, s.rope_dim % 2 == 0 ? s.rope_dim : 0);
  index_rope_ = std::min(s.rope_dim, s.index_dim / 2) / 2 * 2;
  freqs_index_ = freqs_table(max_positions_, index_rope_);
  return Status::Ok();
}

std::vector<uint32_t> DemoLayer::kv_page_ids(int64_t b) {
  std::vector<uint32_t> ids;
  const std::vector<uint32_t>& table = kv_cache_.raw_lookup_table();
  const int64_t width = kv_cache_.config().max_pages_per_seq;
  for (int64_t p = 0; p < kv_cache_.pages_used(b); ++p) ids.push_back(table[b * width + p]);
  return ids;
}

Status DemoLayer::quantize_and_project(Batch& bt, PhaseStats* stats) {
  const ModelShape& s = cfg_.shape;
  const Context ctx = make_context(cfg_.threads);
  const int64_t t = bt.rows;
  const BlockFormat f = cfg_.format;
  std::vector<uint8_t> x_data, x_scales;
  const float x_global = global_multiplier(bt.x, f);
  QUANTKV_RETURN_IF_ERROR(timed(stats, progress_, kStepQuantize, double(t * s.hidden * 4), [&] {
    return quantize_matrix(bt.x, t, s.hidden, f, x_global, &x_data, &x_scales, ctx);
  }));

  // The GEMM's factor is the inverse of both global multipliers (1 for MX formats).
  const float tensor_sf = f == BlockFormat::kNVFP4 ? 1.0f / (x_global * w_global_) : 1.0f;
  const int64_t kb = s.hidden / sf_vector_size(f);
  bt.q.assign(std::size_t(t * s.q_lora), bfloat16{0});
  const PagedKVCacheCollection kv = kv_cache_.view();
  QUANTKV_RETURN_IF_ERROR(
      timed(stats, progress_, kStepQkv, 2.0 * double(t * s.qkv_n() * s.hidden), [&] {
        return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            make_view<const uint8_t>(x_data.data(), t, row_bytes(f, s.hidden)),
            make_view<const uint32_t>(bt.offs.data(), int64_t(bt.offs.size())), w_prepared_,
            make_view<const uint8_t, 5>(x_scales.data(), swizzled_scale_shape(t, kb)),
            SectionScales{tensor_sf, tensor_sf, tensor_sf}, kv, /*layer_idx=*/0,
            make_view(bt.q.data(), t, s.q_lora), ctx);
      }));
  // RoPE on the k_pe part of the latent K just written (MLA's q_pe belongs to the attention,
  // which this demo does not run: no query heads here).
  if (s.rope_dim >= 2 && s.rope_dim % 2 == 0) {
    QUANTKV_RETURN_IF_ERROR(timed(stats, progress_, kStepQkv, 0.0, [&] {
      RopeOptions o;
      o.freqs_cis = make_view<const float>(freqs_mla_.data(), max_positions_, s.rope_dim);
      o.layout = RopeLayout::kInterleaved;
      bfloat16 none{};
      return fused_qk_rope_ragged(
          make_view<const bfloat16>(&none, t, 0, s.kv_width()),
          make_view<const uint32_t>(bt.offs.data(), int64_t(bt.offs.size())), kv, o, 0,
          make_view(&none, t, 0, s.kv_width()), ctx);
    }));
  }

  // DeepSeek-V3.2's indexer: q = wq_b(q_lora), k = wk(x), weights = weights_proj(x). These
  // are ordinary GEMMs outside the library; the demo does them in fp32 (norms and RoPE left
  // out: they do not change what the kernels do).
  const int64_t hd = s.index_heads * s.index_dim;
  const double flops =
      2.0 * double(t) * double(hd * s.q_lora + (s.index_dim + s.index_heads) * s.hidden);
  return timed(stats, progress_, kStepProjections, flops, [&] {
    std::vector<float> q_in(bt.q.size());
    for (std::size_t i = 0; i < q_in.size(); ++i) q_in[i] = bf16_to_float(bt.q[i].bits);
    bt.q_idx.resize(std::size_t(t * hd));
    bt.k_idx.resize(std::size_t(t * s.index_dim));
    bt.w_idx.resize(std::size_t(t * s.index_heads));
    matmul_nt(q_in.data(), t, s.q_lora, wq_b_.data(), hd, bt.q_idx.data(), cfg_.threads);
    matmul_nt(bt.x.data(), t, s.hidden, wk_.data(), s.index_dim, bt.k_idx.data(), cfg_.threads);
    matmul_nt(bt.x.data(), t, s.hidden, ww_.data(), s.index_heads, bt.w_idx.data(), cfg_.threads);
    to_engine_activations(bt);
    return Status::Ok();
  });
}

// The engine hands the indexer bf16 q and k (and applies RoPE itself, or lets the front end do
// it): the demo rounds its fp32 projections to bf16 and keeps an fp32 copy rotated here, the
// reference the recall is measured against.
void DemoLayer::to_engine_activations(Batch& bt) const {
  const ModelShape& s = cfg_.shape;
  const int64_t t = bt.rows, h = s.index_heads, d = s.index_dim;
  bt.q_idx_bf16.resize(bt.q_idx.size());
  bt.k_idx_bf16.resize(bt.k_idx.size());
  for (std::size_t i = 0; i < bt.q_idx.size(); ++i) {
    bt.q_idx_bf16[i].bits = float_to_bf16(bt.q_idx[i]);
    bt.q_idx[i] = bf16_to_float(bt.q_idx_bf16[i].bits);
  }
  for (std::size_t i = 0; i < bt.k_idx.size(); ++i) {
    bt.k_idx_bf16[i].bits = float_to_bf16(bt.k_idx[i]);
    bt.k_idx[i] = bf16_to_float(bt.k_idx_bf16[i].bits);
  }
  bt.q_idx_rope = bt.q_idx;
  bt.k_idx_rope = bt.k_idx;
  bt.positions.resize(std::size_t(t));
  for (int64_t r = 0; r < t; ++r) {
    bt.positions[r] = uint32_t(bt.position(r));
    if (index_rope_ == 0) continue;
    const float* cs = freqs_index_.data() + bt.position(r) * index_rope_;
    for (int64_t head = 0; head < h; ++head)
      rope_reference(&bt.q_idx_rope[(r * h + head) * d], cs, index_rope_, false);
    rope_reference(&bt.k_idx_rope[r * d], cs, index_rope_, false);
  }
}

// DeepSeek-V3.2's front end: RoPE (when the shape has one) and, when `rotate`, the Hadamard
// rotation (D must be a power of two).
IndexerFrontEnd DemoLayer::front_end(const Batch& bt, bool rotate) const {
  IndexerFrontEnd fe;
  if (index_rope_ > 0) {
    fe = deepseek_v32_front_end(
        make_view<const float>(freqs_index_.data(), max_positions_, index_rope_),
        make_view<const uint32_t>(bt.positions.data(), bt.rows));
  }
  fe.hadamard = rotate ? HadamardMode::kWalshHadamard : HadamardMode::kNone;
  return fe;
}

// The indexer's three calls (K store, Q prepare, top-k) on `cache`, into `indices`.
Status DemoLayer::index(Batch& bt, PagedKVCache& cache, const IndexerFrontEnd& fe,
                        std::vector<int32_t>* indices, PhaseStats* stats) {
  const ModelShape& s = cfg_.shape;
  const Context ctx = make_context(cfg_.threads);
  const int64_t t = bt.rows, h = s.index_heads, d = s.index_dim;
  const auto offs = make_view<const uint32_t>(bt.offs.data(), int64_t(bt.offs.size()));
  const PagedKVCacheCollection ix = cache.view();
  QUANTKV_RETURN_IF_ERROR(timed(stats, progress_, kStepKStore, double(t * d * 3), [&] {
    return indexer_k_store(make_view<const bfloat16>(bt.k_idx_bf16.data(), t, d), offs, ix, 0,
                           ScaleMode::kPowerOfTwo, fe, ctx);
  }));
  bt.q_fp8.assign(std::size_t(t * h * d), float8_e4m3fn{0});
  bt.q_s.assign(std::size_t(t * h), 0.0f);
  QUANTKV_RETURN_IF_ERROR(timed(stats, progress_, kStepQPrepare, double(t * h * d * 3), [&] {
    return indexer_q_prepare(make_view<const bfloat16>(bt.q_idx_bf16.data(), t, h, d),
                             make_view<const float>(bt.w_idx.data(), t, h),
                             make_view(bt.q_fp8.data(), t, h, d), make_view(bt.q_s.data(), t, h),
                             ScaleMode::kPowerOfTwo, fe, ctx);
  }));
  double flops = 0;
  for (int64_t r = 0; r < t; ++r) flops += 2.0 * double(bt.position(r) + 1) * double(h * d);
  indices->assign(std::size_t(t * s.top_k), -2);
  return timed(stats, progress_, kStepIndexer, flops, [&] {
    return mla_indexer_ragged_float8_paged(make_view(indices->data(), t, s.top_k),
                                           make_view<const float8_e4m3fn>(bt.q_fp8.data(), t, h, d),
                                           make_view<const float>(bt.q_s.data(), t, h), offs, ix, 0,
                                           MaskType::kCausal, ctx);
  });
}

Status DemoLayer::run_indexer(Batch& bt, PhaseStats* stats) {
  // Without the rotation first (untimed: a comparison, not part of the pipeline), then the
  // pipeline itself: DeepSeek-V3.2's front end with the rotation.
  const bool rotate = power_of_two(cfg_.shape.index_dim);
  if (rotate) {
    PhaseStats scratch;
    QUANTKV_RETURN_IF_ERROR(
        index(bt, index_cache_unrotated_, front_end(bt, false), &bt.indices_unrotated, &scratch));
  }
  QUANTKV_RETURN_IF_ERROR(index(bt, index_cache_, front_end(bt, rotate), &bt.indices, stats));
  return index_mxfp4(bt, front_end(bt, rotate));
}

// The pipeline's keys (same front end) stored into the MXFP4 form of the engines' layout and
// scored with the pipeline's q (untimed: a comparison).
Status DemoLayer::index_mxfp4(Batch& bt, const IndexerFrontEnd& fe) {
  if (index_mxfp4_.empty()) return Status::Ok();
  const ModelShape& s = cfg_.shape;
  const Context ctx = make_context(cfg_.threads);
  const int64_t t = bt.rows, h = s.index_heads, d = s.index_dim;
  const PagedKVCacheCollection ix = index_cache_.view();
  EngineIndexerKCache c;
  c.data = index_mxfp4_.data();
  c.num_blocks = ix.num_blocks;
  c.page_size = ix.page_size;
  c.head_size = d;
  c.format = IndexKFormat::kMxfp4;
  c.cache_lengths = ix.cache_lengths;
  c.lookup_table = ix.lookup_table;
  IndexerKStoreArgs store;
  store.k_bf16 = make_view<const bfloat16>(bt.k_idx_bf16.data(), t, d);
  store.input_row_offsets = make_view<const uint32_t>(bt.offs.data(), int64_t(bt.offs.size()));
  store.k_cache = &c;
  store.front_end = &fe;
  QUANTKV_RETURN_IF_ERROR(indexer_k_store(store, ctx));
  bt.indices_mxfp4.assign(std::size_t(t * s.top_k), -2);
  MlaIndexerArgs a;
  a.output_indices = make_view(bt.indices_mxfp4.data(), t, s.top_k);
  a.q = make_view<const float8_e4m3fn>(bt.q_fp8.data(), t, h, d);
  a.q_s = make_view<const float>(bt.q_s.data(), t, h);
  a.input_row_offsets = store.input_row_offsets;
  a.k_cache = &c;
  return mla_indexer(a, ctx);
}

Status DemoLayer::run_batch(const std::vector<int64_t>& new_tokens, const std::string& label,
                            PhaseStats* stats) {
  const ModelShape& s = cfg_.shape;
  const int64_t batch = int64_t(new_tokens.size());
  Batch bt;
  bt.offs.assign(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    bt.cache_len.push_back(kv_cache_.cache_length(b));
    bt.offs.push_back(bt.offs.back() + uint32_t(new_tokens[b]));
    for (int64_t i = 0; i < new_tokens[b]; ++i) bt.row_seq.push_back(int32_t(b));
    const int64_t end = bt.cache_len[b] + new_tokens[b];
    QUANTKV_RETURN_IF_ERROR(kv_cache_.reserve(b, end));
    QUANTKV_RETURN_IF_ERROR(index_cache_.reserve(b, end));
    QUANTKV_RETURN_IF_ERROR(index_cache_unrotated_.reserve(b, end));
  }
  bt.rows = bt.offs.back();
  bt.x.resize(std::size_t(bt.rows * s.hidden));
  fill_normal(bt.x.data(), bt.rows, s.hidden, 1.0f, cfg_.seed, 1000 + batch_counter_++,
              cfg_.threads);

  QUANTKV_RETURN_IF_ERROR(quantize_and_project(bt, stats));
  QUANTKV_RETURN_IF_ERROR(run_indexer(bt, stats));

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t end = bt.cache_len[b] + new_tokens[b];
    QUANTKV_RETURN_IF_ERROR(kv_cache_.set_cache_length(b, end));
    QUANTKV_RETURN_IF_ERROR(index_cache_.set_cache_length(b, end));
    QUANTKV_RETURN_IF_ERROR(index_cache_unrotated_.set_cache_length(b, end));
    const float* first = bt.k_idx_rope.data() + bt.offs[b] * s.index_dim;
    keys_[b].insert(keys_[b].end(), first, first + new_tokens[b] * s.index_dim);
  }
  stats->batches += 1;
  stats->tokens += bt.rows;
  if (progress_ != nullptr) progress_->stage("checking against fp32");
  validate_indices(bt);
  check_batch(bt);
  keep_samples(bt, label);
  return Status::Ok();
}

void DemoLayer::validate_indices(const Batch& bt) {
  const int64_t k = cfg_.shape.top_k;
  std::vector<int64_t> seen;
  for (int64_t r = 0; r < bt.rows; ++r) {
    const int64_t bound = bt.position(r) + 1;
    const int64_t n = std::min(k, bound);
    seen.assign(std::size_t(bound), 0);
    const int32_t* row = bt.indices.data() + r * k;
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t j = row[i];
      if (j < 0 || j >= bound || seen[j]++) ok = false;
    }
    for (int64_t i = n; i < k; ++i) ok = ok && row[i] == -1;
    checks_.rows_validated += 1;
    checks_.index_errors += ok ? 0 : 1;
  }
}

void DemoLayer::check_batch(const Batch& bt) {
  const ModelShape& s = cfg_.shape;
  const int threads = cfg_.threads;
  // Evenly spaced rows, the batch's last row included (it sees the most keys).
  const int64_t stride = std::max<int64_t>(1, (bt.rows + s.check_rows - 1) / s.check_rows);
  std::vector<int64_t> rows;
  for (int64_t r = bt.rows - 1; r >= 0; r -= stride) rows.push_back(r);
  const int64_t n_rows = int64_t(rows.size());

  // fp32 reference of the QKV GEMM on the unquantised activations and weights.
  std::vector<float> xs(std::size_t(n_rows * s.hidden));
  for (int64_t i = 0; i < n_rows; ++i) {
    std::copy_n(bt.x.data() + rows[i] * s.hidden, s.hidden, xs.data() + i * s.hidden);
  }
  std::vector<float> ref(std::size_t(n_rows * s.qkv_n()));
  matmul_nt(xs.data(), n_rows, s.hidden, w_qkv_.data(), s.qkv_n(), ref.data(), threads);
  std::vector<float> q_ref(std::size_t(n_rows * s.q_lora));
  for (int64_t i = 0; i < n_rows; ++i) {
    const int64_t r = rows[i], b = bt.row_seq[r], pos = bt.position(r);
    float* ref_row = ref.data() + i * s.qkv_n();
    if (!freqs_mla_.empty() && s.rope_dim >= 2) {  // the cache's k_pe is rotated at its position
      rope_reference(ref_row + s.q_lora + s.kv_lora, freqs_mla_.data() + pos * s.rope_dim,
                     s.rope_dim, true);
    }
    for (int64_t n = 0; n < s.q_lora; ++n) {
      const double e = double(bf16_to_float(bt.q[r * s.q_lora + n].bits)) - ref_row[n];
      checks_.q_err2 += e * e;
      checks_.q_ref2 += double(ref_row[n]) * ref_row[n];
    }
    for (int64_t d = 0; d < s.kv_width(); ++d) {
      const double e = double(kv_cache_.get(b, pos, 0, 0, 0, d)) - ref_row[s.q_lora + d];
      checks_.kv_err2 += e * e;
      checks_.kv_ref2 += double(ref_row[s.q_lora + d]) * ref_row[s.q_lora + d];
    }
    std::copy_n(ref_row, s.q_lora, q_ref.data() + i * s.q_lora);
  }
  // The indexer queries an all-fp32 pipeline would have produced.
  const int64_t hd = s.index_heads * s.index_dim;
  std::vector<float> q_idx_ref(std::size_t(n_rows * hd));
  matmul_nt(q_ref.data(), n_rows, s.q_lora, wq_b_.data(), hd, q_idx_ref.data(), threads);
  for (int64_t i = 0; i < n_rows && index_rope_ > 0; ++i) {
    const float* cs = freqs_index_.data() + bt.position(rows[i]) * index_rope_;
    for (int64_t head = 0; head < s.index_heads; ++head) {
      rope_reference(&q_idx_ref[(i * s.index_heads + head) * s.index_dim], cs, index_rope_, false);
    }
  }

  // One row per thread (one parallel region for the whole batch, not one per row).
  std::vector<int64_t> own_hits(std::size_t(n_rows), -1), pipeline_hits(std::size_t(n_rows), -1),
      unrotated_hits(std::size_t(n_rows), 0), mxfp4_hits(std::size_t(n_rows), 0);
  // Two fp32 score passes per row: 2 * keys * H * D multiply-adds. A decode batch's few rows
  // stay on this thread (docs/threads.md): a woken worker keeps spinning into the next step.
  double macs = 0;
  for (int64_t i = 0; i < n_rows; ++i) macs += 2.0 * double(bt.position(rows[i]) + 1) * double(hd);
  const int used = threads_for_work(make_context(threads), macs, kMinMacsPerThread);
#pragma omp parallel for schedule(dynamic) num_threads(used) if (used > 1)
  for (int64_t i = 0; i < n_rows; ++i) {
    const int64_t r = rows[i], b = bt.row_seq[r], bound = bt.position(r) + 1;
    if (bound <= s.top_k) continue;  // every key is selected: nothing to rank
    const float* w = bt.w_idx.data() + r * s.index_heads;
    const float* keys = keys_[b].data();
    const std::vector<int32_t> selected(bt.indices.begin() + r * s.top_k,
                                        bt.indices.begin() + (r + 1) * s.top_k);
    const auto own = top_positions(
        fp32_scores(bt.q_idx_rope.data() + r * hd, w, keys, bound, s.index_heads, s.index_dim),
        s.top_k);
    const auto pipeline = top_positions(
        fp32_scores(q_idx_ref.data() + i * hd, w, keys, bound, s.index_heads, s.index_dim),
        s.top_k);
    own_hits[i] = count_common(selected, own);
    pipeline_hits[i] = count_common(selected, pipeline);
    if (!bt.indices_unrotated.empty()) {
      unrotated_hits[i] =
          count_common(std::vector<int32_t>(bt.indices_unrotated.begin() + r * s.top_k,
                                            bt.indices_unrotated.begin() + (r + 1) * s.top_k),
                       own);
    }
    if (!bt.indices_mxfp4.empty()) {
      mxfp4_hits[i] =
          count_common(std::vector<int32_t>(bt.indices_mxfp4.begin() + r * s.top_k,
                                            bt.indices_mxfp4.begin() + (r + 1) * s.top_k),
                       own);
    }
  }
  checks_.rotation_compared = !bt.indices_unrotated.empty();
  checks_.mxfp4_compared = !bt.indices_mxfp4.empty();
  checks_.rows_checked += n_rows;
  for (int64_t i = 0; i < n_rows; ++i) {
    if (own_hits[i] < 0) continue;
    checks_.contested_rows += 1;
    checks_.recall_hits += own_hits[i];
    checks_.recall_total += s.top_k;
    checks_.unrotated_hits += unrotated_hits[i];
    checks_.mxfp4_hits += mxfp4_hits[i];
    checks_.pipeline_hits += pipeline_hits[i];
    checks_.pipeline_total += s.top_k;
  }
}

void DemoLayer::keep_samples(const Batch& bt, const std::string& label) {
  constexpr int64_t kShown = 10;
  const bool decode = label.rfind("decode", 0) == 0;
  if (decode) {  // keep only the latest decode step
    std::erase_if(samples_, [](const IndexSample& s) { return s.when.rfind("decode", 0) == 0; });
  }
  for (int64_t b = 0; b + 1 < int64_t(bt.offs.size()); ++b) {
    if (bt.offs[b + 1] == bt.offs[b]) continue;
    const int64_t r = bt.offs[b + 1] - 1;  // the sequence's last new token
    IndexSample sample;
    sample.seq = b;
    sample.position = bt.position(r);
    sample.visible = sample.position + 1;
    sample.when = decode ? label : "prompt end";
    const int64_t n = std::min({kShown, cfg_.shape.top_k, sample.visible});
    sample.indices.assign(bt.indices.begin() + r * cfg_.shape.top_k,
                          bt.indices.begin() + r * cfg_.shape.top_k + n);
    samples_.push_back(sample);
  }
}

}  // namespace quantkv::tool
