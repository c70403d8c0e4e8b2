#include "core/threads.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace quantkv {

int available_cores() {
#if defined(_OPENMP)
  return omp_get_num_procs();  // the cores this process may run on (its affinity mask)
#else
  return 1;
#endif
}

int max_num_threads() {
  const int cores = available_cores();
  return cores > kThreadCapFloor ? cores : kThreadCapFloor;
}

int resolved_num_threads(const Context& ctx) {
  // Up to the floor the cap cannot bind: no affinity query (a system call, made by
  // omp_get_num_procs on every call) for each of an operation's thread-count decisions.
  if (ctx.num_threads > 0 && ctx.num_threads <= kThreadCapFloor) return ctx.num_threads;
  if (ctx.num_threads > 0)
    return ctx.num_threads < max_num_threads() ? ctx.num_threads : max_num_threads();
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int threads_for_work(const Context& ctx, double work_units, double min_units_per_thread) {
  const int max_threads = resolved_num_threads(ctx);
  if (!(work_units > 0.0) || !(min_units_per_thread > 0.0)) return 1;
  const double useful = work_units / min_units_per_thread;
  if (useful < 2.0) return 1;
  return useful >= double(max_threads) ? max_threads : int(useful);
}

}  // namespace quantkv
