// The CPU lightning indexer's chunk plan and driver (see indexer_driver.hpp).
#include "cpu/indexer_driver.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "cpu/indexer_kernels.hpp"
#include "cpu/indexer_mxfp4.hpp"
#include "cpu/kernels.hpp"
#include "cpu/topk.hpp"

namespace quantkv::cpu {
namespace {

constexpr std::size_t kAlign = 64;

std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<unsigned char[], AlignedFree>;
AlignedBuffer aligned_buffer(std::size_t bytes) {
  return AlignedBuffer(
      static_cast<unsigned char*>(std::aligned_alloc(kAlign, round_up(bytes ? bytes : 1, kAlign))));
}

int64_t padded_row(int64_t key_bound) {
  return int64_t(round_up(std::size_t(key_bound), kIndexerKeyBlock));
}

// Workspace bytes of one row: its padded score row, its staged q (bf16) and q_s, its offset.
std::size_t row_bytes(const IndexerArgs& a, int64_t key_bound) {
  const std::size_t H = std::size_t(a.q.shape[1]), D = std::size_t(a.q.shape[2]);
  return std::size_t(padded_row(key_bound)) * sizeof(float) + H * D * 2 + H * sizeof(float) +
         sizeof(int64_t);
}

// Row r of q as bf16 (exact) and its q_s, contiguous for the kernels.
void stage_row(const IndexerArgs& a, int64_t r, int64_t r0, uint16_t* q16, float* qs) {
  const int64_t H = a.q.shape[1], D = a.q.shape[2];
  for (int64_t h = 0; h < H; ++h) {
    convert_e4m3_to_bf16(&a.q(r, h, 0).bits, q16 + ((r - r0) * H + h) * D, D);
    qs[(r - r0) * H + h] = a.q_s(r, h);
  }
}

// Gathers the K rows and scales of an item's tile through the page table, then scores it.
void score_item(const IndexerArgs& a, const IndexerPlan& p, const IndexerWorkItem& it, int64_t r0,
                const uint16_t* q16, const float* qs, float* scores, const int64_t* row_off,
                IndexerTileFn kernel, const uint8_t** k_rows, float* k_scales, const uint8_t** k_sf,
                void* scratch) {
  const quantkv::detail::IndexerKeys& c = a.keys;
  const int64_t H = a.q.shape[1], D = a.q.shape[2];
  const int64_t num_keys = int64_t(c.cache_lengths(it.seq)) + int64_t(a.offsets(it.seq + 1)) -
                           int64_t(a.offsets(it.seq));
  const int64_t tile_end =
      std::min({it.key_begin + kIndexerKeyTile, num_keys, p.key_bound[it.row_end - 1]});
  const bool mxfp4 = c.format == IndexKFormat::kMxfp4, nvfp4 = c.format == IndexKFormat::kNvfp4;
  const float nvfp4_scale = 1.0f / c.global_scale;  // fl(1/g), every key's k_scale
  // Walk the pages: one lookup (and no division) per page, consecutive slots within it.
  for (int64_t j = it.key_begin; j < tile_end;) {
    const int64_t page = c.page_of(it.seq, j), slot0 = j % c.page_size;
    const int64_t n = std::min(tile_end - j, c.page_size - slot0);
    const uint8_t* row = c.key_row(page, slot0);
    const uint8_t* scale = c.scale_bytes(page, slot0);
    if (mxfp4 || nvfp4) {
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* sf = scale + i * c.scale_slot_stride;
        k_rows[j - it.key_begin + i] = row + i * c.row_slot_stride;
        k_sf[j - it.key_begin + i] = sf;
        k_scales[j - it.key_begin + i] =
            nvfp4 ? nvfp4_scale : mxfp4_key_scale(sf, int(D / kMxfp4Block));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        k_rows[j - it.key_begin + i] = row + i * c.row_slot_stride;
        std::memcpy(&k_scales[j - it.key_begin + i], scale + i * c.scale_slot_stride,
                    sizeof(float));
      }
    }
    j += n;
  }
  IndexerTile t;
  t.head_dim = int(D);
  t.num_heads = int(H);
  t.k_rows = k_rows;
  t.k_scales = k_scales;
  t.k_block_scales = mxfp4 || nvfp4 ? k_sf : nullptr;
  t.k_nvfp4 = nvfp4;
  t.num_keys = int(tile_end - it.key_begin);
  t.q_bf16 = q16 + (it.row_begin - r0) * H * D;
  t.q_s = qs + (it.row_begin - r0) * H;
  t.num_tokens = int(it.row_end - it.row_begin);
  t.key_limit0 = p.key_bound[it.row_begin] - it.key_begin;
  t.key_limit_step = a.mask == MaskType::kCausal ? 1 : 0;
  t.scores = scores + it.key_begin;
  t.row_offsets = row_off + (it.row_begin - r0);
  kernel(t, scratch);
}

// Positions -> page id * page_size + slot, in place (the -1 tail is past n and stays).
void to_global_slots(const quantkv::detail::IndexerKeys& c, int32_t b, int64_t n, int32_t* row) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = row[i];
    row[i] = int32_t(int64_t(c.page_of(b, pos)) * c.page_size + pos % c.page_size);
  }
}

}  // namespace

