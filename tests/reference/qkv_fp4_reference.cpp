#include "reference/qkv_fp4_reference.hpp"

#include <cmath>

#include "quantkv/scale_layout.hpp"

namespace quantkv::reference {
namespace {

float scale_magnitude(BlockFormat f, uint8_t code) {
  return has_e8m0_scales(f) ? e8m0_to_float(code) : e4m3_to_float(uint8_t(code & 0x7F));
}

}  // namespace

float qkv_gemm_element(BlockFormat format, const uint8_t* a_row, const uint8_t* b_row,
                       TensorView<const uint8_t, 5> input_scale,
                       TensorView<const uint8_t, 5> weight_scale, int64_t m, int64_t n, int64_t k) {
  const int sfv = sf_vector_size(format);
  const int64_t kb_count = k / sfv;
  float acc = 0.0f;
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    const float sa =
        scale_magnitude(format, input_scale.data[swizzled_scale_offset(m, kb, kb_count)]);
    const float sb =
        scale_magnitude(format, weight_scale.data[swizzled_scale_offset(n, kb, kb_count)]);
    if (format == BlockFormat::kMXFP8) {
      // vdpbf16ps lane order: odd element of each pair first; products exact, sums rounded.
      float t = 0.0f;
      for (int64_t i = kb * sfv; i < (kb + 1) * sfv; i += 2) {
        t = t + e4m3_to_float(a_row[i + 1]) * e4m3_to_float(b_row[i + 1]);
        t = t + e4m3_to_float(a_row[i]) * e4m3_to_float(b_row[i]);
      }
      acc = std::fma(t, sa * sb, acc);
    } else {
      // Doubled codes: the integer dot product is exact and 4x the block's dot product.
      int32_t idot = 0;
      for (int64_t i = kb * sfv; i < (kb + 1) * sfv; ++i) {
        idot += int32_t(e2m1_to_doubled_int8(e2m1_get(a_row, i))) *
                int32_t(e2m1_to_doubled_int8(e2m1_get(b_row, i)));
      }
      acc = std::fma(float(idot), (sa * 0.25f) * sb, acc);
    }
  }
  return acc;
}

namespace {

// Q of every row into `output`, K/V into the cache (sentinel pages skipped), with
// element(m, n) the GEMM value before the section factor.
template <typename Element>
void scatter_reference(TensorView<const uint32_t, 1> offs, int64_t n_total, SectionScales sf,
                       const PagedKVCacheCollection& kv, uint32_t layer,
                       TensorView<bfloat16, 2> output, Element element) {
  const int64_t q_dim = output.shape[1];
  const int64_t kv_width = kv.num_heads * kv.head_size;
  for (int64_t b = 0; b < kv.batch_size(); ++b) {
    for (int64_t m = offs(b); m < int64_t(offs(b + 1)); ++m) {
      const int64_t pos = int64_t(kv.cache_lengths(b)) + (m - offs(b));
      const uint32_t page = kv.page_of(b, pos);
      const int64_t slot = pos % kv.page_size;
      for (int64_t n = 0; n < n_total; ++n) {
        const float acc = element(m, n);
        if (n < q_dim) {
          output(m, n).bits = float_to_bf16(acc * sf.q);
          continue;
        }
        if (int64_t(page) >= kv.num_blocks) continue;
        const int64_t col = n - q_dim;
        const int64_t kv_idx = col < kv_width ? 0 : 1;
        const int64_t within = col - kv_idx * kv_width;
        const float c = acc * (kv_idx == 0 ? sf.k : sf.v);
        store_from_float(kv.blocks, kv.dtype,
                         kv.element_offset(page, kv_idx, layer, slot, within / kv.head_size,
                                           within % kv.head_size),
                         c);
      }
    }
  }
}

}  // namespace

void fused_qkv_reference(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                         TensorView<const uint8_t, 2> weight,
                         TensorView<const uint8_t, 5> input_scale,
                         TensorView<const uint8_t, 5> weight_scale, SectionScales sf,
                         const PagedKVCacheCollection& kv, uint32_t layer,
                         TensorView<bfloat16, 2> output, BlockFormat format) {
  const int64_t k = format == BlockFormat::kMXFP8 ? weight.shape[1] : weight.shape[1] * 2;
  scatter_reference(offs, weight.shape[0], sf, kv, layer, output, [&](int64_t m, int64_t n) {
    return qkv_gemm_element(format, &hidden(m, 0), &weight(n, 0), input_scale, weight_scale, m, n,
                            k);
  });
}

float weight_only_gemm_element(BlockFormat format, const uint16_t* a_row, const uint8_t* b_row,
                               TensorView<const uint8_t, 5> weight_scale, int64_t n, int64_t k) {
  const int sfv = sf_vector_size(format);
  const int64_t kb_count = k / sfv;
  auto activation = [&](int64_t i) {  // below 2^-110 counts as zero
    const float a = bf16_to_float(a_row[i]);
    return std::fabs(a) < 0x1p-110f ? 0.0f : a;
  };
  auto weight_value = [&](int64_t i) {
    return format == BlockFormat::kMXFP8 ? e4m3_to_float(b_row[i])
                                         : e2m1_to_float(e2m1_get(b_row, i));
  };
  float acc = 0.0f;
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    const float sb =
        scale_magnitude(format, weight_scale.data[swizzled_scale_offset(n, kb, kb_count)]);
    float t = 0.0f;  // the bf16 dot product's lane order: odd element of each pair first
    for (int64_t i = kb * sfv; i < (kb + 1) * sfv; i += 2) {
      t = t + activation(i + 1) * weight_value(i + 1);
      t = t + activation(i) * weight_value(i);
    }
    acc = std::fma(t, sb, acc);
  }
  return acc;
}

void fused_qkv_weight_only_reference(TensorView<const bfloat16, 2> hidden,
                                     TensorView<const uint32_t, 1> offs,
                                     TensorView<const uint8_t, 2> weight,
                                     TensorView<const uint8_t, 5> weight_scale, SectionScales sf,
                                     const PagedKVCacheCollection& kv, uint32_t layer,
                                     TensorView<bfloat16, 2> output, BlockFormat format) {
  const int64_t k = hidden.shape[1];
  scatter_reference(offs, weight.shape[0], sf, kv, layer, output, [&](int64_t m, int64_t n) {
    return weight_only_gemm_element(format, reinterpret_cast<const uint16_t*>(&hidden(m, 0)),
                                    &weight(n, 0), weight_scale, n, k);
  });
}

}  // namespace quantkv::reference
