// The paged cache's validation helpers (paged_kv.hpp) and the owning PagedKVCache: random
// dimensions (zero, negative, huge), kv_dim, null storage, scales without a granularity,
// lookup tables with sentinel and out-of-range pages, cache lengths that overflow the table,
// and broken row offsets. Each helper must accept exactly the consistent inputs (the rules of
// contract §2 and §6, restated here) and read only inside the tables it was given.
#include "fuzz_input.hpp"

namespace quantkv::fuzz {
namespace {

void fuzz_validate_paged_kv(FuzzInput& in) {
  PagedKVCacheCollection c;
  Expectation ex;
  auto dim = [&](const char* name, int64_t* field) {
    *field = in.one_in(8) ? in.pick<int64_t>({0, -1, -1000, int64_t(1) << 40}) : in.int_in(1, 4);
    ex.defect(*field < 1, std::string(name) + " < 1");
  };
  dim("num_blocks", &c.num_blocks);
  dim("num_layers", &c.num_layers);
  dim("page_size", &c.page_size);
  dim("num_heads", &c.num_heads);
  dim("head_size", &c.head_size);
  ex.defect(c.num_blocks > int64_t(UINT32_MAX), "num_blocks > 2^32-1");
  c.kv_dim = in.one_in(8) ? in.pick<int64_t>({0, 3, -2}) : in.int_in(1, 2);
  ex.defect(c.kv_dim != 1 && c.kv_dim != 2, "kv_dim");
  c.dtype = in.one_in(16) ? DType(in.int_in(4, 255)) : DType(in.int_in(0, 3));
  ex.defect(int(c.dtype) > 3, "dtype");
  uint8_t storage[4];
  float scale_storage[4];
  c.blocks = in.one_in(10) ? nullptr : storage;
  ex.defect(c.blocks == nullptr, "blocks null");
  if (in.coin()) {
    c.scales = scale_storage;
    c.scale_granularity = in.int_in(-1, 64);
    ex.defect(c.scale_granularity < 1, "scale_granularity < 1 with scales");
  } else {
    c.scale_granularity = in.int_in(-1, 64);  // ignored without scales
  }
  // Elements and bytes of the blocks (and scales) must fit in int64 / PTRDIFF_MAX bytes.
  if (ex.ok()) {
    const long double slots =
        (long double)c.num_blocks * c.kv_dim * c.num_layers * c.page_size * c.num_heads;
    const long double limit = (long double)INT64_MAX;
    ex.defect(slots * c.head_size * dtype_size(c.dtype) > limit, "blocks' byte size overflows");
    ex.defect(c.scales != nullptr && slots * c.scale_cols() * sizeof(float) > limit,
              "scales' byte size overflows");
  }
  const int64_t batch = in.int_in(0, 3);
  std::vector<uint32_t> lengths(static_cast<size_t>(batch)), table(static_cast<size_t>(batch * 2));
  c.cache_lengths = make_view<const uint32_t>(lengths.data(), batch);
  c.lookup_table = make_view<const uint32_t>(table.data(), batch, int64_t(2));
  if (in.one_in(8)) {
    c.lookup_table.shape[0] = batch + 1;
    ex.defect(true, "lookup_table rows != B");
  }
  if (in.one_in(10) && batch > 0) {
    c.cache_lengths.data = nullptr;
    ex.defect(true, "cache_lengths null");
  }
  if (in.one_in(10)) {
    c.lookup_table.strides[1] = -1;
    ex.defect(true, "lookup_table negative stride");
  }
  if (in.one_in(10)) {
    c.lookup_table.shape[1] = -1;
    ex.defect(true, "lookup_table negative extent");
  }
  verify_status(validate_paged_kv(c, "cache"), ex, "validate_paged_kv");
}

void fuzz_ragged(FuzzInput& in) {
  const int64_t batch = in.int_in(0, 4);
  const RowOffsets offs = make_row_offsets(in, batch, 9, /*allow_defect=*/true);
  Expectation ex;
  ex.defect(!offs.defect.empty(), offs.defect);
  ex.defect(offs.total != offs.last(), "input_row_offsets[B] != T");
  // validate_row_offsets: the offsets alone (an exactly sized buffer: ASan sees over-reads).
  int64_t claimed_batch = batch;
  if (in.one_in(10)) {
    claimed_batch = batch + in.pick<int64_t>({1, -1});
    ex.defect(true, "input_row_offsets shape != [B + 1]");
  }
  if (claimed_batch < 0) return;
  const bool ok = verify_status(
      validate_row_offsets(offs.view(), claimed_batch, offs.total, "input_row_offsets"), ex,
      "validate_row_offsets");
  if (!ok) return;
  const std::vector<int32_t> seq = row_to_sequence(offs.view());
  check(int64_t(seq.size()) == offs.total, "row_to_sequence size");
  for (int64_t b = 0; b < batch; ++b)
    for (uint32_t r = offs.offs[b]; r < offs.offs[b + 1]; ++r)
      check(seq[r] == b, "row_to_sequence");

  // validate_ragged_cache on a cache sized for these sequences.
  CacheShape shape;
  shape.page_size = in.int_in(1, 5);
  std::vector<int64_t> new_tokens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) new_tokens[b] = offs.seq_len(b);
  std::string defect;
  FuzzCache fc = make_cache(in, shape, new_tokens, /*allow_defect=*/true, &defect);
  check(validate_paged_kv(fc.c, "cache").ok(), "make_cache built an invalid cache");
  const bool require_pages = in.coin();
  // The rules, restated: cache_len + seq_len fits in the table; needed pages are real.
  Expectation cex;
  const int64_t capacity = fc.c.max_pages_per_seq() * fc.c.page_size;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t end = int64_t(fc.cache_lengths[b]) + offs.seq_len(b);
    cex.defect(end > capacity, "sequence " + std::to_string(b) + " overflows the lookup table");
    if (end > capacity || !require_pages) continue;
    for (int64_t p = 0; p * fc.c.page_size < end; ++p) {
      cex.defect(fc.lookup[b * fc.c.max_pages_per_seq() + p] >= fc.c.num_blocks,
                 "sequence " + std::to_string(b) + " needs a missing page");
    }
  }
  const Status st = validate_ragged_cache(fc.c, offs.view(), require_pages, "cache");
  verify_status(st, cex, "validate_ragged_cache");
  if (!st.ok())
    check(st.code() == StatusCode::kOutOfRange, "validate_ragged_cache: expected out of range");
}

