#include "quantkv/context.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace quantkv {

int resolved_num_threads(const Context& ctx) {
  if (ctx.num_threads > 0) return ctx.num_threads;
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace quantkv
