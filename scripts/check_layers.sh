#!/usr/bin/env bash
# The layering of docs/architecture.md, checked on the #include lines:
#   include/quantkv/  public API: includes only other public headers (and the standard library)
#   src/core/         types, views, checks: includes nothing from cpu/, ops/, cuda/, capi/,
#                     checkpoint/ (the layers above it)
#   src/cpu/          the CPU backend: nothing from ops/, capi/, checkpoint/
# Usage: scripts/check_layers.sh   (from anywhere inside a git checkout)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
status=0
check() {  # directory, forbidden include pattern (ERE), why
  local hits
  hits=$(git grep -nE "^#include \"($2)" -- "$1" || true)
  if [ -n "$hits" ]; then
    echo "$hits"
    echo "  ^ $1 must not include $3"
    status=1
  fi
}
check include/quantkv '[^q]|q[^u]' "anything but quantkv/ headers (public headers hold only the API)"
check src/core 'cpu/|ops/|cuda/|capi/|checkpoint/' "the layers above core/"
check src/cpu 'ops/|capi/|checkpoint/' "the layers above the CPU backend"
[ $status -eq 0 ] && echo "check_layers: include/, core/ and cpu/ include only from their own layer or below"
exit $status
