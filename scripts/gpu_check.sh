#!/usr/bin/env bash
# GPU check of the CUDA backend (sm_90a: H100 / H200), in two steps, because the GPU machine
# cannot build the tests (no GoogleTest or Google Benchmark there, and no network to get them):
#
#   1. here, on any x86-64 machine with nvcc (no GPU needed):
#        scripts/gpu_check.sh --build-only [--build-dir=DIR] [--jobs=N]
#      builds quantkv_tests and quantkv_bench for sm_90a and packs them, with the shared
#      libraries they need beyond the C/C++ runtime, into build/gpu-carry/ (about 20 MB), then
#      prints what to carry. DIR defaults to build/gpu (configured here if needed); an existing
#      CUDA build such as build/release is reused as it is.
#   2. on the GPU machine, from the carried folder, configuring and building nothing:
#        scripts/gpu_check.sh --run-only [--phases=LIST] [--filter=GTEST_FILTER]
#      LIST is a comma-separated subset of preflight,tests,sanitizer,bench (default: all four):
#        preflight  the GPU, `ldd` of both binaries (every library found) and
#                   `--gtest_list_tests` (the binaries start and hold the GPU tests)
#        tests      quantkv_tests --gtest_filter='Cuda*' (or GTEST_FILTER)          <= 180 s
#        sanitizer  compute-sanitizer memcheck, then racecheck, on CudaSmoke.* and
#                   CudaFusedQkRope.* (every kernel once, small shapes)         <= 40 s each
#        bench      quantkv_bench --benchmark_filter=Cuda; every benchmark checks its
#                   result once against the CPU backend before timing               <= 120 s
#      At most about 6.5 minutes, preflight included, so a device lease leaves time to rerun
#      a phase. A short table and one verdict line per phase come last.
#
#   scripts/gpu_check.sh --build-and-run   both steps on one machine that has the GPU and every
#                                          build dependency (not this workplace's GPU machine)
#
# Logs, the benchmark JSON and summary.txt go to $OUT when it is set (the device tool brings
# that folder back) or to build/gpu-carry/logs. Tests that skip on the GPU machine fail: the
# run sets QUANTKV_REQUIRE_CUDA_DEVICE=1, which turns the "no CUDA device" skip into a failure.
# Exit status: 0 when every phase run passed, 1 otherwise, 2 for usage or build errors.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

CARRY=build/gpu-carry
BUILD=build/gpu
JOBS=$(nproc)
PHASES=preflight,tests,sanitizer,bench
FILTER='Cuda*'
SMOKE_FILTER='CudaSmoke.*:CudaFusedQkRope.*'  # the sanitizer's short list: every kernel once, small shapes
TESTS_LIMIT=180 SANITIZER_LIMIT=40 BENCH_LIMIT=120
MODE=""

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

for arg in "$@"; do
  case "$arg" in
    --build-only | --run-only | --build-and-run) MODE=$arg ;;
    --build-dir=*) BUILD=${arg#*=} ;;
    --jobs=*) JOBS=${arg#*=} ;;
    --phases=*) PHASES=${arg#*=} ;;
    --filter=*) FILTER=${arg#*=} ;;
    *) usage ;;
  esac
done
[ -n "$MODE" ] || usage
LOGS=${OUT:-$CARRY/logs}

