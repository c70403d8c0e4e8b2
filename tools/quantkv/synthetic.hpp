// Deterministic synthetic data: every row of a tensor draws from its own counter-based stream
// (seed, tensor id, row), so the values depend neither on the thread count nor on the order
// in which rows are generated.
#pragma once

#include <cstdint>

namespace quantkv::tool {

// data[r, c] ~ N(0, stddev^2) for r < rows, c < cols (row-major).
void fill_normal(float* data, int64_t rows, int64_t cols, float stddev, uint64_t seed,
                 uint64_t tensor_id, int threads);

// Uniform random bytes from [lo, hi] (for benchmark operands whose values do not matter).
void fill_bytes(uint8_t* data, int64_t count, uint8_t lo, uint8_t hi, uint64_t seed, int threads);

}  // namespace quantkv::tool