void fuzz_owning_cache(FuzzInput& in) {
  PagedKVCacheConfig cfg;
  cfg.dtype = DType(in.int_in(0, 3));
  cfg.num_blocks = in.int_in(-1, 6);
  cfg.kv_dim = in.int_in(0, 3);
  cfg.num_layers = in.int_in(0, 3);
  cfg.page_size = in.int_in(0, 4);
  cfg.num_heads = in.int_in(0, 2);
  cfg.head_size = in.int_in(0, 5);
  cfg.scale_granularity = in.int_in(-1, 3);
  cfg.batch_size = in.int_in(-1, 3);
  cfg.max_pages_per_seq = in.int_in(0, 3);
  Expectation ex;
  ex.defect(cfg.num_blocks < 1 || cfg.num_layers < 1 || cfg.page_size < 1 || cfg.num_heads < 1 ||
                cfg.head_size < 1,
            "a dimension < 1");
  ex.defect(cfg.kv_dim != 1 && cfg.kv_dim != 2, "kv_dim");
  ex.defect(cfg.scale_granularity < 0, "scale_granularity < 0");
  ex.defect(cfg.batch_size < 0, "batch_size < 0");
  ex.defect(cfg.max_pages_per_seq < 1, "max_pages_per_seq < 1");
  PagedKVCache cache;
  if (!verify_status(PagedKVCache::create(cfg, in.u32(), &cache), ex, "PagedKVCache::create"))
    return;
  check(validate_paged_kv(cache.view(), "cache").ok(), "the owning cache's view is invalid");
  int64_t free_pages = cfg.num_blocks;
  std::vector<int64_t> reserved(static_cast<size_t>(std::max<int64_t>(cfg.batch_size, 0)), 0);
  for (int step = 0; step < 6 && in.remaining() > 0; ++step) {
    const int64_t b = in.int_in(-1, cfg.batch_size);
    const bool bad_b = b < 0 || b >= cfg.batch_size;
    if (in.coin()) {
      // Sometimes INT64_MAX positions: the page count must not wrap (issue 15).
      const int64_t n =
          in.one_in(16) ? INT64_MAX : in.int_in(-1, cfg.max_pages_per_seq * cfg.page_size + 2);
      const int64_t pages = n < 0 ? 0 : n / cfg.page_size + (n % cfg.page_size != 0);
      const int64_t have = bad_b ? 0 : reserved[b];
      Expectation rex;
      rex.defect(bad_b, "b out of range");
      rex.defect(n < 0 || pages > cfg.max_pages_per_seq, "too many positions");
      rex.defect(pages - have > free_pages, "not enough free pages");
      if (verify_status(cache.reserve(b, n), rex, "PagedKVCache::reserve") && pages > have) {
        free_pages -= pages - have;
        reserved[b] = pages;
      }
      check(cache.free_pages() == free_pages, "free page count");
    } else {
      const int64_t len = in.int_in(-1, cfg.max_pages_per_seq * cfg.page_size + 1);
      Expectation lex;
      lex.defect(bad_b, "b out of range");
      lex.defect(!bad_b && (len < 0 || len > reserved[b] * cfg.page_size),
                 "length beyond the reserved pages");
      if (verify_status(cache.set_cache_length(b, len), lex, "PagedKVCache::set_cache_length")) {
        check(cache.cache_length(b) == uint32_t(len), "cache length");
        // Every cached position is readable through the view's pages.
        const PagedKVCacheCollection v = cache.view();
        for (int64_t p = 0; p < len; ++p)
          check(v.page_of(b, p) < uint32_t(cfg.num_blocks), "cached position without a page");
        if (len > 0)
          (void)cache.get(b, len - 1, v.kv_dim - 1, v.num_layers - 1, v.num_heads - 1,
                          v.head_size - 1);
      }
    }
  }
  // Pages of different sequences are distinct.
  const PagedKVCacheCollection v = cache.view();
  std::vector<int> owner(size_t(cfg.num_blocks), -1);
  for (int64_t b = 0; b < cfg.batch_size; ++b) {
    for (int64_t p = 0; p < reserved[b]; ++p) {
      const uint32_t page = v.lookup_table(b, p);
      check(page < uint32_t(cfg.num_blocks) && owner[page] == -1, "a page handed out twice");
      owner[page] = int(b);
    }
  }
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  switch (in.int_in(0, 2)) {
    case 0:
      fuzz_validate_paged_kv(in);
      break;
    case 1:
      fuzz_ragged(in);
      break;
    default:
      fuzz_owning_cache(in);
      break;
  }
  return 0;
}
