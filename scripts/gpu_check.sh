#!/usr/bin/env bash
# GPU check of the CUDA backend, one command on a machine with an H100/H200 (sm_90a):
# configure + build for sm_90a, run the GPU tests (quantkv_tests --gtest_filter='Cuda*'), run
# the GPU benchmarks (quantkv_bench --benchmark_filter=Cuda) and print a short table against
# the issue's targets. Sized to finish in about 8 minutes on an H200 (most of it the build).
#
#   scripts/gpu_check.sh               build here and run (needs nvcc, CMake, GoogleTest,
#                                      Google Benchmark on this machine)
#   scripts/gpu_check.sh --build-only  build on a machine without a GPU and pack the two
#                                      binaries plus the non-system shared libraries they need
#                                      into build/gpu-carry/ (carry that folder to the GPU box)
#   scripts/gpu_check.sh --run-only    run the packed binaries from build/gpu-carry/
#
# Logs and the benchmark JSON go to $OUT (when set, e.g. by the device tool) or build/gpu-carry.
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-all}
BUILD=build/gpu
CARRY=build/gpu-carry
LOGS=${OUT:-$CARRY}
mkdir -p "$CARRY" "$LOGS"

build() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQUANTKV_ENABLE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DQUANTKV_BUILD_TOOLS=OFF -DQUANTKV_BUILD_PYTHON=OFF \
        || { echo "gpu_check: configure failed (GoogleTest / Google Benchmark / nvcc missing? try --build-only elsewhere)"; exit 2; }
  cmake --build "$BUILD" -j "$(nproc)" --target quantkv_tests quantkv_bench || exit 2
  cp "$BUILD/tests/quantkv_tests" "$BUILD/bench/quantkv_bench" "$CARRY/"
  # Shared libraries outside the C/C++ runtime and the CUDA driver (Google Benchmark, OpenMP,
  # the CUDA runtime) travel beside the binaries.
  for bin in "$CARRY/quantkv_tests" "$CARRY/quantkv_bench"; do
    ldd "$bin" | awk '/=> \//{print $3}' |
      grep -E 'libbenchmark|libgomp|libgtest|libcudart' | xargs -r -I{} cp -L {} "$CARRY/"
  done
  du -sh "$CARRY"
}

run() {
  export LD_LIBRARY_PATH="$PWD/$CARRY${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
  echo "== GPU tests"
  timeout 300 "$CARRY/quantkv_tests" --gtest_filter='Cuda*' 2>&1 | tee "$LOGS/gpu_tests.log" |
    grep -E '^\[  (PASSED  |SKIPPED )\] [0-9]+ test|^\[  FAILED  \]|^\[==========\]|Failure' | head -60
  local test_rc=${PIPESTATUS[0]}
  if grep -q "no CUDA device" "$LOGS/gpu_tests.log"; then
    echo "gpu_check: WARNING: the GPU tests SKIPPED (no usable CUDA device); nothing was verified"
    test_rc=3
  fi
  echo "== GPU benchmarks"
  timeout 240 "$CARRY/quantkv_bench" --benchmark_filter='Cuda' --benchmark_out="$LOGS/gpu_bench.json" \
    --benchmark_out_format=json > "$LOGS/gpu_bench.log" 2>&1
  local bench_rc=$?
  tail -n 25 "$LOGS/gpu_bench.log"
  python3 - "$LOGS/gpu_bench.json" <<'PY' || true
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
print("\n%-44s %12s %14s %10s" % ("benchmark (median)", "time [us]", "rate", "target"))
for r in runs:
    if r.get("aggregate_name") not in (None, "median") or r.get("error_occurred"):
        continue
    name, us = r["name"], r["real_time"] if r["time_unit"] == "us" else float("nan")
    rate, target = "", ""
    if "IndexerDecode" in name: target = "< 100 us"
    if "IndexerPrefill" in name: target = "< 700 us"; rate = "%.0f TFLOP/s" % r.get("TFLOPs", 0)
    if "QkvDecode" in name:
        gbs, copy = r.get("weight_GBps", 0), r.get("copy_GBps", 0)
        rate = "%.0f GB/s" % gbs
        target = ">= 70%% (%.0f%%)" % (100 * gbs / copy) if copy else ">= 70%"
    if "QkvPrefill" in name: rate = "%.0f TFLOP/s" % (r.get("TFLOPs", 0))
    if "CopyCeiling" in name or "Quantize" in name: rate = "%.0f GB/s" % r.get("GBps", 0)
    print("%-44s %12.1f %14s %10s" % (name[:44], us, rate, target))
errors = sorted({r["name"] + ": " + r.get("error_message", "") for r in runs if r.get("error_occurred")})
if errors: print("benchmarks with errors:\n  " + "\n  ".join(errors))
PY
  echo "gpu_check: tests rc=$test_rc, benchmarks rc=$bench_rc (logs in $LOGS)"
  [ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
}

case "$MODE" in
  --build-only) build ;;
  --run-only) run ;;
  all) build && run ;;
  *) echo "usage: $0 [--build-only | --run-only]"; exit 2 ;;
esac
