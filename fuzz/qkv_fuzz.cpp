// generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4 (contract §4), NVFP4 / MXFP4 / MXFP8,
// both overloads (one tensor_sf, per-section factors): random ragged batches over small paged
// caches of every dtype (kv_dim 1 or 2, several layers and heads), shuffled pages, sentinel
// pages for padding rows, NaN / zero / extreme block scales, fp8 NaN data codes, and one defect
// at a time, plain and through prepare_qkv_weights + the prepared overload (N against the cache, K
// % SF_VECTOR_SIZE, row bytes, scale shapes, a cache with scales, layer, offsets, lookup lengths,
// null pointers, MXFP8 with tensor_sf != 1). Checks: the status, no write after an error, and on
// success: output and the new K/V slots within the rounding of a double-precision reference (NaN
// where a NaN touches), every other byte of the cache unchanged, rows on sentinel pages not stored.
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::fuzz {
namespace {

struct RefValue {
  double v = 0, err = 0;  // value and bound of the fp32 accumulation error
  bool wild = false;      // overflow / underflow-prone: not compared
};

// Is `got` (decoded) what rounding a value in [v - err, v + err] to `dtype` can give?
bool within(double got, const RefValue& r, DType dtype) {
  if (std::isnan(r.v)) return std::isnan(got);
  const float lo = float(r.v - r.err), hi = float(r.v + r.err);
  float rl = lo, rh = hi;
  switch (dtype) {
    case DType::kBF16:
      rl = bf16_to_float(float_to_bf16(lo));
      rh = bf16_to_float(float_to_bf16(hi));
      break;
    case DType::kF16:
      rl = fp16_to_float(float_to_fp16(lo));
      rh = fp16_to_float(float_to_fp16(hi));
      break;
    case DType::kE4M3:
      rl = e4m3_to_float(float_to_e4m3(lo));
      rh = e4m3_to_float(float_to_e4m3(hi));
      break;
    case DType::kF32:
      rl = std::nextafter(lo, -__builtin_inff());
      rh = std::nextafter(hi, __builtin_inff());
      break;
  }
  return got >= double(rl) && got <= double(rh);
}

// c[m, n] of contract §4 in double, with a bound of the fp32 accumulation error.
struct QkvReference {
  BlockFormat f;
  int64_t kbc;
  const Buffer<uint8_t, 2>& hidden;
  const Buffer<uint8_t, 2>& weight;
  const Buffer<uint8_t, 5>& in_sc;
  const Buffer<uint8_t, 5>& w_sc;

  double value(const Buffer<uint8_t, 2>& buf, int64_t r, int64_t k) const {
    const uint8_t* row = buf.cview().data + r * buf.cview().strides[0];
    return f == BlockFormat::kMXFP8 ? double(e4m3_to_float(row[k]))
                                    : double(e2m1_to_float(e2m1_get(row, k)));
  }
  double scale(const Buffer<uint8_t, 5>& buf, int64_t r, int64_t b) const {
    const uint8_t code = buf.cview().data[swizzled_scale_offset(r, b, kbc)];
    return has_e8m0_scales(f) ? double(e8m0_to_float(code)) : double(e4m3_to_float(code & 0x7F));
  }
  RefValue at(int64_t m, int64_t n, float factor) const {
    const int sfv = sf_vector_size(f);
    RefValue r;
    double sum = 0, mag = 0;
    for (int64_t b = 0; b < kbc; ++b) {
      double part = 0, part_mag = 0;
      for (int64_t i = 0; i < sfv; ++i) {
        const double p = value(hidden, m, b * sfv + i) * value(weight, n, b * sfv + i);
        part += p;
        part_mag += std::fabs(p);
      }
      const double s = scale(in_sc, m, b) * scale(w_sc, n, b);
      if (s > 1e30 || (s < 1e-30 && s != 0)) r.wild = true;
      sum += part * s;
      mag += part_mag * s;
    }
    r.v = double(factor) * sum;
    r.err = 4e-7 * double(kbc + 2) * mag * std::fabs(double(factor)) + 1e-44;
    return r;
  }
};

uint8_t scale_code(FuzzInput& in, BlockFormat f) {
  if (in.one_in(25)) return in.pick<uint8_t>({0x7F, 0xFF, 0x00, 0x80});  // NaN codes, zero
  if (has_e8m0_scales(f)) return uint8_t(in.int_in(118, 136));
  const uint8_t b = in.byte();
  return (b & 0x7F) == 0x7F ? uint8_t(b ^ 1) : b;  // any sign (ignored), no NaN
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  Context ctx = in.context();
  Expectation ex;
  Expectation wex;  // the defects prepare_qkv_weights must see (weight, weight_scale, format)
  std::vector<const char*> maybe;  // fragments of acceptable rejections
  BlockFormat f = BlockFormat(in.int_in(0, 2));
  const int sfv = sf_vector_size(f);
  const int64_t kbc = in.int_in(1, 4);
  const int64_t K = kbc * sfv;
  const int64_t rb = row_bytes(f, K);
  const int64_t batch = in.int_in(0, 3);
  const RowOffsets offs = make_row_offsets(in, batch, 5, true);
  ex.defect(!offs.defect.empty(), offs.defect);
  const int64_t M = offs.total;

  CacheShape shape;
  shape.dtype = DType(in.int_in(0, 3));
  shape.kv_dim = in.int_in(1, 2);
  shape.num_layers = in.int_in(1, 3);
  shape.page_size = in.int_in(1, 4);
  shape.num_heads = in.int_in(1, 2);
  shape.head_size = in.int_in(1, 4);
  std::vector<int64_t> new_tokens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) new_tokens[b] = std::max<int64_t>(offs.seq_len(b), 0);
  std::string cache_defect;
  FuzzCache fc = make_cache(in, shape, new_tokens, true, &cache_defect);
  // A missing page only means "padding row: not stored" for this op.
  ex.defect(!cache_defect.empty() && !fc.page_defect, cache_defect);
  if (in.one_in(20)) {
    fc.scales.assign(
        size_t(fc.c.num_blocks * fc.c.kv_dim * fc.c.num_layers * fc.c.page_size * fc.c.num_heads),
        1.0f);
    fc.c.scale_granularity = shape.head_size;
    fc.refresh_view();
    ex.defect(true, "kv_collection with a scales tensor");
  }
  uint32_t layer = uint32_t(in.int_in(0, shape.num_layers - 1));
  if (in.one_in(12)) {
    layer = uint32_t(shape.num_layers + in.int_in(0, 2));
    ex.defect(true, "layer_idx >= num_layers");
  }
  const int64_t q_dim = in.int_in(0, 5);
  const int64_t kv_width = shape.num_heads * shape.head_size;
  int64_t N = q_dim + shape.kv_dim * kv_width;
  if (in.one_in(10)) {
    N += in.pick<int64_t>({-1, 1, kv_width});
    ex.defect(true, "N inconsistent with the cache");
  }
  int64_t hidden_rb = rb, weight_rb = rb, hidden_rows = M, out_rows = M;
  std::array<int64_t, 5> in_sc_shape = swizzled_scale_shape(M, kbc),
                         w_sc_shape = swizzled_scale_shape(N, kbc);
  switch (in.one_in(6) ? in.int_in(0, 5) : -1) {
    case 0:
      hidden_rb = rb + (f == BlockFormat::kMXFP8 ? sfv : sfv / 2);
      ex.defect(true, "hidden K != weight K");
      break;
    case 1:
      weight_rb = hidden_rb = rb + 1;
      ex.defect(true, "K % SF_VECTOR_SIZE");
      wex.defect(true, "K % SF_VECTOR_SIZE");
      break;
    case 2:
      in_sc_shape[1] += 1;
      break;
    case 3:
      w_sc_shape[0] += 1;
      ex.defect(true, "weight_scale shape");
      wex.defect(true, "weight_scale shape");
      break;
    case 4:
      out_rows = M + 1;
      break;
    case 5:
      hidden_rows = M + 1;
      break;
    default:
      break;
  }
  ex.defect(hidden_rows != offs.last(), "hidden rows != input_row_offsets[B]");
  ex.defect(out_rows != hidden_rows, "output rows != M");
  ex.defect(in_sc_shape != swizzled_scale_shape(hidden_rows, kbc),
            "input_scale shape != for M rows");
  Buffer<uint8_t, 2> hidden(in, {hidden_rows, hidden_rb}, true),
      weight(in, {N < 0 ? 0 : N, weight_rb}, true);
  Buffer<uint8_t, 5> in_sc(in, in_sc_shape, false), w_sc(in, w_sc_shape, false);
  Buffer<bfloat16, 2> out(in, {out_rows, q_dim}, true);
  const bool nan_data = in.one_in(10);
  for (auto& b : hidden.storage())
    b = f == BlockFormat::kMXFP8 && !(nan_data && in.one_in(8)) ? (in.byte() & 0xF7) : in.byte();
  for (auto& b : weight.storage()) b = f == BlockFormat::kMXFP8 ? (in.byte() & 0xF7) : in.byte();
  for (auto& b : in_sc.storage()) b = scale_code(in, f);
  for (auto& b : w_sc.storage()) b = scale_code(in, f);
  SectionScales sf;
  const bool sections = in.coin();
  auto factor = [&]() {
    return f == BlockFormat::kMXFP8 ? 1.0f : std::ldexp(1.0f, int(in.int_in(-8, 8)));
  };
  sf.q = factor();
  sf.k = sections ? factor() : sf.q;
  sf.v = sections ? factor() : sf.q;
  bool odd_factor = false;
  if (in.one_in(12)) {
    const float bad = in.pick<float>({__builtin_nanf(""), __builtin_inff(), 0.5f});
    (sections ? sf.k : sf.q) = bad;
    if (!sections) sf.k = sf.v = bad;
    if (std::isfinite(bad))
      ex.defect(f == BlockFormat::kMXFP8, "MXFP8 with a factor != 1");
    else {
      maybe.push_back("tensor_sf");
      maybe.push_back("section_sf");
      odd_factor = true;
    }
  }
  if (in.one_in(16) && weight.view().numel() > 0) {
    weight.view().data = nullptr;
    ex.defect(true, "weight null");
    wex.defect(true, "weight null");
  }
  if (in.one_in(30)) {
    f = BlockFormat(3);
    ex.defect(true, "unknown format");
    wex.defect(true, "unknown format");
  }
  // Edges (issue 15): strides that overflow or make output rows overlap, and an output over
  // the activations or the cache blocks (K/V are written there too).
  const bool out_nonempty = out.view().numel() > 0;
  switch (in.one_in(10) ? in.int_in(0, 3) : -1) {
    case 0:
      hidden.view().strides[0] = in.pick<int64_t>({int64_t(1) << 62, INT64_MAX});
      ex.defect(hidden_rows > 1 && hidden_rb > 0, "hidden_state: row stride whose span overflows");
      break;
    case 1:
      out.view().strides[0] = 0;
      ex.defect(out_rows > 1 && q_dim > 0, "output: row stride 0");
      break;
    case 2:
      out.view().data = reinterpret_cast<bfloat16*>(hidden.view_begin());
      ex.defect(out_nonempty && hidden.view().numel() > 0, "output aliases hidden_state");
      break;
    case 3:
      if (fc.c.blocks != nullptr) out.view().data = static_cast<bfloat16*>(fc.c.blocks);
      ex.defect(fc.c.blocks != nullptr && out_nonempty, "output aliases kv_collection.blocks");
      break;
    default:
      break;
  }
  out.fill_pattern(0xA5);
  fc.fill_pattern(0xA5);
  out.snapshot();
  fc.snapshot();
  // One call in three goes through prepare_qkv_weights and the prepared overload.
  const bool prepared = in.one_in(3);
  Status st;
  if (prepared) {
    PreparedQkvWeights pw;
    const Status ps = prepare_qkv_weights(weight.cview(), w_sc.cview(), f, &pw, ctx);
    if (!verify_status(ps, wex, "prepare_qkv_weights")) {
      check(out.unchanged() && fc.unchanged(), "prepare_qkv_weights wrote the outputs");
      return 0;
    }
    st = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hidden.cview(), offs.view(), pw, in_sc.cview(), sf, fc.c, layer, out.view(), ctx);
  } else {
    st = sections ? generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                        hidden.cview(), offs.view(), weight.cview(), in_sc.cview(), w_sc.cview(),
                        sf, fc.c, layer, out.view(), f, ctx)
                  : generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                        hidden.cview(), offs.view(), weight.cview(), in_sc.cview(), w_sc.cview(),
                        sf.q, fc.c, layer, out.view(), f, ctx);
  }
  bool ok;
  if (maybe.empty())
    ok = verify_status(st, ex, "fused_qkv");
  else if (maybe.size() == 2)
    ok = verify_status(st, ex, "fused_qkv", {maybe[0], maybe[1]});
  else
    ok = verify_status(st, ex, "fused_qkv");
  if (!ok) {
    check(out.unchanged() && fc.unchanged(), "fused_qkv wrote after an error: " + st.to_string());
    return 0;
  }
  check(out.outside_unchanged(), "fused_qkv wrote outside output");
  if (odd_factor) return 0;  // a non-finite factor that was accepted: only the bounds were checked

  const QkvReference reference{f, kbc, hidden, weight, in_sc, w_sc};
  for (int64_t m = 0; m < hidden_rows; ++m) {
    for (int64_t n = 0; n < q_dim; ++n) {
      const RefValue r = reference.at(m, n, sf.q);
      if (r.wild) continue;
      check(within(bf16_to_float(out.at({m, n}).bits), r, DType::kBF16),
            "fused_qkv: output[" + std::to_string(m) + ", " + std::to_string(n) +
                "] = " + std::to_string(bf16_to_float(out.at({m, n}).bits)) + ", reference " +
                std::to_string(r.v));
    }
  }
  // The cache: exactly the K/V slots of rows on real pages changed, to the reference.
  std::vector<char> owned(fc.blocks.size(), 0);
  const size_t es = dtype_size(fc.c.dtype);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < offs.seq_len(b); ++i) {
      const int64_t m = offs.offs[b] + i, pos = fc.cache_lengths[b] + i;
      const uint32_t page = fc.c.page_of(b, pos);
      if (int64_t(page) >= fc.c.num_blocks) continue;
      for (int64_t n = q_dim; n < N; ++n) {
        const int64_t col = n - q_dim, kv = col / kv_width, h = (col % kv_width) / shape.head_size,
                      d = col % shape.head_size;
        const size_t off = fc.byte_offset(page, kv, layer, pos % fc.c.page_size, h, d);
        for (size_t e = 0; e < es; ++e) owned[off + e] = 1;
        const RefValue r = reference.at(m, n, kv == 0 ? sf.k : sf.v);
        if (r.wild) continue;
        const float got = load_as_float(fc.blocks.data(), fc.c.dtype, int64_t(off / es));
        check(within(got, r, fc.c.dtype), "fused_qkv: cache value of row " + std::to_string(m) +
                                              " column " + std::to_string(n) + " = " +
                                              std::to_string(got) + ", reference " +
                                              std::to_string(r.v));
      }
    }
  }
  for (size_t i = 0; i < owned.size(); ++i) {
    if (!owned[i])
      check(fc.blocks[i] == fc.saved_blocks[i],
            "fused_qkv wrote a cache byte it does not own (byte " + std::to_string(i) + ")");
  }
  return 0;
}
