"""The GIL is released while a kernel runs: while one thread is inside a long indexer call,
a second thread completes indexer calls of its own in the middle of that call. Were the GIL
held, the second thread could only run before the first call entered the kernel or after it
returned, i.e. near the ends of the window, never in its middle half."""
import threading
import time

import numpy as np

import numpy_reference as ref
import quantkv
from test_indexer import k_cache


def test_two_threads_overlap_in_the_indexer(rng):
    d, h = 128, 8
    sizes = (256, 512, 1024, 2048)  # query rows, doubled until the call is long enough to see
    small, small_offs = k_cache([4], [1], d)
    q_all = ref.encode_e4m3(rng.integers(-3, 4, size=(sizes[-1], h, d)).astype(np.float32))
    q_small = q_all[:1]
    q_s = np.ones((sizes[-1], h), np.float32)
    window, finished, stop = [], [], threading.Event()

    def long_call():
        # Long enough (>= 0.4 s) that a loaded machine (ctest -j2, other builds) still schedules
        # the second thread inside the middle half.
        for rows in sizes:
            big, big_offs = k_cache([3000], [rows], d, page_size=64)
            t0 = time.perf_counter()
            quantkv.mla_indexer_ragged_float8_paged(q_all[:rows], q_s[:rows], big_offs, big, 16,
                                                    num_threads=1)
            window.append((t0, time.perf_counter()))
            if window[-1][1] - t0 > 0.4:
                break
        stop.set()

    def short_calls():
        while not stop.is_set():
            start = time.perf_counter()
            quantkv.mla_indexer_ragged_float8_paged(q_small, q_s[:1], small_offs, small, 4, num_threads=1)
            finished.append((start, time.perf_counter()))

    threads = [threading.Thread(target=long_call), threading.Thread(target=short_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0, t1 = window[-1]
    # A short call that began after the long one and ended well inside it (10% margins: the
    # long call's Python steps before and after the library take microseconds, the margins tens
    # of milliseconds), so both were inside the library at once; with the GIL held by the long
    # call none could. Not the middle half only: on a machine loaded many times over, the
    # second thread may get its slices late.
    margin = (t1 - t0) / 10
    inside = [(a, b) for a, b in finished if t0 < a and t0 + margin < b < t1 - margin]
    print(f"long call {t1 - t0:.3f} s, {len(inside)} short calls ended inside it")
    assert inside, "no indexer call completed while another thread was inside the indexer"
