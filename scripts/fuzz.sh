#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and runs each for a
# bounded time, starting from its seed corpus in fuzz/corpus/<target>/.
#   scripts/fuzz.sh [seconds-per-target] [target...]      (default: 60 s, every target)
# New inputs go to build/fuzz/corpus/<target>/ (not the repo); a finding leaves its input in
# build/fuzz/findings/ and the script exits non-zero.
# QUANTKV_FUZZ_SEED=N fixes libFuzzer's random seed (CI does, so that a CI result can be
# reproduced here bit for bit; without it every run explores a fresh random path).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target fuzzers
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in fuzz/*_fuzz.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi
mkdir -p build/fuzz/findings
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
seed_args=()
if [ -n "${QUANTKV_FUZZ_SEED:-}" ]; then seed_args=(-seed="$QUANTKV_FUZZ_SEED"); fi
# Each libFuzzer run is one process on one core: QUANTKV_FUZZ_JOBS of them (default: the
# cores) run at once, each target still for the full time; the logs are printed in target order.
jobs_max="${QUANTKV_FUZZ_JOBS:-$(nproc)}"
logs=build/fuzz/logs
rm -rf "$logs" && mkdir -p "$logs"
run_target() {  # target: its run's last lines in $logs/<target>.log, its status in .rc
  local t=$1 rc=0
  # -rss_limit_mb: the targets use small buffers; more means a leak or a runaway allocation.
  "build/fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="build/fuzz/findings/$t-" \
    ${seed_args[@]+"${seed_args[@]}"} "build/fuzz/corpus/$t" "fuzz/corpus/$t" 2>&1 |
    tail -n 25 > "$logs/$t.log" || rc=$?
  echo "$rc" > "$logs/$t.rc"
}
status=0
started=()
for t in "${targets[@]}"; do
  mkdir -p "build/fuzz/corpus/$t"
  [ -d "fuzz/corpus/$t" ] || { echo "no seed corpus fuzz/corpus/$t"; status=1; continue; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_target "$t" &
  started+=("$t")
done
wait
for t in ${started[@]+"${started[@]}"}; do
  echo "== $t (${seconds} s)"
  cat "$logs/$t.log"
  if [ "$(cat "$logs/$t.rc" 2>/dev/null || echo 1)" != 0 ]; then
    echo "!! $t: finding (input saved under build/fuzz/findings/)"
    status=1
  fi
done
exit $status
