// Validation of paged caches and ragged batches, and the owning PagedKVCache.
#include "quantkv/paged_kv.hpp"

#include <algorithm>
#include <new>
#include <numeric>
#include <string>

#include "core/cache_snapshot.hpp"
#include "core/checked_math.hpp"
#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "quantkv/formats.hpp"

namespace quantkv {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kE4M3:
      return "float8_e4m3fn";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kE4M3:
      return 1;
  }
  return 0;
}

namespace {
std::string str(int64_t v) { return std::to_string(v); }

// Elements and bytes of the blocks (and scales) of a collection with positive dimensions.
struct StorageSize {
  int64_t block_elements = 0, block_bytes = 0, scale_elements = 0, scale_bytes = 0;
};
bool storage_size(const PagedKVCacheCollection& c, StorageSize* s) {
  const int64_t slots[] = {c.num_blocks, c.kv_dim, c.num_layers, c.page_size, c.num_heads};
  int64_t num_slots = 0;
  if (!checked::product(slots, 5, &num_slots) ||
      !checked::mul(num_slots, c.head_size, &s->block_elements) ||
      !checked::bytes(s->block_elements, dtype_size(c.dtype), &s->block_bytes)) {
    return false;
  }
  if (c.scale_granularity <= 0) return true;
  return checked::mul(num_slots, c.scale_cols(), &s->scale_elements) &&
         checked::bytes(s->scale_elements, sizeof(float), &s->scale_bytes);
}

Status check_storage_size(const PagedKVCacheCollection& c, const std::string& n) {
  StorageSize s;
  if (!storage_size(c, &s)) {
    return invalid_argument(
        n + ": num_blocks * kv_dim * num_layers * page_size * num_heads * " + "head_size (" +
        str(c.num_blocks) + " * " + str(c.kv_dim) + " * " + str(c.num_layers) + " * " +
        str(c.page_size) + " * " + str(c.num_heads) + " * " + str(c.head_size) + ") " +
        dtype_name(c.dtype) + " elements (or their scales) do not fit in 2^63-1 bytes");
  }
  return Status::Ok();
}

// Positions the lookup table can hold (saturating: a product beyond int64 holds them all).
int64_t table_capacity(const PagedKVCacheCollection& c) {
  int64_t capacity = 0;
  return checked::mul(c.max_pages_per_seq(), c.page_size, &capacity) ? capacity : INT64_MAX;
}

// cache_len + seq_len of sequence b of a snapshot.
int64_t sequence_end(const CacheSnapshot& s, int64_t b) {
  return int64_t(s.cache_lengths[std::size_t(b)]) + int64_t(s.row_offsets[std::size_t(b) + 1]) -
         int64_t(s.row_offsets[std::size_t(b)]);
}

// Pages positions [0, end) occupy: ceil(end / page_size) without overflow.
int64_t pages_for(int64_t end, int64_t page_size) {
  return end / page_size + (end % page_size != 0);
}
}  // namespace

Status validate_paged_kv(const PagedKVCacheCollection& c, const char* name) {
  const std::string n(name);
  if (dtype_size(c.dtype) == 0) return invalid_argument(n + ".dtype: unknown dtype");
  const struct {
    const char* field;
    int64_t value;
  } dims[] = {{"num_blocks", c.num_blocks},
              {"num_layers", c.num_layers},
              {"page_size", c.page_size},
              {"num_heads", c.num_heads},
              {"head_size", c.head_size}};
  for (const auto& d : dims) {
    if (d.value < 1) {
      return invalid_argument(n + "." + d.field + ": expected >= 1, got " + str(d.value));
    }
  }
  if (c.kv_dim != 1 && c.kv_dim != 2) {
    return invalid_argument(n + ".kv_dim: expected 1 or 2, got " + str(c.kv_dim));
  }
  // Page ids are uint32 and num_blocks is the sentinel.
  if (c.num_blocks > int64_t(UINT32_MAX)) {
    return invalid_argument(n + ".num_blocks: expected <= 2^32-1, got " + str(c.num_blocks));
  }
  if (c.blocks == nullptr) return invalid_argument(n + ".blocks: data pointer is null");
  if (c.scales != nullptr && c.scale_granularity < 1) {
    return invalid_argument(n + ".scale_granularity: expected >= 1 with a scales tensor, got " +
                            str(c.scale_granularity));
  }
  QUANTKV_RETURN_IF_ERROR(check_storage_size(c, n));
  QUANTKV_RETURN_IF_ERROR(
      check_shape((n + ".cache_lengths").c_str(), "[B]", c.cache_lengths, {kAnyExtent}));
  QUANTKV_RETURN_IF_ERROR(check_shape((n + ".lookup_table").c_str(), "[B, max_pages_per_seq]",
                                      c.lookup_table, {c.cache_lengths.shape[0], kAnyExtent}));
  return Status::Ok();
}

