"""Shared fixtures: a fresh random seed per test, printed so a failure can be replayed with
QUANTKV_TEST_SEED=<seed>."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("QUANTKV_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"{request.node.name}: seed {seed} (QUANTKV_TEST_SEED={seed} replays it)")
    return np.random.default_rng(seed)
