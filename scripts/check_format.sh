#!/usr/bin/env bash
# Lists the C/C++/CUDA files that clang-format (.clang-format: Google style, 100 columns) would
# change; exits 1 if there is any. `scripts/check_format.sh --fix` rewrites them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
FORMAT=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
if [ "${1:-}" = "--fix" ]; then
  "$FORMAT" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "needs clang-format: $f"
    bad=1
  fi
done
exit $bad
