// Scalar rows of the shared rotations (the oracle every vector variant matches bit for bit).
#include "cpu/rotation_kernels.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {

void rope_pairs_scalar(float* x, const float* cs, int64_t begin, int64_t end, int64_t rope_dim,
                       RopeLayout layout) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = begin; i < end; ++i) {
    if (layout == RopeLayout::kInterleaved) {
      rope_pair(&x[2 * i], &x[2 * i + 1], cs[2 * i], cs[2 * i + 1]);
    } else {
      rope_pair(&x[i], &x[i + half], cs[2 * i], cs[2 * i + 1]);
    }
  }
}

void rope_row_scalar(float* x, const float* cs, int64_t rope_dim, RopeLayout layout) {
  rope_pairs_scalar(x, cs, 0, rope_dim / 2, rope_dim, layout);
}

// One radix-2 stage: for every j with bit h clear, (x[j], x[j+h]) -> (x[j] + x[j+h], x[j] -
// x[j+h]).
void butterfly_stage_scalar(float* x, int64_t n, int64_t h) {
  for (int64_t j0 = 0; j0 < n; j0 += 2 * h) {
    for (int64_t j = j0; j < j0 + h; ++j) {
      const float a = x[j], b = x[j + h];
      x[j] = a + b;
      x[j + h] = a - b;
    }
  }
}

void hadamard_row_scalar(float* x, int64_t n, float scale) {
  for (int64_t h = 1; h < n; h *= 2) butterfly_stage_scalar(x, n, h);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void round_bf16_row_scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

}  // namespace quantkv::cpu
