// The Python PreparedQkvWeights object, shared by the fused QKV (ops.cpp) and the checkpoint
// loaders (checkpoint.cpp), which return one.
#pragma once

#include "quantkv/qkv_fp4.hpp"

namespace quantkv::python {

// Prepared weights (PreparedQkvWeights), repacked once for the CPU kernels.
struct PyPreparedQkv {
  PreparedQkvWeights weights;
};

}  // namespace quantkv::python
