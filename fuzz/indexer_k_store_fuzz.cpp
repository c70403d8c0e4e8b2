// indexer_k_store (contract §5): new K rows [T, D] (fp32 or bf16, padded strides) quantised per
// token into a small e4m3 paged cache with shuffled pages and sentinel entries, with one defect
// at a time. Checks: the status against the defects, no write after an error, and on success
// exactly the K slots (and scales) of the new positions changed, with the codes and scale of
// contract §5 (s = fl(max(amax, 1e-4) / 448), optionally rounded up to a power of two from its
// bits, codes e4m3(x / s)).
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::fuzz {
namespace {

float reference_scale(float amax, ScaleMode mode) {
  float s = std::max(amax, 1e-4f) / 448.0f;
  if (mode == ScaleMode::kPowerOfTwo) {
    const uint32_t u = detail::float_bits(s);
    if ((u & 0x7FFFFFu) != 0 && (u >> 23) < 0xFF) s = detail::bits_float(((u >> 23) + 1) << 23);
  }
  return s;
}

template <typename Elem>
void run(FuzzInput& in, bool bf16) {
  Context ctx = in.context();
  const int64_t batch = in.int_in(0, 3);
  const RowOffsets offs = make_row_offsets(in, batch, 6, true);
  Expectation ex;
  ex.defect(!offs.defect.empty(), offs.defect);
  const int64_t T = offs.total, D = in.int_in(1, 40);
  CacheShape shape;
  shape.dtype = DType::kE4M3;
  shape.kv_dim = in.int_in(1, 2);
  shape.num_layers = in.int_in(1, 3);
  shape.page_size = in.int_in(1, 5);
  shape.head_size = D;
  shape.scale_granularity = in.pick<int64_t>({D, D + 3, 128});
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
  ScaleMode mode = in.coin() ? ScaleMode::kPowerOfTwo : ScaleMode::kFloat;
  if (in.one_in(20)) {
    mode = ScaleMode(in.int_in(2, 9));
    ex.defect(true, "unknown scale mode");
  }
  switch (in.one_in(5) ? in.int_in(0, 4) : -1) {
    case 0:
      fc.c.dtype = DType::kBF16;
      ex.defect(true, "dtype bf16");
      break;
    case 1:
      fc.c.num_heads = 2;
      ex.defect(true, "num_heads 2");
      break;
    case 2:
      fc.c.head_size = D + 1;
      ex.defect(true, "head_size != D");
      break;
    case 3:
      fc.scales.clear();
      fc.refresh_view();
      ex.defect(true, "scales null");
      break;
    case 4:
      if (D > 1) {
        fc.c.scale_granularity = D - 1;
        ex.defect(true, "scale_granularity < D");
      }
      break;
    default:
      break;
  }
  int64_t k_rows = T;
  if (in.one_in(10)) k_rows = T + 1;
  ex.defect(k_rows != offs.last(), "k rows != input_row_offsets[B]");
  Buffer<Elem, 2> k(in, {k_rows, D}, true);
  std::vector<float> values(k.storage().size());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] =
        in.one_in(50) ? in.value() : in.finite_value() * float(in.pick<int>({1, 1, 1, 100}));
    if constexpr (std::is_same_v<Elem, bfloat16>) {
      k.storage()[i].bits = float_to_bf16(values[i]);
      values[i] = bf16_to_float(k.storage()[i].bits);
    } else {
      k.storage()[i] = values[i];
    }
  }
  if (in.one_in(16) && k.view().numel() > 0) {
    k.view().data = nullptr;
    ex.defect(true, "k null");
  }
  fc.fill_pattern(0xA5);
  fc.snapshot();
  const Status st = indexer_k_store(k.cview(), offs.view(), fc.c, layer, mode, ctx);
  if (!verify_status(st, ex, bf16 ? "indexer_k_store(bf16)" : "indexer_k_store(f32)")) {
    check(fc.unchanged(), "indexer_k_store wrote after an error: " + st.to_string());
    return;
  }
  // Expected cache: the snapshot with the new rows' slots replaced.
  std::vector<uint8_t> want_blocks = fc.saved_blocks;
  std::vector<float> want_scales = fc.saved_scales;
  std::vector<char> finite_row(static_cast<size_t>(offs.last()), 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < offs.seq_len(b); ++i) {
      const int64_t t = offs.offs[b] + i, pos = fc.cache_lengths[b] + i;
      const int64_t page = fc.c.page_of(b, pos), slot = pos % fc.c.page_size;
      float amax = 0;
      for (int64_t d = 0; d < D; ++d) {
        const float x = values[size_t(&k.at({t, d}) - k.storage().data())];
        if (!std::isfinite(x)) finite_row[t] = 0;
        amax = std::max(amax, std::fabs(x));
      }
      const float s = reference_scale(amax, mode);
      const size_t base = fc.byte_offset(page, 0, layer, slot, 0, 0);
      const size_t soff = size_t(fc.c.scale_offset(page, 0, layer, slot, 0, 0));
      for (int64_t d = 0; d < D; ++d) {
        want_blocks[base + d] =
            float_to_e4m3(values[size_t(&k.at({t, d}) - k.storage().data())] / s);
      }
      want_scales[soff] = s;
      if (!finite_row[t]) {  // NaN / inf rows: only where the op wrote is checked
        for (int64_t d = 0; d < D; ++d) want_blocks[base + d] = fc.blocks[base + d];
        want_scales[soff] = fc.scales[soff];
      }
    }
  }
  check(fc.blocks == want_blocks,
        "indexer_k_store: K codes differ from contract §5 or a byte outside the new slots changed");
  check(want_scales.empty() ||
            std::memcmp(fc.scales.data(), want_scales.data(), want_scales.size() * 4) == 0,
        "indexer_k_store: scales differ from contract §5 or a scale outside the new slots changed");
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  if (in.coin())
    run<float>(in, false);
  else
    run<quantkv::bfloat16>(in, true);
  return 0;
}