namespace {
// The error of offsets that decrease from [b] to [b + 1] (built outside the checking loop).
Status decreasing_offsets(const std::string& n, int64_t b, uint32_t at_b, uint32_t at_next) {
  return invalid_argument(n + ": expected non-decreasing offsets, got " + n + "[" + str(b + 1) +
                          "] = " + str(at_next) + " < " + n + "[" + str(b) + "] = " + str(at_b));
}
}  // namespace

Status validate_row_offsets(const TensorView<const uint32_t, 1>& offs, int64_t batch_size,
                            int64_t total_rows, const char* name) {
  const std::string n(name);
  QUANTKV_RETURN_IF_ERROR(check_shape(name, "[B + 1]", offs, {batch_size + 1}));
  if (offs(0) != 0)
    return invalid_argument(n + ": expected " + n + "[0] == 0, got " + str(offs(0)));
  for (int64_t b = 0; b < batch_size; ++b) {
    if (offs(b + 1) < offs(b)) return decreasing_offsets(n, b, offs(b), offs(b + 1));
  }
  if (int64_t(offs(batch_size)) != total_rows) {
    return invalid_argument(n + ": expected " + n + "[B] == " + str(total_rows) +
                            " (the number of rows), got " + str(offs(batch_size)));
  }
  return Status::Ok();
}

Status validate_ragged_cache(const PagedKVCacheCollection& c,
                             const TensorView<const uint32_t, 1>& offs, bool require_pages,
                             const char* cache_name) {
  const std::string n(cache_name);
  const int64_t capacity = table_capacity(c);
  for (int64_t b = 0; b < c.batch_size(); ++b) {
    const int64_t end = int64_t(c.cache_lengths(b)) + int64_t(offs(b + 1)) - int64_t(offs(b));
    if (end > capacity) {
      return out_of_range(n + ".cache_lengths: sequence " + str(b) + " needs " + str(end) +
                          " positions (cache_length " + str(c.cache_lengths(b)) + " + " +
                          str(int64_t(offs(b + 1)) - int64_t(offs(b))) +
                          " new), the lookup table holds " + str(capacity));
    }
    if (!require_pages) continue;
    for (int64_t p = 0; p * c.page_size < end; ++p) {
      const uint32_t page = c.lookup_table(b, p);
      if (int64_t(page) >= c.num_blocks) {
        return out_of_range(n + ".lookup_table: sequence " + str(b) + " page entry " + str(p) +
                            " is " + str(page) + ", expected < num_blocks = " + str(c.num_blocks) +
                            " (it holds positions below " + str(end) + ")");
      }
    }
  }
  return Status::Ok();
}

Status snapshot_ragged_cache(const PagedKVCacheCollection& c,
                             const TensorView<const uint32_t, 1>& offs, int64_t total_rows,
                             bool require_pages, const char* offs_name, const char* cache_name,
                             CacheSnapshot* out) {
  const int64_t batch = c.batch_size();
  QUANTKV_RETURN_IF_ERROR(check_shape(offs_name, "[B + 1]", offs, {batch + 1}));
  CacheSnapshot s;
  try {
    s.row_offsets.resize(std::size_t(batch + 1));
    s.cache_lengths.resize(std::size_t(batch));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kResourceExhausted,
            std::string(cache_name) + ": cannot allocate a copy of the cache lengths"};
  }
  for (int64_t b = 0; b <= batch; ++b) s.row_offsets[std::size_t(b)] = offs(b);
  for (int64_t b = 0; b < batch; ++b) s.cache_lengths[std::size_t(b)] = c.cache_lengths(b);
  s.cache = c;
  s.cache.cache_lengths = make_view<const uint32_t>(s.cache_lengths.data(), batch);
  s.offsets = make_view<const uint32_t>(s.row_offsets.data(), batch + 1);
  QUANTKV_RETURN_IF_ERROR(validate_row_offsets(s.offsets, batch, total_rows, offs_name));
  QUANTKV_RETURN_IF_ERROR(
      validate_ragged_cache(s.cache, s.offsets, /*require_pages=*/false, cache_name));
  // Validated: every sequence fits the table. Copy the entries below cache_len + seq_len;
  // the rest of each row becomes the sentinel num_blocks and is never read.
  int64_t pages = 0;
  for (int64_t b = 0; b < batch; ++b) {
    pages = std::max(pages, pages_for(sequence_end(s, b), c.page_size));
  }
  try {
    s.lookup_table.assign(std::size_t(batch * pages), uint32_t(c.num_blocks));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kResourceExhausted,
            std::string(cache_name) + ": cannot allocate a copy of the lookup table"};
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t needed = pages_for(sequence_end(s, b), c.page_size);
    for (int64_t p = 0; p < needed; ++p)
      s.lookup_table[std::size_t(b * pages + p)] = c.lookup_table(b, p);
  }
  s.cache.lookup_table = make_view<const uint32_t>(s.lookup_table.data(), batch, pages);
  if (require_pages) {
    QUANTKV_RETURN_IF_ERROR(
        validate_ragged_cache(s.cache, s.offsets, /*require_pages=*/true, cache_name));
  }
  *out = std::move(s);
  return Status::Ok();
}

