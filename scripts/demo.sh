#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: the double-buffering lesson's benchmark rebuilt on chunkpipe
# (examples/double_buffer.cu), with its chunk-size sweep. "The lesson" is a
# page on double buffering ("day 54") of an online CUDA course, whose
# benchmark program double_buffer.cu that example rebuilds; the course pages
# are not in this repository. Works on a fresh Debian 12 machine with nvcc
# at /usr/local/cuda.
#
# With no CUDA device or driver it says so and runs examples/predict with
# the same options instead: the same schedules as predicted timelines for
# an H200 (PCIe Gen5) and a Tesla T4 (PCIe Gen3) model, clearly labelled as
# predictions, and it names any option a prediction cannot use.
#
#   scripts/demo.sh [double_buffer options]     e.g. --chunk-mib 16 --iters 2048 --timeline DIR
#                                               (none: --sweep)
#
# Builds in its own folder, build-demo (CHUNKPIPE_DEMO_BUILD_DIR to change),
# with tests and benchmarks off, so it never reconfigures the folder that
# scripts/test.sh uses.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CHUNKPIPE_DEMO_BUILD_DIR:-build-demo}
cuda=${CUDA_HOME:-/usr/local/cuda}
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake g++
fi
# Only the two programs are needed: no tests, no Catch2. The build's output
# goes to a log, shown when a step fails.
mkdir -p "$build"
log="$build/demo-build.log"
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" \
         -DCHUNKPIPE_BUILD_TESTS=OFF -DCHUNKPIPE_BUILD_BENCHMARKS=OFF &&
       cmake --build "$build" -j "$(nproc)" --target double_buffer predict; } >"$log" 2>&1; then
  tail -30 "$log" >&2
  echo "demo: the build failed (full log: $log)" >&2
  exit 1
fi

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--sweep)
set +e
"$build/examples/double_buffer" "${args[@]}"
rc=$?
set -e
if [ $rc -eq 77 ]; then
  echo
  echo "Showing predictions for the same options instead (no GPU was used for anything below):"
  echo
  exec "$build/examples/predict" "${args[@]}"
fi
exit $rc