# ---------------------------------------------------------------------------------- build
build() {
  export PATH="$PATH:/usr/local/cuda/bin"
  if [ -f "$BUILD/CMakeCache.txt" ]; then
    grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$BUILD/CMakeCache.txt" ||
      { echo "gpu_check: $BUILD is configured without CUDA; pass another --build-dir"; exit 2; }
    if grep -q '^CMAKE_CUDA_ARCHITECTURES:' "$BUILD/CMakeCache.txt" &&
       ! grep -q '^CMAKE_CUDA_ARCHITECTURES:.*90a' "$BUILD/CMakeCache.txt"; then
      echo "gpu_check: $BUILD does not build sm_90a ($(grep '^CMAKE_CUDA_ARCHITECTURES:' "$BUILD/CMakeCache.txt"))"
      exit 2
    fi
  else
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQUANTKV_ENABLE_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90a -DQUANTKV_BUILD_TOOLS=OFF -DQUANTKV_BUILD_PYTHON=OFF ||
      { echo "gpu_check: configure failed (nvcc, GoogleTest or Google Benchmark missing?)"; exit 2; }
  fi
  cmake --build "$BUILD" -j "$JOBS" --target quantkv_tests quantkv_bench || exit 2

  rm -rf "$CARRY"
  mkdir -p "$CARRY/lib"
  cp "$BUILD/tests/quantkv_tests" "$BUILD/bench/quantkv_bench" "$CARRY/"
  # Every shared library the loader resolves outside glibc and the GCC runtime travels (the
  # CUDA runtime, OpenMP, Google Benchmark; GoogleTest too if it is not static). The GPU
  # machine's own glibc and libstdc++ are newer than Debian 12's, so those stay behind.
  local bin lib
  for bin in "$CARRY/quantkv_tests" "$CARRY/quantkv_bench"; do
    ldd "$bin" | awk '/=> \//{print $3}' |
      grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
      while read -r lib; do cp -L "$lib" "$CARRY/lib/"; done
  done
  {
    echo "built: $(date -u +%FT%TZ) on $(uname -m), $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' + uncommitted changes')"
    echo "build dir: $BUILD; $(nvcc --version 2>/dev/null | tail -n 1)"
    echo "GPU tests: $("$CARRY/quantkv_tests" --gtest_list_tests --gtest_filter="$FILTER" | grep -c '^  ')"
    (cd "$CARRY" && find . -type f ! -path './logs/*' ! -name MANIFEST.txt -printf '%s %p\n' | sort -k2)
  } > "$CARRY/MANIFEST.txt"
  cat "$CARRY/MANIFEST.txt"
  echo "gpu_check: packed $(du -sh "$CARRY" | cut -f1) into $CARRY. Carry it (it must lie inside the"
  echo "checkout that travels) and run there, e.g. with this workplace's device tool:"
  echo "  run(command=\"scripts/gpu_check.sh --run-only\", carry=[\"$CARRY\"], timeout_s=450)"
}

# ---------------------------------------------------------------------------------- run
declare -A VERDICT=()
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }

# Prints the lines of a log that matter, after the program has exited (a pipe from the
# program itself would kill it with SIGPIPE once `head` is satisfied, exactly when it fails).
excerpt() {
  grep -E "$2" "$1" | head -n "${3:-60}"
}

# 124: timeout's limit; 137: SIGKILL (timeout's -k, or the kernel's out-of-memory killer).
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }

preflight() {
  echo "== preflight"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
  else
    echo "nvidia-smi: not found"
  fi
  [ -f "$CARRY/MANIFEST.txt" ] && head -n 3 "$CARRY/MANIFEST.txt"
  local bin ok=1
  for bin in quantkv_tests quantkv_bench; do
    if [ ! -x "$CARRY/$bin" ]; then
      echo "preflight: $CARRY/$bin is missing: run scripts/gpu_check.sh --build-only first and carry $CARRY"
      ok=0
      continue
    fi
    ldd "$CARRY/$bin" > "$LOGS/ldd_$bin.txt" 2>&1
    if grep -q 'not found' "$LOGS/ldd_$bin.txt"; then
      echo "preflight: $bin cannot be loaded here:"
      grep 'not found' "$LOGS/ldd_$bin.txt"
      ok=0
    fi
  done
  if [ $ok = 1 ]; then
    local listed rc
    "$CARRY/quantkv_tests" --gtest_list_tests --gtest_filter="$FILTER" > "$LOGS/gpu_test_list.txt" 2>&1
    rc=$?
    listed=$(grep -c '^  ' "$LOGS/gpu_test_list.txt")
    if [ $rc != 0 ] || [ "$listed" = 0 ]; then
      echo "preflight: quantkv_tests --gtest_list_tests failed (rc=$rc, $listed tests):"
      head -n 20 "$LOGS/gpu_test_list.txt"
      ok=0
    else
      echo "preflight: both binaries load; $listed tests match '$FILTER'"
    fi
  fi
  rm -f "$LOGS"/ldd_*.txt "$LOGS/gpu_test_list.txt"  # few files come back from \$OUT
  if [ $ok = 1 ]; then
    VERDICT[preflight]=PASS
  else
    VERDICT[preflight]=FAIL
    echo "preflight: the carried binaries do not run on this machine. Build here instead"
    echo "(scripts/gpu_check.sh --build-and-run needs GoogleTest and Google Benchmark), or fix the build"
  fi
}