std::vector<int32_t> row_to_sequence(const TensorView<const uint32_t, 1>& offs) {
  const int64_t batch = offs.shape[0] - 1;
  std::vector<int32_t> seq(batch >= 0 ? offs(batch) : 0);
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(seq.begin() + offs(b), seq.begin() + offs(b + 1), int32_t(b));
  }
  return seq;
}

// ----------------------------------------------------------------- owning cache

Status PagedKVCache::create(const PagedKVCacheConfig& cfg, uint64_t seed, PagedKVCache* out) {
  return catch_out_of_memory("PagedKVCache::create",
                             [&] { return create_unguarded(cfg, seed, out); });
}

Status PagedKVCache::create_unguarded(const PagedKVCacheConfig& cfg, uint64_t seed,
                                      PagedKVCache* out) {
  if (cfg.batch_size < 0)
    return invalid_argument("config.batch_size: expected >= 0, got " + str(cfg.batch_size));
  if (cfg.max_pages_per_seq < 1) {
    return invalid_argument("config.max_pages_per_seq: expected >= 1, got " +
                            str(cfg.max_pages_per_seq));
  }
  if (cfg.scale_granularity < 0) {
    return invalid_argument("config.scale_granularity: expected >= 0, got " +
                            str(cfg.scale_granularity));
  }
  PagedKVCache cache;
  cache.config_ = cfg;
  // Validate the dimensions through the view checks (with placeholder storage pointers).
  PagedKVCacheCollection probe;
  probe.blocks = &cache;
  probe.dtype = cfg.dtype;
  probe.num_blocks = cfg.num_blocks;
  probe.kv_dim = cfg.kv_dim;
  probe.num_layers = cfg.num_layers;
  probe.page_size = cfg.page_size;
  probe.num_heads = cfg.num_heads;
  probe.head_size = cfg.head_size;
  if (cfg.scale_granularity > 0) {  // sizes the scales too
    probe.scales = reinterpret_cast<float*>(&cache);
    probe.scale_granularity = cfg.scale_granularity;
  }
  static const uint32_t kDummy[1] = {0};
  probe.cache_lengths = make_view(kDummy, int64_t(1));
  probe.lookup_table = make_view(kDummy, int64_t(1), int64_t(1));
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(probe, "config"));

  StorageSize size;
  storage_size(probe, &size);  // fits: validate_paged_kv checked it
  int64_t table_entries = 0;
  if (!checked::mul(cfg.batch_size, cfg.max_pages_per_seq, &table_entries) ||
      !checked::bytes(table_entries, sizeof(uint32_t), &table_entries)) {
    return invalid_argument("config: batch_size * max_pages_per_seq (" + str(cfg.batch_size) +
                            " * " + str(cfg.max_pages_per_seq) +
                            ") lookup-table entries do not fit in memory");
  }
  try {
    cache.blocks_.assign(std::size_t(size.block_bytes), 0);
    cache.scales_.assign(std::size_t(size.scale_elements), 0.0f);
    cache.cache_lengths_.assign(std::size_t(cfg.batch_size), 0);
    cache.lookup_table_.assign(std::size_t(cfg.batch_size * cfg.max_pages_per_seq),
                               uint32_t(cfg.num_blocks));
    cache.free_pool_.resize(std::size_t(cfg.num_blocks));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kResourceExhausted, "config: cannot allocate the cache (" +
                                                str(size.block_bytes) + " bytes of blocks, " +
                                                str(size.scale_bytes) + " bytes of scales)"};
  }
  std::iota(cache.free_pool_.begin(), cache.free_pool_.end(), 0u);
  std::mt19937_64 rng(seed);
  std::shuffle(cache.free_pool_.begin(), cache.free_pool_.end(), rng);
  *out = std::move(cache);
  return Status::Ok();
}

