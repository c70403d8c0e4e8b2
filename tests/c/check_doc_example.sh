#!/usr/bin/env bash
# The page $1 must show the file $2 as it is (inside a code block).
set -euo pipefail
python3 - "$1" "$2" <<'PY'
import sys
doc, example = open(sys.argv[1]).read(), open(sys.argv[2]).read()
if example not in doc:
    sys.exit(f"{sys.argv[1]} does not show {sys.argv[2]} as it is")
print(f"{sys.argv[1]} shows {sys.argv[2]}")
PY
