#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages (Debian 12 versions are
# pinned by the distribution: GoogleTest 1.12, Google Benchmark 1.7, CLI11 2.1, DLPack 0.6),
# then the Python module's build and test packages from PyPI into the project's venv `.venv`
# (CMake's default interpreter): Debian's pybind11 2.10 mishandles numpy 2 dtypes, so pybind11
# comes from PyPI at a pinned version, with numpy 2 (scripts/python_ci.sh also tests numpy 1).
set -euo pipefail
packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
          python3-dev python3-venv libdlpack-dev ccache clang libclang-rt-14-dev libomp-dev
          clang-format clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements-build.txt