Status PagedKVCache::reserve(int64_t b, int64_t num_positions) {
  if (b < 0 || b >= config_.batch_size) {
    return out_of_range("b: expected 0 <= b < " + str(config_.batch_size) + ", got " + str(b));
  }
  const int64_t pages = num_positions < 0 ? 0 : pages_for(num_positions, config_.page_size);
  if (num_positions < 0 || pages > config_.max_pages_per_seq) {
    return out_of_range("num_positions: " + str(num_positions) + " needs " + str(pages) +
                        " pages, the lookup table holds " + str(config_.max_pages_per_seq));
  }
  uint32_t* row = lookup_table_.data() + b * config_.max_pages_per_seq;
  int64_t missing = 0;
  for (int64_t p = 0; p < pages; ++p) missing += int64_t(row[p]) >= config_.num_blocks;
  if (missing > free_pages()) {
    return {StatusCode::kResourceExhausted,
            "cache: " + str(missing) + " more pages needed, " + str(free_pages()) + " free"};
  }
  for (int64_t p = 0; p < pages; ++p) {
    if (int64_t(row[p]) < config_.num_blocks) continue;
    row[p] = free_pool_.back();
    free_pool_.pop_back();
  }
  return Status::Ok();
}

Status PagedKVCache::set_cache_length(int64_t b, int64_t length) {
  if (b < 0 || b >= config_.batch_size) {
    return out_of_range("b: expected 0 <= b < " + str(config_.batch_size) + ", got " + str(b));
  }
  if (length < 0 || length > pages_used(b) * config_.page_size) {
    return out_of_range("length: " + str(length) + " exceeds the " +
                        str(pages_used(b) * config_.page_size) +
                        " reserved positions of sequence " + str(b));
  }
  cache_lengths_[b] = uint32_t(length);
  return Status::Ok();
}

int64_t PagedKVCache::pages_used(int64_t b) const {
  const uint32_t* row = lookup_table_.data() + b * config_.max_pages_per_seq;
  int64_t used = 0;
  while (used < config_.max_pages_per_seq && int64_t(row[used]) < config_.num_blocks) ++used;
  return used;
}

PagedKVCacheCollection PagedKVCache::view() {
  PagedKVCacheCollection c;
  c.blocks = blocks_.data();
  c.dtype = config_.dtype;
  c.num_blocks = config_.num_blocks;
  c.kv_dim = config_.kv_dim;
  c.num_layers = config_.num_layers;
  c.page_size = config_.page_size;
  c.num_heads = config_.num_heads;
  c.head_size = config_.head_size;
  c.scales = scales_.empty() ? nullptr : scales_.data();
  c.scale_granularity = scales_.empty() ? 0 : config_.scale_granularity;
  c.cache_lengths = make_view<const uint32_t>(cache_lengths_.data(), config_.batch_size);
  c.lookup_table = make_view<const uint32_t>(lookup_table_.data(), config_.batch_size,
                                             config_.max_pages_per_seq);
  return c;
}

float PagedKVCache::get(int64_t b, int64_t pos, int64_t kv, int64_t layer, int64_t head,
                        int64_t d) const {
  const int64_t ps = config_.page_size;
  const uint32_t page = lookup_table_[b * config_.max_pages_per_seq + pos / ps];
  const int64_t off =
      ((((page * config_.kv_dim + kv) * config_.num_layers + layer) * ps + pos % ps) *
           config_.num_heads +
       head) *
          config_.head_size +
      d;
  return load_as_float(blocks_.data(), config_.dtype, off);
}

float PagedKVCache::get_scale(int64_t b, int64_t pos, int64_t kv, int64_t layer, int64_t head,
                              int64_t d) const {
  const int64_t ps = config_.page_size;
  const int64_t cols =
      (config_.head_size + config_.scale_granularity - 1) / config_.scale_granularity;
  const uint32_t page = lookup_table_[b * config_.max_pages_per_seq + pos / ps];
  const int64_t off =
      ((((page * config_.kv_dim + kv) * config_.num_layers + layer) * ps + pos % ps) *
           config_.num_heads +
       head) *
          cols +
      d / config_.scale_granularity;
  return scales_[off];
}

float load_as_float(const void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[offset];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::kE4M3:
      return e4m3_to_float(static_cast<const uint8_t*>(base)[offset]);
  }
  return 0.0f;
}

void store_from_float(void* base, DType dtype, int64_t offset, float v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[offset] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[offset] = float_to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[offset] = float_to_fp16(v);
      break;
    case DType::kE4M3:
      static_cast<uint8_t*>(base)[offset] = float_to_e4m3(v);
      break;
  }
}

}  // namespace quantkv
