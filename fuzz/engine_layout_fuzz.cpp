// The engines' layout of the indexer K cache (EngineIndexerKCache), global slots and int32
// views: a small MAX-layout cache from fuzz_input.hpp (shuffled pages, sentinels, one defect at
// a time) is copied, layer by layer, into the engines' paged byte buffer (random page padding),
// its block table and row offsets sometimes passed as int32 (unused entries -1) through
// as_uint32_view; then one defect at a time in the new arguments (null or misaligned data,
// head_size, page_stride_bytes, num_blocks, page_size, lookup rows, output option, global-slot
// overflow, negative int32 offsets). Checks: the status against the defects; no write after an
// error (buffer and output); on success the indexer's output equals the MAX form's on the same
// keys (positions or global slots; indexer_fuzz checks that one against a double reference),
// and the K store leaves the engine buffer equal to a copy of the MAX cache after the MAX store
// (so nothing outside the new slots changes, page padding included).
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::fuzz {
namespace {

// Layer `layer` of a MAX cache in the engines' layout, `shift` bytes into its storage (a
// misalignment defect when not a multiple of 4), pages padded by `pad` bytes.
struct EngineBuffer {
  std::vector<uint8_t> bytes;
  EngineIndexerKCache v;
  std::vector<uint8_t> saved;
  void snapshot() { saved = bytes; }
  bool unchanged() const { return bytes == saved; }
};

EngineBuffer engine_copy(const FuzzCache& fc, uint32_t layer, int64_t pad, size_t shift) {
  const PagedKVCacheCollection& c = fc.c;
  EngineBuffer e;
  e.v.num_blocks = c.num_blocks;
  e.v.page_size = c.page_size;
  e.v.head_size = c.head_size;
  e.v.page_stride_bytes = pad == 0 ? 0 : c.page_size * (c.head_size + 4) + pad;
  e.bytes.assign(size_t(c.num_blocks * e.v.page_bytes()) + shift, 0xC3);
  e.v.data = e.bytes.data() + shift;
  e.v.cache_lengths = c.cache_lengths;
  e.v.lookup_table = c.lookup_table;
  for (int64_t page = 0; page < c.num_blocks; ++page) {
    for (int64_t slot = 0; slot < c.page_size; ++slot) {
      std::memcpy(e.v.data + e.v.key_offset(page, slot),
                  fc.blocks.data() + fc.byte_offset(page, 0, layer, slot, 0, 0),
                  size_t(c.head_size));
      std::memcpy(e.v.data + e.v.scale_offset(page, slot),
                  &fc.scales[size_t(c.scale_offset(page, 0, layer, slot, 0, 0))], sizeof(float));
    }
  }
  return e;
}

// int32 copies of the lookup table (entries past the pool sometimes -1) and the offsets.
struct Int32Views {
  std::vector<int32_t> table, offs;
};

struct Setup {
  Context ctx;
  RowOffsets offs;
  Expectation ex;
  FuzzCache fc;
  uint32_t layer = 0;
  int64_t D = 0;
  EngineBuffer engine;
  Int32Views i32;
  TensorView<const uint32_t, 1> offs_view;
};

// The MAX cache, its engine copy, int32 views, and the defects of the engine arguments.
Setup make_setup(FuzzInput& in, bool for_indexer) {
  Setup s;
  s.ctx = in.context();
  const int64_t batch = in.int_in(0, 3);
  s.offs = make_row_offsets(in, batch, 6, /*allow_defect=*/true);
  s.ex.defect(!s.offs.defect.empty(), s.offs.defect);
  s.D = for_indexer ? in.pick<int64_t>({16, 32, 48, 64}) : 4 * in.int_in(1, 12);
  CacheShape shape;
  shape.dtype = DType::kE4M3;
  shape.kv_dim = in.int_in(1, 2);
  shape.num_layers = in.int_in(1, 3);
  shape.page_size = in.int_in(1, 5);
  shape.head_size = s.D;
  shape.scale_granularity = s.D;
  std::vector<int64_t> new_tokens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) new_tokens[b] = std::max<int64_t>(s.offs.seq_len(b), 0);
  std::string cache_defect;
  s.fc = make_cache(in, shape, new_tokens, /*allow_defect=*/true, &cache_defect);
  s.ex.defect(!cache_defect.empty(), cache_defect);
  for (auto& b : s.fc.blocks)
    b = in.one_in(30) ? in.pick<uint8_t>({0x7F, 0xFF}) : uint8_t(in.int_in(0, 255) & 0xF7);
  for (auto& x : s.fc.scales) x = float(in.int_in(1, 400)) / 128.0f;
  s.layer = uint32_t(in.int_in(0, shape.num_layers - 1));
  const int64_t pad = in.one_in(3) ? 4 * in.int_in(1, 4) : 0;
  const bool misaligned = in.one_in(16);
  s.engine = engine_copy(s.fc, s.layer, pad, misaligned ? size_t(in.int_in(1, 3)) : 0);
  s.ex.defect(misaligned, "k_cache.data misaligned");
  s.offs_view = s.offs.view();
  if (in.coin()) {  // as engines pass them
    s.i32.table.assign(s.fc.lookup.begin(), s.fc.lookup.end());
    for (int32_t& e : s.i32.table) {
      if (int64_t(uint32_t(e)) >= s.fc.c.num_blocks && in.coin()) e = -1;
    }
    s.i32.offs.assign(s.offs.offs.begin(), s.offs.offs.end());
    s.engine.v.lookup_table = as_uint32_view(TensorView<const int32_t, 2>{
        s.i32.table.data(), s.fc.c.lookup_table.shape, s.fc.c.lookup_table.strides});
    s.offs_view =
        as_uint32_view(make_view<const int32_t>(s.i32.offs.data(), int64_t(s.i32.offs.size())));
    if (batch >= 1 && in.one_in(12)) {
      s.i32.offs[1] = -int32_t(in.int_in(1, 5));
      s.ex.defect(true, "negative int32 offset");
    }
  }
  EngineIndexerKCache& v = s.engine.v;
  const int64_t packed = v.page_size * (v.head_size + 4);
  switch (in.one_in(5) ? in.int_in(0, 6) : -1) {
    case 0:
      v.data = nullptr;
      s.ex.defect(true, "k_cache.data null");
      break;
    case 1:
      v.head_size = s.D + in.pick<int64_t>({1, 2, 4});
      s.ex.defect(true, "k_cache.head_size != D");
      break;
    case 2:
      v.page_stride_bytes = packed - 4;
      s.ex.defect(true, "page stride too small");
      break;  // packed >= 8
    case 3:
      v.page_stride_bytes = packed + in.pick<int64_t>({1, 2, 3});
      s.ex.defect(true, "page stride not a multiple of 4");
      break;
    case 4:
      v.num_blocks = 0;
      s.ex.defect(true, "k_cache.num_blocks 0");
      break;
    case 5:
      v.page_size = 0;
      s.ex.defect(true, "k_cache.page_size 0");
      break;
    case 6:
      v.lookup_table.shape[0] += 1;
      s.ex.defect(true, "k_cache.lookup_table rows != B");
      break;
    default:
      break;
  }
  return s;
}

void fuzz_indexer(FuzzInput& in) {
  Setup s = make_setup(in, true);
  const int64_t T = s.offs.total, H = in.int_in(1, 3);
  const int64_t top_k = in.one_in(8) ? in.int_in(13, 300) : in.int_in(1, 12);
  IndexOutput output = in.coin() ? IndexOutput::kGlobalSlots : IndexOutput::kPositions;
  if (in.one_in(20)) {
    output = IndexOutput(in.int_in(2, 9));
    s.ex.defect(true, "unknown options.output");
  }
  if (output == IndexOutput::kGlobalSlots && in.one_in(16)) {
    s.engine.v.num_blocks =
        (int64_t(1) << 31) / std::max<int64_t>(s.engine.v.page_size, 1) + in.int_in(1, 9);
    s.ex.defect(true, "global slots overflow int32");
  }
  s.ex.defect(T != s.offs.last(), "T != input_row_offsets[B]");
  const MaskType mask = in.coin() ? MaskType::kCausal : MaskType::kNull;
  Buffer<float8_e4m3fn, 3> q(in, {T, H, s.D}, false);
  Buffer<float, 2> qs(in, {T, H}, true);
  Buffer<int32_t, 2> out(in, {T, top_k}, true);
  for (auto& v : q.storage()) v.bits = uint8_t(in.int_in(0, 255) & 0xF7);
  for (auto& v : qs.storage()) v = float(in.int_in(-200, 400)) / 128.0f;
  out.fill_pattern(0xA5);
  out.snapshot();
  s.engine.snapshot();
  const Status st =
      mla_indexer_ragged_float8_paged(out.view(), q.cview(), qs.cview(), s.offs_view, s.engine.v,
                                      mask, s.ctx, IndexerOptions{output, nullptr});
  check(s.engine.unchanged(), "indexer (engine layout) wrote into the K cache");
  if (!verify_status(st, s.ex, "mla_indexer_ragged_float8_paged (engine layout)")) {
    check(out.unchanged(), "indexer (engine layout) wrote after an error: " + st.to_string());
    return;
  }
  check(out.outside_unchanged(), "indexer (engine layout) wrote outside output_indices");
  Buffer<int32_t, 2> want(in, {T, top_k}, false);
  const Status ref =
      mla_indexer_ragged_float8_paged(want.view(), q.cview(), qs.cview(), s.offs.view(), s.fc.c,
                                      s.layer, mask, s.ctx, IndexerOptions{output, nullptr});
  check(ref.ok(), "the MAX form rejected what the engine form accepted: " + ref.to_string());
  bool same = true;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < top_k; ++i) same &= out.at({t, i}) == want.at({t, i});
  }
  check(same, std::string("indexer: engine layout and MAX layout disagree (") +
                  index_output_name(output) + ")");
}

