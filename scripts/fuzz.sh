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
status=0
for t in "${targets[@]}"; do
  seeds="fuzz/corpus/$t"
  work="build/fuzz/corpus/$t"
  mkdir -p "$work"
  [ -d "$seeds" ] || { echo "no seed corpus $seeds"; status=1; continue; }
  echo "== $t (${seconds} s)"
  # -rss_limit_mb: the targets use small buffers; more means a leak or a runaway allocation.
  if ! "build/fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -max_len=4096 -print_final_stats=1 -artifact_prefix="build/fuzz/findings/$t-" \
       ${seed_args[@]+"${seed_args[@]}"} "$work" "$seeds" 2>&1 | tail -n 25; then
    echo "!! $t: finding (input saved under build/fuzz/findings/)"
    status=1
  fi
done
exit $status
