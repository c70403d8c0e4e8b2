"""docs/python.md's example is python/examples/quickstart.py, and it runs as written."""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_docs_show_the_example():
    doc = open(os.path.join(ROOT, "docs", "python.md")).read()
    example = open(os.path.join(ROOT, "python", "examples", "quickstart.py")).read()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert example in blocks


def test_example_runs():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "python", "examples", "quickstart.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "top-4 keys" in result.stdout
    rel = float(re.search(r"relative error of q: (\S+)", result.stdout).group(1))
    assert rel < 0.25
