// Internal: how many threads an operation's parallel region uses for its amount of work (the
// rule of docs/threads.md). Used by the operators, the CPU drivers and the in-tree tools; not
// part of the API.
#pragma once

#include "quantkv/context.hpp"

namespace quantkv {

// Minimum work per thread below which an extra thread costs more than it saves. Opening a
// parallel region costs a few microseconds on an idle machine and whole scheduler time slices
// (milliseconds) on a loaded one, where a spinning barrier waits for a descheduled thread;
// inference engines call these ops per layer per decode step, often with a few microseconds
// of work. Each grain is about 10-25 us of single-core work on the development VM's AVX-512
// cores, 10-30x the ~0.8 us a 2-thread region costs there when idle (docs/threads.md), so a
// call pays for a second thread only when the thread can take at least that much.
inline constexpr double kMinMacsPerThread = double(1 << 20);  // multiply-adds (int8/bf16 dots)
inline constexpr double kMinBytesPerThread =
    double(1 << 17);  // bytes read + written (streaming ops)

// The thread count a parallel region over `work_units` of work should use: the resolved count
// of `ctx`, lowered so that every thread gets at least `min_units_per_thread` (at least 1).
// Results never depend on it (every op partitions work so that any count gives the same bits).
int threads_for_work(const Context& ctx, double work_units, double min_units_per_thread);

}  // namespace quantkv
