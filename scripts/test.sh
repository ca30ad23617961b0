#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds everything and runs every test. Works on a fresh Debian 12 machine
# with nvcc at /usr/local/cuda: installs what it needs (CMake, make, a C++
# compiler, Catch2, OpenMPI, Doxygen) with apt-get when it is missing.
#
#   scripts/test.sh [build-dir]                   (default: build)
#   scripts/test.sh --configure-only build-dir    (configure only; installs nothing)
#
# Whatever configured the build folder before (scripts/demo.sh, a build with
# tests off), this configures it with tests, examples, benchmarks, install
# rules and docs on, builds all of it and runs the whole suite, one CTest
# test per Catch2 test case. It fails when a test fails, and also when no
# test was found or none ran. Where no CUDA device is present the GPU tests
# report "Skipped" (they need one); everything else runs. Without Doxygen
# (where apt-get cannot install it) the docs test reports Skipped.
#
# Built to check, not to time: what this script never runs is compiled only
# as far as its check needs (CHUNKPIPE_COMPILE_ONLY, cmake/chunkpipe-dev.cmake):
# the benchmarks are compiled, not built, by the test compile_benchmarks,
# and without a GPU the GPU tests and examples are built with host code at
# -O0. Benchmarks for figures come from scripts/gpu-check.sh's build.
# Where ccache is installed the build goes through it (never required).
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [ "${1:-}" = "--configure-only" ]; then
  configure_only=1
  shift
fi
build=${1:-build}

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
apt_updated=0
apt_install() {  # apt_install PACKAGE...: returns non-zero where that is impossible
  command -v apt-get >/dev/null || return 1
  if [ $apt_updated = 0 ]; then
    $sudo apt-get update -qq || return 1
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}

if [ $configure_only = 0 ]; then
  need=()
  command -v cmake >/dev/null || need+=(cmake)
  command -v make >/dev/null || need+=(make)
  command -v g++ >/dev/null || need+=(g++)
  [ -f /usr/include/catch2/catch.hpp ] || [ -f /usr/include/catch2/catch_test_macros.hpp ] ||
    [ -f /usr/local/include/catch2/catch_test_macros.hpp ] || need+=(catch2)
  # OpenMPI: examples/mpi_convert and its test (two ranks on the host backend).
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null || need+=(libopenmpi-dev openmpi-bin)
  if [ ${#need[@]} -gt 0 ]; then
    echo "== installing: ${need[*]}"
    apt_install "${need[@]}" || { echo "test.sh: could not install ${need[*]} with apt-get" >&2; exit 1; }
  fi
  # The API reference is part of the suite, but not worth failing over where
  # Doxygen cannot be had: the docs test then says so and reports Skipped.
  if ! command -v doxygen >/dev/null; then
    echo "== installing: doxygen"
    apt_install doxygen ||
      echo "   doxygen could not be installed: the docs test will report Skipped (API reference not checked)"
  fi
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=$(nproc)
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
echo "== configure ($build)"
# Every part on, whatever the cache says (scripts/demo.sh, for one, turns
# tests and benchmarks off in the folder it configures).
options=(CHUNKPIPE_BUILD_TESTS CHUNKPIPE_BUILD_EXAMPLES CHUNKPIPE_BUILD_BENCHMARKS CHUNKPIPE_INSTALL
         CHUNKPIPE_BUILD_DOCS)
defs=()
for o in "${options[@]}"; do defs+=("-D$o=ON"); done
# What this run never runs is compiled only as far as its check needs
# (CHUNKPIPE_COMPILE_ONLY, cmake/chunkpipe-dev.cmake): the benchmarks are
# compiled, not built (the suite runs none; their figures come from
# scripts/gpu-check.sh, which builds them with the Release flags), and
# where there is no GPU the GPU tests and GPU examples are built with host
# code at -O0 (there they are listed and report Skipped). Whatever runs
# here keeps the Release flags.
if [ $gpu = 1 ]; then compile_only=BENCHMARKS; else compile_only=GPU; fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" "${defs[@]}" \
  -DCHUNKPIPE_COMPILE_ONLY=$compile_only
for o in "${options[@]}"; do
  grep -q "^$o:BOOL=ON$" "$build/CMakeCache.txt" || {
    echo "test.sh: $o is not ON in $build/CMakeCache.txt after configuring" >&2
    exit 1
  }
done
[ $configure_only = 0 ] || exit 0

echo "== build (-j$jobs)"
cmake --build "$build" -j "$jobs"
echo "== test"
if [ $gpu = 1 ]; then
  echo "   a GPU is present: gpu-labelled tests run"
else
  echo "   no GPU here: gpu-labelled tests will be reported as Skipped"
fi
case $build in
  /*) results="$build/ctest-results.xml" ;;
  *) results="$PWD/$build/ctest-results.xml" ;;
esac
rm -f "$results"
set +e
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" --output-junit "$results"
rc=$?
set -e
[ $rc = 0 ] || exit $rc
# Passing with every test skipped is not passing.
ran=$(grep -c '<testcase [^>]*status="run"' "$results" || true)
if [ "${ran:-0}" -eq 0 ]; then
  echo "test.sh: ctest ran no test (all $(grep -c '<testcase ' "$results" || true) were skipped or not run)" >&2
  exit 1
fi
echo "== $ran tests ran and passed"
