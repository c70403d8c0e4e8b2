#!/usr/bin/env bash
# The functions libquantkv.so exports ($1) must be exactly those declared in quantkv.h ($2).
set -euo pipefail
exported=$(nm -D --defined-only "$1" | awk '$2 ~ /^[TW]$/ {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '\bquantkv_[a-z0-9_]+\(' "$2" | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
  echo "libquantkv.so exports differ from quantkv.h (< exported, > declared):"
  diff <(echo "$exported") <(echo "$declared") || true
  exit 1
fi
echo "libquantkv.so exports the $(echo "$declared" | wc -l) functions of quantkv.h and nothing else"
