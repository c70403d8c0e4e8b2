// Internal: fp64 references of the rotations (RoPE, the Walsh-Hadamard transform by its
// definition) and of the indexer front end, the oracles of tests/cpu/rope_test.cpp and
// tests/cpu/indexer_front_end_test.cpp. Nothing shared with the library's kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "quantkv/indexer.hpp"
#include "quantkv/rope.hpp"

namespace quantkv::reference {

// Rotates the rope part x [rope_dim] in double: pair i (interleaved (2i, 2i+1), half-split
// (i, i + rope_dim/2)) turns by (cs[2i], cs[2i+1]) = (cos, sin).
void rope_fp64(double* x, const float* cs, int64_t rope_dim, RopeLayout layout);

// y_i = n^-0.5 * sum_j (-1)^popcount(i & j) x_j (n a power of two): the normalised
// Walsh-Hadamard transform in Sylvester (natural) order, by its definition.
std::vector<double> hadamard_fp64(const std::vector<double>& x);

// Sylvester's matrix H_n [n, n] of ±1, built by H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]].
std::vector<int> sylvester_matrix(int64_t n);

// x rounded to bf16 (nearest even, bf16's subnormals below 2^-126), as a double.
double round_to_bf16(double x);

// The front end on one row x [D] in double: RoPE at (cs) when on, the Hadamard rotation when on,
// and with kBf16Steps a bf16 rounding of the row after each step that runs.
std::vector<double> front_end_fp64(std::vector<double> x, const IndexerFrontEnd& fe,
                                   const float* cs);

}  // namespace quantkv::reference
