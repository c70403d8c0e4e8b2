#!/usr/bin/env bash
# The Python package as users get it: one wheel built by `pip wheel .` (scikit-build-core
# driving the project's CMake, with ccache), installed into two fresh venvs:
#   numpy 1.x (+ ml_dtypes, safetensors)   the whole pytest suite (torch tests skip: no torch)
#   numpy 2.x (+ ml_dtypes, safetensors,   the whole pytest suite, the quickstarts, mypy
#              torch on CPU)               --strict on the package and the examples, stubtest
# The extension does not compile against numpy (pybind11 imports it at run time), so one
# wheel serves both. Work files go to build/python-ci. Prints the time of each step.
#   scripts/python_ci.sh --venvs-only   only the two venvs with their pinned requirements (.ci/run
#                                       runs this in the background while it builds, then the
#                                       whole script with QUANTKV_CI_VENVS_READY=1, which skips them)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/build/python-ci
python=${QUANTKV_CI_PYTHON:-/usr/bin/python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export CCACHE_BASEDIR=$root CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
mkdir -p "$work"
step() { echo "== python: $1 (${SECONDS}s so far)"; }

# The venvs with their pinned requirements, fresh (the wheel goes in later).
make_venvs() {
  local v
  for v in numpy1 numpy2; do rm -rf "${work:?}/$v" && "$python" -m venv "$work/$v"; done
  step "numpy 1.x venv"
  "$work/numpy1/bin/pip" install -q -r python/requirements-ci-numpy1.txt
  step "numpy 2.x venv (ml_dtypes, safetensors, torch CPU)"
  "$work/numpy2/bin/pip" install -q -r python/requirements-ci-numpy2.txt
  "$work/numpy2/bin/pip" install -q --no-deps -r python/requirements-ci-torch.txt
}
if [ "${1:-}" = "--venvs-only" ]; then
  make_venvs
  step "venvs done"
  exit 0
fi
if [ "${QUANTKV_CI_VENVS_READY:-0}" != 1 ]; then make_venvs; fi

step "wheel (pip wheel .)"
rm -rf "$work/dist"
"$python" -m pip wheel -q --no-deps -w "$work/dist" --config-settings=build-dir="$work/wheel-build" "$root"
wheel=$(ls "$work"/dist/quantkv-*.whl)
for v in numpy1 numpy2; do "$work/$v/bin/pip" install -q --no-deps "$wheel"; done

run_suite() {  # venv name
  (cd "$work" && "$work/$1/bin/python" -m pytest -q -p no:cacheprovider -rs "$root/python/tests")
}

step "numpy 1.x tests"
run_suite numpy1

step "numpy 2.x + torch tests"
run_suite numpy2
(cd "$work" && "$work/numpy2/bin/python" "$root/python/examples/quickstart.py" > /dev/null &&
 "$work/numpy2/bin/python" "$root/python/examples/quickstart_torch.py" > /dev/null)

step "mypy --strict (package, stubs, examples) and stubtest"
# mypy on the sources (the same files as the wheel's), stubtest on the installed module.
(cd "$root/python" && "$work/numpy2/bin/python" -m mypy --strict --no-incremental \
   quantkv examples/quickstart.py examples/quickstart_torch.py examples/sparse_mla.py)
(cd "$work" && "$work/numpy2/bin/python" -m mypy.stubtest quantkv._quantkv \
   --allowlist "$root/python/stubtest_allowlist.txt")
step "done"