tests() {
  echo "== GPU tests (--gtest_filter='$FILTER', limit ${TESTS_LIMIT} s)"
  QUANTKV_REQUIRE_CUDA_DEVICE=1 timeout -k 10 "$TESTS_LIMIT" \
    "$CARRY/quantkv_tests" --gtest_filter="$FILTER" > "$LOGS/gpu_tests.log" 2>&1
  local rc=$?
  excerpt "$LOGS/gpu_tests.log" \
    '^\[  (PASSED  |SKIPPED |FAILED  )\]|^\[==========\]|Failure|no CUDA device|^[^ ]*: error' 60
  if timed_out $rc; then
    VERDICT[tests]="TIMEOUT or killed (rc=$rc, limit ${TESTS_LIMIT} s; last test started: $(grep '^\[ RUN' "$LOGS/gpu_tests.log" | tail -n 1))"
  elif [ $rc = 0 ]; then
    VERDICT[tests]="PASS ($(grep -c '^\[       OK \]' "$LOGS/gpu_tests.log") tests)"
  else
    local failed
    failed=$(grep -m1 -oE '^\[  FAILED  \] [0-9]+ tests?' "$LOGS/gpu_tests.log" | grep -oE '[0-9]+')
    VERDICT[tests]="FAIL (rc=$rc; ${failed:-no gtest summary: crashed or aborted, see the end of gpu_tests.log}${failed:+ failed})"
  fi
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/compute-sanitizer/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

sanitizer() {
  local san tool rc
  if ! san=$(find_sanitizer); then
    echo "== compute-sanitizer: not found on this machine"
    VERDICT[sanitizer]="UNAVAILABLE (compute-sanitizer not found)"
    return
  fi
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool on '$SMOKE_FILTER' (limit ${SANITIZER_LIMIT} s)"
    # 86: the sanitizer found an error (it also prints "ERROR SUMMARY: n errors").
    QUANTKV_REQUIRE_CUDA_DEVICE=1 timeout -k 10 "$SANITIZER_LIMIT" \
      "$san" --tool "$tool" --error-exitcode 86 --print-limit 30 \
      "$CARRY/quantkv_tests" --gtest_filter="$SMOKE_FILTER" > "$LOGS/$tool.log" 2>&1
    rc=$?
    excerpt "$LOGS/$tool.log" \
      'ERROR SUMMARY|RACECHECK SUMMARY|^========= (Invalid|Error|Race|Warning)|^\[  (PASSED  |FAILED  )\]|not supported|Failure' 40
    if timed_out $rc; then
      VERDICT[$tool]="TIMEOUT or killed (rc=$rc, limit ${SANITIZER_LIMIT} s): incomplete, not clean"
    elif [ $rc = 86 ]; then
      VERDICT[$tool]="FAIL ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$tool.log"))"
    elif [ $rc != 0 ]; then
      VERDICT[$tool]="FAIL (rc=$rc: a test failed or the sanitizer could not run; see $tool.log)"
    else
      VERDICT[$tool]="PASS ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$tool.log"))"
    fi
  done
}

bench() {
  echo "== GPU benchmarks (limit ${BENCH_LIMIT} s)"
  timeout -k 10 "$BENCH_LIMIT" "$CARRY/quantkv_bench" --benchmark_filter='Cuda' \
    --benchmark_out="$LOGS/gpu_bench.json" --benchmark_out_format=json > "$LOGS/gpu_bench.log" 2>&1
  local rc=$?
  tail -n 25 "$LOGS/gpu_bench.log"
  if command -v python3 >/dev/null && [ -s "$LOGS/gpu_bench.json" ]; then
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
if errors: print("benchmarks with errors (a failed result check included):\n  " + "\n  ".join(errors))
PY
  fi
  local errors=0
  [ -s "$LOGS/gpu_bench.json" ] && errors=$(grep -c '"error_occurred": true' "$LOGS/gpu_bench.json")
  if timed_out $rc; then
    VERDICT[bench]="TIMEOUT or killed (rc=$rc, limit ${BENCH_LIMIT} s; gpu_bench.log holds what finished)"
  elif [ $rc != 0 ] || [ "$errors" != 0 ]; then
    VERDICT[bench]="FAIL (rc=$rc, $errors runs with errors: 'no CUDA device', a failed result check or a CUDA error)"
  else
    VERDICT[bench]=PASS
  fi
}

run() {
  mkdir -p "$LOGS"
  export LD_LIBRARY_PATH="$PWD/$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local start=$SECONDS
  has_phase preflight && preflight
  if [ "${VERDICT[preflight]:-PASS}" = PASS ]; then
    has_phase tests && tests
    has_phase sanitizer && sanitizer
    has_phase bench && bench
  fi
  local name status=0
  echo "== gpu_check verdict ($((SECONDS - start)) s; logs in $LOGS)" > "$LOGS/summary.txt"
  for name in preflight tests memcheck racecheck sanitizer bench; do
    [ -n "${VERDICT[$name]:-}" ] || continue
    printf '%-10s %s\n' "$name" "${VERDICT[$name]}" >> "$LOGS/summary.txt"
    [[ "${VERDICT[$name]}" == PASS* ]] || status=1
  done
  cat "$LOGS/summary.txt"
  return $status
}

case "$MODE" in
  --build-only) build ;;
  --run-only) run ;;
  --build-and-run) build && run ;;
esac
