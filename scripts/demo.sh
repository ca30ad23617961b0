#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: the lesson's double-buffering benchmark rebuilt on chunkpipe
# (examples/double_buffer.cu), with its chunk-size sweep. Works on a fresh
# Debian 12 machine with nvcc at /usr/local/cuda.
#
# With no CUDA device it says so and shows the same schedules as predicted
# timelines (examples/predict.cpp) for the H200 and the lesson's T4, clearly
# labelled as predictions, instead of crashing.
#
#   scripts/demo.sh [double_buffer options]     e.g. --chunk-mib 16 --iters 2048
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CHUNKPIPE_BUILD_DIR:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
command -v cmake >/dev/null && command -v g++ >/dev/null || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake g++
}
# Only the two programs are needed: no tests, no Catch2.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" \
  -DCHUNKPIPE_BUILD_TESTS=OFF -DCHUNKPIPE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target double_buffer predict >/dev/null

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--sweep)
set +e
"$build/examples/double_buffer" "${args[@]}"
rc=$?
set -e
if [ $rc -eq 77 ]; then
  echo
  echo "Showing predictions instead (no GPU was used for anything below):"
  echo
  mkdir -p "$build/predict-out"
  exec "$build/examples/predict" --out "$build/predict-out"
fi
exit $rc
