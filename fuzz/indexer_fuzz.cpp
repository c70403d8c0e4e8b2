// mla_indexer_ragged_float8_paged (contract §3): random ragged batches over a small e4m3 K cache
// with shuffled pages, sentinel entries, any layer count, padded q / q_s / output strides,
// fp8 NaN codes, NaN / inf / zero / subnormal scales and weights, small score budgets, and one
// defect at a time (shapes, dtype, heads, head size, scales, layer, mask, top_k, offsets,
// lookup table, cache lengths). Checks: the status against the defects, no write after an
// error, nothing written outside output_indices, and every accepted row is a valid top-k:
// distinct positions below key_bound, -1 after the first min(top_k, key_bound), ordered by a
// double-precision reference score (up to rounding) and containing every clearly better key.
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::fuzz {
namespace {

float scale_value(FuzzInput& in) {
  if (in.one_in(12)) {
    return in.pick<float>({__builtin_nanf(""), __builtin_inff(), -__builtin_inff(), 0.0f, -0.0f,
                           0x1p-140f, 0x1p-127f, 1e30f});
  }
  return float(in.int_in(-200, 400)) / 128.0f;
}

struct Reference {
  double score = 0;
  bool wild = false;  // NaN / inf / overflow-prone: excluded from the ordering checks
};

// parse_mask on arbitrary text: never crashes; accepts exactly MAX's mask names.
int fuzz_parse_mask(FuzzInput& in) {
  std::string text;
  for (int64_t n = in.int_in(0, 24); n > 0; --n)
    text += char(in.pick<int>({'c', 'a', 'u', 's', 'l', 'n', 'C', '.', 'M', 0, int(in.byte())}));
  MaskType m = MaskType(99);
  const Status st = parse_mask(text, &m);
  std::string lower;
  for (char ch : text) lower += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  if (lower.rfind("maskname.", 0) == 0) lower = lower.substr(9);
  const bool known = lower == "null" || lower == "causal" || lower == "no_mask" ||
                     lower == "none" || lower == "nullmask" || lower == "causalmask";
  check(st.ok() == known, "parse_mask(\"" + text + "\") = " + st.to_string());
  check(!st.ok() ? m == MaskType(99) : (m == MaskType::kNull || m == MaskType::kCausal),
        "parse_mask output");
  return 0;
}

// Scores of token t against keys [0, key_bound) of sequence b, in double.
std::vector<Reference> reference_scores(const FuzzCache& fc, int64_t b, int64_t t,
                                        int64_t key_bound, uint32_t layer,
                                        Buffer<float8_e4m3fn, 3>& q, Buffer<float, 2>& qs) {
  const PagedKVCacheCollection& c = fc.c;
  const int64_t H = q.view().shape[1], D = q.view().shape[2];
  std::vector<Reference> ref(static_cast<size_t>(key_bound));
  for (int64_t j = 0; j < key_bound; ++j) {
    const int64_t page = c.page_of(b, j), slot = j % c.page_size;
    const uint8_t* kj = fc.blocks.data() + fc.byte_offset(page, 0, layer, slot, 0, 0);
    const double ks = fc.scales[size_t(c.scale_offset(page, 0, layer, slot, 0, 0))];
    double sum = 0, mag = 0;
    bool nan_input = !std::isfinite(ks);
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        const float a = e4m3_to_float(q.at({t, h, d}).bits), k = e4m3_to_float(kj[d]);
        nan_input |= std::isnan(a) || std::isnan(k);
        dot += double(a) * double(k);
      }
      const double w = qs.at({t, h});
      nan_input |= !std::isfinite(w);
      sum += std::max(dot, 0.0) * w;
      mag += std::max(dot, 0.0) * std::fabs(w);
    }
    ref[j].score = ks * sum;
    ref[j].wild = nan_input || !(std::fabs(ks) * mag < 1e30);
  }
  return ref;
}

