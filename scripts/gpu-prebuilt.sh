#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# For when the GPU machine's own build is too slow for its time limit:
# pack GPU test programs and benchmarks built here, and run them there
# with the steps scripts/gpu-check.sh takes (every GPU test plainly, the
# named benchmarks, then memcheck, synccheck and racecheck over every test
# program but gpu_fault_test, with gpu-check.sh's flags), each step cut to
# the time left. The programs must be built for sm_90 on an x86-64 machine
# whose CUDA runtime matches the device's (nvcc 13.0 here and there).
#
#   scripts/gpu-prebuilt.sh pack BUILD_DIR [BENCH...]   # here: writes out/prebuilt.tar
#   scripts/gpu-prebuilt.sh run OUTDIR SECONDS ["BENCH ARGS"...]   # there, from the repository root
#
# run writes OUTDIR/summary.txt (a line a step) and OUTDIR/logs.tgz, and
# exits 1 if any step failed or was left out for lack of time.
# GPU_PREBUILT_TOOLS (default "memcheck synccheck racecheck") names the
# sanitizer passes, so that they can be split over two calls.
#
# pack takes a build folder whose programs were built to run: a
# scripts/test.sh folder will not do (CHUNKPIPE_COMPILE_ONLY: test.sh
# compiles the benchmarks without building them, and without a GPU builds
# the GPU tests with host code at -O0). For example:
#   cmake -S . -B build-prebuilt -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-prebuilt -j --target chunkpipe_gpu_tests pipeline_bench
set -uo pipefail
case "${1:-}" in
  pack)
    build=${2:?usage: gpu-prebuilt.sh pack BUILD_DIR [BENCH...]}
    shift 2
    build=$(cd "$build" && pwd)  # tar's -C is relative to the one before it: absolute paths
    # Programs compiled only to check that they build (host code at -O0)
    # must not be timed or sanitised as if they were the real ones.
    mode=$(sed -n 's/^CHUNKPIPE_COMPILE_ONLY:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null | tr '[:lower:]' '[:upper:]')
    case "$mode" in
      ""|OFF|0|FALSE|NO) ;;
      BENCHMARKS)
        if [ $# -gt 0 ]; then
          echo "gpu-prebuilt: $build has CHUNKPIPE_COMPILE_ONLY=$mode (a scripts/test.sh folder): its benchmarks are" \
               "compiled to check them, not built; pack from a folder configured with it OFF (see --help)" >&2
          exit 2
        fi ;;
      *)
        echo "gpu-prebuilt: $build has CHUNKPIPE_COMPILE_ONLY=$mode (a scripts/test.sh folder on a machine without" \
             "a GPU): its GPU tests are built with host code at -O0 and its benchmarks not at all, to check them;" \
             "pack from a folder configured with it OFF (see --help)" >&2
        exit 2 ;;
    esac
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
    [ "$type" = Release ] || echo "gpu-prebuilt: warning: $build is a '${type:-no build type}' build, not Release" >&2
    mkdir -p out
    files=()
    for t in "$build"/tests/gpu/gpu_*_test; do [ -x "$t" ] && files+=("-C" "$(dirname "$t")" "$(basename "$t")"); done
    for b in "$@"; do files+=("-C" "$build/benchmarks" "$b"); done
    tar cf out/prebuilt.tar "${files[@]}" && ls -la out/prebuilt.tar
    ;;
  run)
    out=${2:?usage: gpu-prebuilt.sh run OUTDIR SECONDS}
    budget=${3:?usage: gpu-prebuilt.sh run OUTDIR SECONDS}
    shift 3
    mkdir -p "$out/logs" /tmp/prebuilt
    out=$(cd "$out" && pwd)
    tar xf out/prebuilt.tar -C /tmp/prebuilt || exit 1
    cd /tmp/prebuilt || exit 1
    summary=$out/summary.txt
    t0=$(date +%s)
    failed=0
    step() {
      local name=$1 limit=$2
      shift 2
      local left=$((budget - ($(date +%s) - t0)))
      if [ "$left" -lt 10 ]; then
        echo "$name: left out (no time)" | tee -a "$summary"
        failed=1
        return
      fi
      [ "$limit" -gt "$left" ] && limit=$left
      local start=$(date +%s)
      timeout "$limit" "$@" > "$out/logs/$name.log" 2>&1
      local rc=$?
      [ $rc -ne 0 ] && failed=1
      echo "$(date -u +%H:%M:%SZ) $name rc=$rc $(($(date +%s) - start))s" \
           "$(grep -E 'test cases|All tests passed|SKIPPED|ERROR SUMMARY|RACECHECK SUMMARY' "$out/logs/$name.log" | tail -2 | tr '\n' ' ')" |
        tee -a "$summary"
    }
    nvidia-smi -L | tee -a "$summary"
    tests=(gpu_*_test)
    for t in "${tests[@]}"; do step "plain-$t" 300 "./$t"; done
    for b in "$@"; do
      read -r -a words <<< "$b"
      step "bench-${words[0]}" 600 "./${words[0]}" "${words[@]:1}"
    done
    for tool in ${GPU_PREBUILT_TOOLS-memcheck synccheck racecheck}; do
      extra=()
      case $tool in
        memcheck) extra=(--leak-check full) ;;
        racecheck) extra=(--racecheck-report all) ;;
      esac
      for t in "${tests[@]}"; do
        [ "$t" = gpu_fault_test ] && continue  # plants a fault on purpose
        step "$tool-$t" 300 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 1 "./$t" "~[cuda-api-errors]"
      done
    done
    echo "total $(($(date +%s) - t0))s" | tee -a "$summary"
    tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
    [ $failed -eq 0 ] && echo "gpu-prebuilt: PASSED" | tee -a "$summary" || echo "gpu-prebuilt: FAILED" | tee -a "$summary"
    exit $failed
    ;;
  -h|--help)
    sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    ;;
  *)
    sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
    ;;
esac
