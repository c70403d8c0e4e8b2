"""docs/python.md's examples are python/examples/quickstart.py (numpy, owning cache),
quickstart_torch.py (torch tensors, engine-owned caches) and sparse_mla.py (the indexer's global
slots into sparse MLA attention), and they run as written."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = ["quickstart.py", "quickstart_torch.py", "sparse_mla.py"]
# What each example prints: a line that must appear, and its relative error with the bound.
QUICKSTART = ("top-4 keys", r"relative error of q: (\S+)", 0.25)
EXPECT = {"quickstart.py": QUICKSTART, "quickstart_torch.py": QUICKSTART,
          # bf16 output (2^-9 relative) of float32 sums, against numpy on the same bf16 values
          "sparse_mla.py": ("slots of the last token", r"relative error of out: (\S+)", 2.0**-7)}


@pytest.mark.parametrize("name", EXAMPLES)
def test_docs_show_the_example(name):
    doc = open(os.path.join(ROOT, "docs", "python.md")).read()
    example = open(os.path.join(ROOT, "python", "examples", name)).read()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert example in blocks


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name):
    if name.endswith("_torch.py") and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this interpreter")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "python", "examples", name)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    line, pattern, bound = EXPECT[name]
    assert line in result.stdout
    rel = float(re.search(pattern, result.stdout).group(1))
    assert rel < bound
