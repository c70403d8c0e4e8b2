#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, performance-*, minus a short list) over the
# library's own sources in src/ (not the CUDA .cu files), from a build's
# compile_commands.json (every preset writes one). Cheap enough for a 2-core CI:
#   scripts/clang_tidy.sh [build_dir]        (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json: configure first"; exit 2; }
TIDY=${CLANG_TIDY:-clang-tidy}
# The sources this build compiles: another architecture's ISA files (the NEON ones in an x86-64
# build) are not in its database, and clang-tidy cannot parse them without their flags.
mapfile -t files < <(git ls-files 'src/*.cpp' | while read -r f; do
  grep -qF "\"$PWD/$f\"" "$build/compile_commands.json" && echo "$f"; done)
[ ${#files[@]} -gt 0 ] || { echo "no source of src/ in $build/compile_commands.json"; exit 2; }
# GCC-only flags in the database are dropped; the sources are parsed as clang sees them.
printf '%s\n' "${files[@]}" | xargs -P "${JOBS:-2}" -n 4 "$TIDY" -p "$build" --quiet \
  --extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-unused-command-line-argument
