// The Python PreparedQkvWeights and PreparedExperts objects, shared by the operations (ops.cpp,
// moe.cpp) and the checkpoint loaders (checkpoint.cpp, experts_checkpoint.cpp), which return one.
#pragma once

#include "quantkv/moe.hpp"
#include "quantkv/qkv_fp4.hpp"

namespace quantkv::python {

// Prepared weights (PreparedQkvWeights), repacked once for the CPU kernels.
struct PyPreparedQkv {
  PreparedQkvWeights weights;
};

// A layer's experts packed once for fused_experts (PreparedExperts).
struct PyPreparedExperts {
  PreparedExperts experts;
};

}  // namespace quantkv::python
