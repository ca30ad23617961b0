#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds everything and runs every test. Works on a fresh Debian 12 machine
# with nvcc at /usr/local/cuda: installs what it needs (CMake, a C++
# compiler, Catch2) with apt-get when it is missing.
#
#   scripts/test.sh [build-dir]      (default: build)
#
# Where no CUDA device is present the GPU tests report "Skipped" (they need
# one); everything else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/catch2/catch.hpp ] || [ -f /usr/include/catch2/catch_test_macros.hpp ] ||
  [ -f /usr/local/include/catch2/catch_test_macros.hpp ] || need+=(catch2)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing: ${need[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=$(nproc)
echo "== configure ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc"
echo "== build (-j$jobs)"
cmake --build "$build" -j "$jobs"
echo "== test"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "   a GPU is present: gpu-labelled tests run"
else
  echo "   no GPU here: gpu-labelled tests will be reported as Skipped"
fi
ctest --test-dir "$build" --output-on-failure -j "$jobs"