// Row t of the output: distinct positions below key_bound, then -1; ordered by the reference
// up to fp32 rounding; no clearly better key left out (when only finite keys were selected).
void check_row(const std::vector<Reference>& ref, Buffer<int32_t, 2>& out, int64_t t) {
  const int64_t key_bound = int64_t(ref.size()), top_k = out.view().shape[1];
  const int64_t n = std::min(top_k, key_bound);
  std::vector<char> seen(static_cast<size_t>(key_bound), 0);
  double worst_selected = __builtin_inf();
  bool wild_selected = false;
  for (int64_t r = 0; r < top_k; ++r) {
    const int32_t j = out.at({t, r});
    if (r >= n) {
      check(j == -1, "indexer: expected -1 after the first min(top_k, key_bound) entries");
      continue;
    }
    check(j >= 0 && j < key_bound, "indexer: index " + std::to_string(j) + " outside [0, " +
                                       std::to_string(key_bound) + ")");
    check(!seen[j], "indexer: duplicate index " + std::to_string(j));
    seen[j] = 1;
    if (ref[j].wild) {
      wild_selected = true;
      continue;
    }
    worst_selected = std::min(worst_selected, ref[j].score);
    if (r > 0) {
      const int32_t prev = out.at({t, r - 1});
      if (!ref[prev].wild) {
        const double eps = 1e-5 * (std::fabs(ref[prev].score) + std::fabs(ref[j].score)) + 1e-30;
        check(ref[prev].score >= ref[j].score - eps,
              "indexer: row " + std::to_string(t) + " not sorted at " + std::to_string(r));
      }
    }
  }
  if (wild_selected || n == 0 || n == key_bound) return;
  for (int64_t j = 0; j < key_bound; ++j) {
    if (seen[j] || ref[j].wild) continue;
    const double eps = 1e-5 * (std::fabs(worst_selected) + std::fabs(ref[j].score)) + 1e-30;
    check(ref[j].score <= worst_selected + eps,
          "indexer: row " + std::to_string(t) + " misses key " + std::to_string(j));
  }
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  if (in.one_in(8)) return fuzz_parse_mask(in);
  in.pick_isa();
  Context ctx = in.context();
  const bool small_budget = in.one_in(6);
  if (small_budget) ctx.scores_budget_bytes = size_t(in.int_in(0, 1 << 16));

  const int64_t batch = in.int_in(0, 3);
  const RowOffsets offs = make_row_offsets(in, batch, 6, /*allow_defect=*/true);
  Expectation ex;
  ex.defect(!offs.defect.empty(), offs.defect);
  const int64_t T = offs.total;
  const int64_t H = in.int_in(1, 4);
  const int64_t D = in.pick<int64_t>({16, 32, 48, 64, 128});
  // Mostly small top_k; sometimes far more than any row's keys, or long contexts (the top-k
  // selection switches algorithms with the length).
  int64_t top_k = in.one_in(8) ? in.int_in(13, 3000) : in.int_in(1, 12);
  if (in.one_in(16)) top_k = 0;  // a defect, recorded below from the extent the op sees

  CacheShape shape;
  shape.dtype = DType::kE4M3;
  shape.kv_dim = in.int_in(1, 2);
  shape.num_layers = in.int_in(1, 3);
  shape.page_size = in.int_in(1, 5);
  shape.num_heads = 1;
  shape.head_size = D;
  shape.scale_granularity = in.pick<int64_t>({D, D, D + 1, 2 * D, 1000});
  if (in.one_in(8)) shape.max_cached = in.int_in(0, 700);
  std::vector<int64_t> new_tokens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    new_tokens[b] = offs.offs[b + 1] >= offs.offs[b] ? offs.seq_len(b) : 0;
  std::string cache_defect;
  FuzzCache fc = make_cache(in, shape, new_tokens, /*allow_defect=*/true, &cache_defect);
  ex.defect(!cache_defect.empty(), cache_defect);
  uint32_t layer_idx = uint32_t(in.int_in(0, shape.num_layers - 1));
  if (in.one_in(12)) {
    layer_idx = uint32_t(shape.num_layers + in.pick<int64_t>({0, 1, 0xFFFFFFF0LL}));
    ex.defect(true, "layer_idx >= num_layers");
  }
  MaskType mask = in.coin() ? MaskType::kCausal : MaskType::kNull;
  if (in.one_in(20)) {
    mask = MaskType(in.int_in(2, 100));
    ex.defect(true, "unknown mask");
  }
  // Cache contents: random codes (NaN codes included), per-token scales.
  for (auto& b : fc.blocks)
    b = in.one_in(30) ? in.pick<uint8_t>({0x7F, 0xFF}) : uint8_t(in.int_in(0, 255) & 0xF7);
  for (auto& s : fc.scales) s = scale_value(in);
  // Cache defects that only this op family checks.
  switch (in.one_in(5) ? in.int_in(0, 4) : -1) {
    case 0:
      fc.c.dtype = DType::kBF16;
      ex.defect(true, "k_collection.dtype bf16");
      break;
    case 1:
      fc.c.num_heads = 2;
      fc.c.head_size = D / 2;
      ex.defect(true, "k_collection.num_heads 2");
      break;
    case 2:
      fc.c.head_size = D / 2;
      ex.defect(true, "k_collection.head_size != D");
      break;
    case 3:
      fc.scales.clear();
      fc.refresh_view();
      ex.defect(true, "k_collection.scales null");
      break;
    case 4:
      fc.c.scale_granularity = D - 1;
      ex.defect(true, "k_collection.scale_granularity < D");
      break;
    default:
      break;
  }

  // q [T, H, D], q_s [T, H], output [T, top_k]; the row counts may disagree as a defect.
  int64_t q_rows = T, qs_rows = T, out_rows = T, qs_heads = H;
  switch (in.one_in(8) ? in.int_in(0, 3) : -1) {
    case 0:
      q_rows = T + 1;
      break;
    case 1:
      qs_rows = T + 1;
      break;
    case 2:
      out_rows = T + 1;
      break;
    case 3:
      qs_heads = H + 1;
      break;
    default:
      break;
  }
  ex.defect(q_rows != offs.last(), "q rows != input_row_offsets[B]");
  ex.defect(qs_rows != q_rows, "q_s rows != T");
  ex.defect(out_rows != q_rows, "output_indices rows != T");
  ex.defect(qs_heads != H, "q_s heads != H");
  Buffer<float8_e4m3fn, 3> q(in, {q_rows, H, D}, true);
  Buffer<float, 2> qs(in, {qs_rows, qs_heads}, true);
  Buffer<int32_t, 2> out(in, {out_rows, top_k}, true);
  for (auto& v : q.storage())
    v.bits = in.one_in(40) ? in.pick<uint8_t>({0x7F, 0xFF}) : uint8_t(in.int_in(0, 255) & 0xF7);
  for (auto& v : qs.storage()) v = scale_value(in);
  if (in.one_in(16) && q.view().numel() > 0) {
    q.view().data = nullptr;
    ex.defect(true, "q null");
  }
  if (in.one_in(16) && out.view().numel() > 0) {
    out.view().strides[0] = -1;
    ex.defect(true, "output negative stride");
  }

  // Edges (issue 15): extents whose byte size overflows, strides that overflow or make rows
  // overlap, and an output over one of the inputs.
  const bool out_nonempty = out.view().numel() > 0;
  switch (in.one_in(10) ? in.int_in(0, 4) : -1) {
    case 0:
      out.view().shape[1] = in.pick<int64_t>({int64_t(1) << 62, INT64_MAX});
      if (in.coin()) out.view().data = nullptr;
      ex.defect(out_rows > 0, "output_indices: top_k whose byte size overflows");
      break;
    case 1:
      out.view().strides[0] = in.pick<int64_t>({0, int64_t(1) << 62, INT64_MAX});
      ex.defect(out_rows > 1 && top_k > 0, "output_indices: row stride 0 or overflowing");
      break;
    case 2:
      q.view().strides[0] = in.pick<int64_t>({int64_t(1) << 61, int64_t(1) << 62, INT64_MAX});
      ex.defect(q_rows > 1, "q: row stride whose span overflows");
      break;
    case 3:
      out.view().data = reinterpret_cast<int32_t*>(q.view_begin());
      ex.defect(out_nonempty && q.view().numel() > 0, "output_indices aliases q");
      break;
    case 4:
      if (fc.c.scales != nullptr) out.view().data = reinterpret_cast<int32_t*>(fc.c.scales);
      ex.defect(fc.c.scales != nullptr && out_nonempty,
                "output_indices aliases k_collection.scales");
      break;
    default:
      break;
  }
  // After the edges: case 0 may have replaced a zero top_k by an overflowing one.
  ex.defect(out.view().shape[1] == 0, "top_k = 0");
  out.fill_pattern(0xA5);
  out.snapshot();
  fc.snapshot();
  q.snapshot();
  qs.snapshot();
  const Status st = mla_indexer_ragged_float8_paged(out.view(), q.cview(), qs.cview(), offs.view(),
                                                    fc.c, layer_idx, mask, ctx);
  check(fc.unchanged() && q.unchanged() && qs.unchanged(), "indexer wrote one of its inputs");
  if (small_budget && !st.ok() && st.code() == StatusCode::kResourceExhausted && ex.ok()) {
    check(out.unchanged(), "indexer wrote after running out of budget");
    return 0;
  }
  if (!verify_status(st, ex, "mla_indexer_ragged_float8_paged", {"contiguous"})) {
    check(out.unchanged(), "indexer wrote after an error: " + st.to_string());
    return 0;
  }
  check(out.outside_unchanged(), "indexer wrote outside output_indices");

  // Every row against a double-precision reference.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < offs.seq_len(b); ++i) {
      const int64_t t = offs.offs[b] + i, cache_len = fc.cache_lengths[b];
      const int64_t key_bound =
          mask == MaskType::kCausal ? cache_len + i + 1 : cache_len + offs.seq_len(b);
      check_row(reference_scores(fc, b, t, key_bound, layer_idx, q, qs), out, t);
    }
  }
  return 0;
}
