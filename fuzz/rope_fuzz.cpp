// fused_qk_rope_ragged: q [T, Hq, D] (fp32 or bf16, padded strides) rotated into an output and
// the rope part of K rotated in place in a small paged cache of any dtype (bf16, fp16, f32,
// e4m3 with or without scales) with shuffled pages and sentinel entries; rope_dim, layout,
// placement, explicit position ids and the freqs_cis table drawn, with one defect at a time.
// Checks: the status against the defects, no write after an error, and on success that only
// the rope elements of the new tokens' K rows changed and that the output's other elements are
// q's.
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/rope.hpp"

namespace quantkv::fuzz {
namespace {

template <typename Elem>
void run(FuzzInput& in) {
  Context ctx = in.context();
  const int64_t batch = in.int_in(0, 3);
  const RowOffsets offs = make_row_offsets(in, batch, 5, true);
  Expectation ex;
  ex.defect(!offs.defect.empty(), offs.defect);
  const int64_t T = offs.total, D = 2 * in.int_in(1, 20), Hq = in.int_in(1, 3);
  CacheShape shape;
  shape.dtype = in.pick<DType>({DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3});
  shape.kv_dim = in.int_in(1, 2);
  shape.num_layers = in.int_in(1, 2);
  shape.page_size = in.int_in(1, 4);
  shape.num_heads = in.int_in(1, 2);
  shape.head_size = D;
  if (shape.dtype == DType::kE4M3 && in.coin())
    shape.scale_granularity = in.pick<int64_t>({2, D, 128});
  std::vector<int64_t> new_tokens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) new_tokens[b] = std::max<int64_t>(offs.seq_len(b), 0);
  std::string cache_defect;
  FuzzCache fc = make_cache(in, shape, new_tokens, true, &cache_defect);
  ex.defect(!cache_defect.empty(), cache_defect);
  uint32_t layer = uint32_t(in.int_in(0, shape.num_layers - 1));
  if (in.one_in(12)) {
    layer = uint32_t(shape.num_layers + in.int_in(0, 3));
    ex.defect(true, "layer_idx >= num_layers");
  }
  // The table and the options.
  RopeOptions o;
  int64_t rope_dim = 2 * in.int_in(1, D / 2);
  if (in.one_in(12)) {
    rope_dim = in.coin() ? rope_dim - 1 : D + 2;
    ex.defect(true, "rope_dim odd or > head_size");
  }
  int64_t longest = 0;  // positions the implicit ids reach
  for (int64_t b = 0; b < batch; ++b) {
    if (offs.seq_len(b) > 0)
      longest = std::max<int64_t>(longest, fc.cache_lengths[b] + offs.seq_len(b));
  }
  int64_t max_seq_len = std::min<int64_t>(longest + in.int_in(0, 2), 64);
  const bool explicit_ids = in.coin();
  std::vector<uint32_t> ids(static_cast<size_t>(std::max<int64_t>(T, 0)));
  for (auto& p : ids) p = uint32_t(in.int_in(0, std::max<int64_t>(max_seq_len - 1, 0)));
  if (explicit_ids) {
    o.position_ids = make_view<const uint32_t>(ids.data(), int64_t(ids.size()));
    if (max_seq_len == 0) max_seq_len = 1;
    if (!ids.empty() && in.one_in(10)) {
      ids[size_t(in.int_in(0, int64_t(ids.size()) - 1))] = uint32_t(max_seq_len + in.int_in(0, 5));
      ex.defect(true, "a position id past the table");
    }
  } else if (longest > 64 || (longest > 0 && in.one_in(10))) {
    max_seq_len = std::min<int64_t>(max_seq_len, std::max<int64_t>(longest - 1, 0));
    ex.defect(true, "freqs_cis shorter than cache_len + seq_len");
  }
  std::vector<float> freqs(
      size_t(std::max<int64_t>(max_seq_len, 1) * std::max<int64_t>(rope_dim, 1)));
  for (auto& f : freqs)
    f = in.one_in(40) ? in.value() : std::cos(float(in.int_in(0, 628)) / 100.0f);
  o.freqs_cis = make_view<const float>(freqs.data(), max_seq_len, rope_dim);
  o.layout = in.coin() ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  o.placement = in.coin() ? RopePlacement::kTrailing : RopePlacement::kLeading;
  if (in.one_in(20)) {
    o.layout = RopeLayout(in.int_in(2, 9));
    ex.defect(true, "unknown layout");
  }
  int64_t q_rows = T;
  if (in.one_in(10)) q_rows = T + 1;
  ex.defect(q_rows != offs.last(), "q rows != input_row_offsets[B]");
  // The ids were sized for T; a T that disagrees with offs[B] can meet a q bumped to T + 1,
  // so the ids' length is checked against the rows the op actually sees. Empty ids mean
  // implicit positions (cache_len + i), whose table rows must then exist.
  const bool ids_given = explicit_ids && !ids.empty();
  ex.defect(ids_given && int64_t(ids.size()) != q_rows, "position_ids length != q rows");
  ex.defect(explicit_ids && ids.empty() && longest > max_seq_len,
            "freqs_cis shorter than cache_len + seq_len (empty position_ids: implicit)");
  Buffer<Elem, 3> q(in, {q_rows, Hq, D}, true);
  for (auto& v : q.storage()) {
    const float x = in.one_in(30) ? in.value() : in.finite_value();
    if constexpr (std::is_same_v<Elem, bfloat16>)
      v.bits = float_to_bf16(x);
    else
      v = x;
  }
  Buffer<Elem, 3> out(in, {q_rows, Hq, D}, in.coin());
  out.fill_pattern(0xA5);
  out.snapshot();
  fc.fill_pattern(0x3C);
  fc.snapshot();
  const Status st = fused_qk_rope_ragged(q.cview(), offs.view(), fc.c, o, layer, out.view(), ctx);
  if (!verify_status(st, ex, "fused_qk_rope_ragged")) {
    check(fc.unchanged() && out.unchanged(),
          "fused_qk_rope_ragged wrote after an error: " + st.to_string());
    return;
  }
  check(out.outside_unchanged(), "fused_qk_rope_ragged wrote outside the output view");
  // Only the rope elements of the new tokens' K rows may change.
  const int64_t off = o.placement == RopePlacement::kLeading ? 0 : D - rope_dim;
  const size_t es = dtype_size(fc.c.dtype);
  std::vector<char> owned(fc.blocks.size(), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < offs.seq_len(b); ++i) {
      const int64_t pos = fc.cache_lengths[b] + i;
      const int64_t page = fc.c.page_of(b, pos), slot = pos % fc.c.page_size;
      for (int64_t h = 0; h < fc.c.num_heads; ++h) {
        const size_t first = fc.byte_offset(page, 0, layer, slot, h, off);
        std::fill(owned.begin() + first, owned.begin() + first + rope_dim * es, 1);
      }
    }
  }
  for (size_t i = 0; i < owned.size(); ++i) {
    if (!owned[i])
      check(fc.blocks[i] == fc.saved_blocks[i],
            "fused_qk_rope_ragged changed a cache byte it does not own");
  }
  check(fc.scales.empty() ||
            std::memcmp(fc.scales.data(), fc.saved_scales.data(), fc.scales.size() * 4) == 0,
        "fused_qk_rope_ragged changed a scale");
  for (int64_t t = 0; t < q_rows; ++t) {
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        if (d >= off && d < off + rope_dim) continue;
        check(std::memcmp(&out.at({t, h, d}), &q.at({t, h, d}), sizeof(Elem)) == 0,
              "fused_qk_rope_ragged changed a non-rope element of q");
      }
    }
  }
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  if (in.coin())
    run<float>(in);
  else
    run<quantkv::bfloat16>(in);
  return 0;
}
