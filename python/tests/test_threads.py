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
    big, big_offs = k_cache([3000], [256], d, page_size=64)
    small, small_offs = k_cache([4], [1], d)
    q_big = ref.encode_e4m3(rng.integers(-3, 4, size=(256, h, d)).astype(np.float32))
    q_small = q_big[:1]
    q_s = np.ones((256, h), np.float32)
    window, finished, stop = [], [], threading.Event()

    def long_call():
        for _ in range(3):  # make the call long enough to see (>= 0.1 s) on a fast machine
            t0 = time.perf_counter()
            quantkv.mla_indexer_ragged_float8_paged(q_big, q_s, big_offs, big, 16, num_threads=1)
            window.append((t0, time.perf_counter()))
            if window[-1][1] - t0 > 0.1:
                break
        stop.set()

    def short_calls():
        while not stop.is_set():
            quantkv.mla_indexer_ragged_float8_paged(q_small, q_s[:1], small_offs, small, 4, num_threads=1)
            finished.append(time.perf_counter())

    threads = [threading.Thread(target=long_call), threading.Thread(target=short_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0, t1 = window[-1]
    quarter = (t1 - t0) / 4
    inside = [t for t in finished if t0 + quarter < t < t1 - quarter]
    print(f"long call {t1 - t0:.3f} s, {len(inside)} short calls finished in its middle half")
    assert inside, "no indexer call completed while another thread was inside the indexer"
