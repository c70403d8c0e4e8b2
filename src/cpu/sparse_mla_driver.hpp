// Internal: the CPU loop of sparse MLA attention (quantkv/sparse_mla.hpp): per work item (a
// token and a block of its heads) gather + dequantise the selected rows in blocks of keys, the
// score kernel, the softmax (std::exp per element, shared by every ISA level), the PV kernel
// over the rows gathered again, then out and lse. src/ops/sparse_mla.cpp validates.
#pragma once

#include "quantkv/context.hpp"
#include "quantkv/sparse_mla.hpp"
#include "quantkv/status.hpp"

namespace quantkv::cpu {

// Runs a validated call (shapes, slots, topk_length and aliasing checked). Allocates every
// scratch buffer before out is written: a failure leaves out and lse untouched.
Status run_sparse_mla(const SparseMlaArgs& args, const Context& ctx);

}  // namespace quantkv::cpu
