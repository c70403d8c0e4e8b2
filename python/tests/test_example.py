"""docs/python.md's examples are python/examples/quickstart.py (numpy, owning cache) and
quickstart_torch.py (torch tensors, engine-owned caches), and they run as written."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = ["quickstart.py", "quickstart_torch.py"]


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
    assert "top-4 keys" in result.stdout
    rel = float(re.search(r"relative error of q: (\S+)", result.stdout).group(1))
    assert rel < 0.25