void make_indexer_items(const IndexerPlan& p, int64_t r0, int64_t r1,
                        std::vector<IndexerWorkItem>* items) {
  items->clear();
  for (int64_t r = r0; r < r1;) {
    const int32_t b = p.row_seq[r];
    int64_t e = r;
    while (e < r1 && p.row_seq[e] == b) ++e;
    const int64_t max_bound = p.key_bound[e - 1];  // bounds grow along a sequence's rows
    for (int64_t j0 = 0; j0 < max_bound; j0 += kIndexerKeyTile) {
      int64_t first = r;
      while (first < e && p.key_bound[first] <= j0) ++first;  // causally masked: skip
      items->push_back({b, j0, first, e});
    }
    r = e;
  }
}

Status plan_indexer(const IndexerArgs& a, std::size_t budget, IndexerPlan* p) {
  const quantkv::detail::IndexerKeys& c = a.keys;
  const int64_t T = a.q.shape[0], H = a.q.shape[1], D = a.q.shape[2];
  const int64_t top_k = a.output.shape[1];
  p->row_seq = row_to_sequence(a.offsets);
  p->key_bound.resize(std::size_t(T));
  int64_t max_bound = 0;
  for (int64_t r = 0; r < T; ++r) {
    const int32_t b = p->row_seq[r];
    const int64_t cache_len = c.cache_lengths(b), i = r - int64_t(a.offsets(b));
    const int64_t num_keys = cache_len + int64_t(a.offsets(b + 1)) - int64_t(a.offsets(b));
    p->key_bound[r] = a.mask == MaskType::kCausal ? cache_len + i + 1 : num_keys;
    max_bound = std::max(max_bound, p->key_bound[r]);
  }
  p->per_thread_bytes = round_up(indexer_tile_scratch_bytes(int(D), int(H)), kAlign) +
                        kIndexerKeyTile * (2 * sizeof(void*) + sizeof(float)) +
                        topk_scratch_bytes(max_bound, top_k);
  // Besides the threads' scratch, the per-row plan arrays and the largest item list.
  const std::size_t items =
      std::size_t(max_bound / kIndexerKeyTile + 1) * std::size_t(c.batch_size());
  const std::size_t fixed = std::size_t(a.num_threads) * p->per_thread_bytes +
                            std::size_t(T) * (sizeof(int32_t) + sizeof(int64_t)) +
                            items * sizeof(IndexerWorkItem) + 8 * kAlign;
  p->fixed_bytes = fixed;
  p->chunk_begin.clear();
  p->workspace_bytes = 0;
  std::size_t used = 0;
  for (int64_t r = 0; r < T; ++r) {
    const std::size_t need = row_bytes(a, p->key_bound[r]);
    if (fixed + need > budget) {
      return {StatusCode::kResourceExhausted,
              "ctx.scores_budget_bytes: expected at least " + std::to_string(fixed + need) +
                  " bytes (row " + std::to_string(r) + " sees " + std::to_string(p->key_bound[r]) +
                  " keys; " + std::to_string(fixed) + " bytes of scratch for " +
                  std::to_string(a.num_threads) + " threads), got " + std::to_string(budget)};
    }
    if (r == 0 || fixed + used + need > budget) {
      p->chunk_begin.push_back(r);
      used = 0;
    }
    used += need;
    p->workspace_bytes = std::max(p->workspace_bytes, used);
  }
  p->chunk_begin.push_back(T);
  return Status::Ok();
}