void fuzz_k_store(FuzzInput& in) {
  Setup s = make_setup(in, false);
  const int64_t T = s.offs.total;
  const ScaleMode mode = in.coin() ? ScaleMode::kPowerOfTwo : ScaleMode::kFloat;
  s.ex.defect(T != s.offs.last(), "k rows != input_row_offsets[B]");
  Buffer<float, 2> k(in, {T, s.D}, true);
  for (auto& x : k.storage()) x = in.one_in(50) ? in.value() : in.finite_value();
  s.engine.snapshot();
  const Status st = indexer_k_store(k.cview(), s.offs_view, s.engine.v, mode, s.ctx);
  if (!verify_status(st, s.ex, "indexer_k_store (engine layout)")) {
    check(s.engine.unchanged(),
          "indexer_k_store (engine layout) wrote after an error: " + st.to_string());
    return;
  }
  const Status ref = indexer_k_store(k.cview(), s.offs.view(), s.fc.c, s.layer, mode, s.ctx);
  check(ref.ok(), "the MAX form rejected what the engine form accepted: " + ref.to_string());
  const int64_t pad = s.engine.v.page_stride_bytes == 0
                          ? 0
                          : s.engine.v.page_stride_bytes - s.engine.v.page_size * (s.D + 4);
  const EngineBuffer want = engine_copy(s.fc, s.layer, pad, 0);
  check(s.engine.bytes == want.bytes,
        "indexer_k_store: the engine buffer differs from the MAX cache after the same store "
        "(page_stride_bytes " +
            std::to_string(s.engine.v.page_stride_bytes) + ")");
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  if (in.coin())
    fuzz_indexer(in);
  else
    fuzz_k_store(in);
  return 0;
}