Status run_indexer(const IndexerArgs& a, const IndexerPlan& p, IndexerTimings* timings) {
  const int64_t H = a.q.shape[1], D = a.q.shape[2], top_k = a.output.shape[1];
  const IndexerTileFn kernel = kernels().indexer.score_tile;
  // Filled by one thread per chunk, read by all.
  std::vector<int64_t> row_off;
  std::vector<IndexerWorkItem> items;
  // Every allocation happens here, before any output is written, so that running out of
  // memory is an error status and never an exception inside the parallel region.
  AlignedBuffer workspace;
  std::vector<AlignedBuffer> scratch(std::size_t(a.num_threads));
  std::vector<TopkScratch> topk(std::size_t(a.num_threads));
  try {
    workspace = aligned_buffer(p.workspace_bytes + 4 * kAlign);
    bool ok = workspace != nullptr;
    for (AlignedBuffer& b : scratch) {
      b = aligned_buffer(indexer_tile_scratch_bytes(int(D), int(H)));
      ok = ok && b != nullptr;
    }
    if (!ok) throw std::bad_alloc();
    const int64_t max_bound =
        p.key_bound.empty() ? 0 : *std::max_element(p.key_bound.begin(), p.key_bound.end());
    for (TopkScratch& t : topk) t.reserve(max_bound, top_k);
    int64_t max_rows = 0;
    for (std::size_t ci = 0; ci + 1 < p.chunk_begin.size(); ++ci) {
      max_rows = std::max(max_rows, p.chunk_begin[ci + 1] - p.chunk_begin[ci]);
    }
    row_off.reserve(std::size_t(max_rows));
    items.reserve(std::size_t(max_bound / kIndexerKeyTile + 1) * std::size_t(a.keys.batch_size()));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kResourceExhausted,
            "ctx.scores_budget_bytes: could not allocate the indexer's workspace of " +
                std::to_string(p.workspace_bytes + p.fixed_bytes) + " bytes; lower the budget"};
  }
  float* scores = nullptr;
  uint16_t* q16 = nullptr;
  float* qs = nullptr;
  double score_s = 0, topk_s = 0, t0 = 0, t1 = 0;
  // One parallel region for the whole call: the worksharing loops' barriers separate the
  // phases, and thread start-up and scratch allocation happen once (this matters on loaded
  // machines, where every fork/join can wait for a descheduled thread).
#pragma omp parallel num_threads(a.num_threads) if (a.num_threads > 1)
  {
    void* tile_scratch = scratch[std::size_t(omp_get_thread_num())].get();
    TopkScratch* row_topk = &topk[std::size_t(omp_get_thread_num())];
    const uint8_t* k_rows[kIndexerKeyTile];
    float k_scales[kIndexerKeyTile];
    const uint8_t* k_sf[kIndexerKeyTile];
    for (std::size_t ci = 0; ci + 1 < p.chunk_begin.size(); ++ci) {
      const int64_t r0 = p.chunk_begin[ci], r1 = p.chunk_begin[ci + 1];
#pragma omp single
      {
        // Workspace of the chunk: score rows | staged q | staged q_s.
        t0 = omp_get_wtime();
        row_off.resize(std::size_t(r1 - r0));
        int64_t total = 0;
        for (int64_t r = r0; r < r1; ++r) {
          row_off[r - r0] = total;
          total += padded_row(p.key_bound[r]);
        }
        scores = reinterpret_cast<float*>(workspace.get());
        q16 =
            reinterpret_cast<uint16_t*>(workspace.get() + round_up(std::size_t(total) * 4, kAlign));
        qs = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(q16) +
                                      round_up(std::size_t((r1 - r0) * H * D) * 2, kAlign));
        make_indexer_items(p, r0, r1, &items);
      }
#pragma omp for schedule(static)
      for (int64_t r = r0; r < r1; ++r) stage_row(a, r, r0, q16, qs);
#pragma omp for schedule(dynamic, 1)
      for (std::size_t i = 0; i < items.size(); ++i) {
        score_item(a, p, items[i], r0, q16, qs, scores, row_off.data(), kernel, k_rows, k_scales,
                   k_sf, tile_scratch);
      }
#pragma omp master
      t1 = omp_get_wtime();
#pragma omp for schedule(dynamic, 1)
      for (int64_t r = r0; r < r1; ++r) {
        topk_row(scores + row_off[r - r0], p.key_bound[r], top_k, &a.output(r, 0), row_topk);
        if (a.output_form == IndexOutput::kGlobalSlots) {
          to_global_slots(a.keys, p.row_seq[r], std::min(top_k, p.key_bound[r]), &a.output(r, 0));
        }
      }
#pragma omp single  // its barrier keeps the next chunk's single away from t0
      {
        const double t2 = omp_get_wtime();
        score_s += t1 - t0;
        topk_s += t2 - t1;
      }
    }
  }
  if (timings) {
    timings->score_seconds = score_s;
    timings->topk_seconds = topk_s;
    timings->chunks = int64_t(p.chunk_begin.size()) - 1;
    timings->workspace_bytes = int64_t(p.workspace_bytes + p.fixed_bytes);
  }
  return Status::Ok();
}

}  // namespace quantkv::cpu
