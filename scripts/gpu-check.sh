#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU machine's check: build, every test, the GPU tests under
# compute-sanitizer memcheck, every example, and (with --bench) the
# benchmark. Full logs go to OUTDIR/logs and, packed, to
# OUTDIR/gpu-check.tar.gz; a summary is printed last and kept in
# OUTDIR/summary.txt.
#
#   scripts/gpu-check.sh OUTDIR [--bench | --only-bench] [--bench-args "..."]
#                               [--staging] [--no-sanitizer] [--demo-args "..."]
#
# --bench adds benchmarks/pipeline_bench (--only-bench runs nothing else
# after the build); --staging adds benchmarks/staging_bench.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUTDIR [--bench] [--bench-args ARGS] [--no-sanitizer]}
shift
bench=0; staging=0; sanitize=1; bench_args=""; demo_args="--sweep"; only_bench=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --only-bench) bench=1; only_bench=1 ;;
    --staging) staging=1 ;;
    --bench-args) bench_args=$2; shift ;;
    --demo-args) demo_args=$2; shift ;;
    --no-sanitizer) sanitize=0 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
# Logs live outside OUTDIR and are packed into it after every step, so a
# run cut short still brings back everything it wrote (and one file, not
# dozens).
logs=${TMPDIR:-/tmp}/chunkpipe-gpu-logs; rm -rf "$logs"; mkdir -p "$logs"
pack() { tar -czf "$out/gpu-check.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"; }
summary="$out/summary.txt"; : > "$summary"
build=build-gpu
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
note() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME TIMEOUT CMD...: runs CMD, logs to logs/NAME.log, records the result
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  note "$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")"
  pack
  return $rc
}

note "gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
nvcc --version | tail -2 | tee -a "$summary"

step configure 300 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" || { tail -30 "$logs/configure.log"; }
step build 900 cmake --build "$build" -j16 || { grep -E "error" "$logs/build.log" | head -30 | tee -a "$summary"; }

if [ $only_bench = 0 ]; then
# CPU tests in parallel; GPU tests one at a time so they do not share the card.
step ctest-cpu 300 ctest --test-dir "$build" -LE gpu --output-on-failure -j16
step ctest-gpu 300 ctest --test-dir "$build" -L gpu -LE example --output-on-failure -j1
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$logs/ctest-cpu.log" "$logs/ctest-gpu.log" | tee -a "$summary"

for ex in overlap saxpy multistage chunk_sort prefetch; do
  [ -x "$build/examples/$ex" ] && step "example-$ex" 120 "$build/examples/$ex"
done
[ -x "$build/examples/file_convert" ] && step example-file_convert 300 "$build/examples/file_convert" --mib 2048
step example-predict 60 "$build/examples/predict" --out "$logs"
# The main job, as scripts/demo.sh runs it.
step double_buffer 300 "$build/examples/double_buffer" $demo_args --timeline "$logs"
cat "$logs/double_buffer.log"

if [ $sanitize = 1 ]; then
  # Every GPU test program but the one that plants a fault on purpose.
  for t in "$build"/tests/gpu/gpu_*_test; do
    name=$(basename "$t")
    [ "$name" = gpu_fault_test ] && continue
    step "memcheck-$name" "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 "$t"
    grep -E "ERROR SUMMARY|LEAK SUMMARY|test cases|assertions" "$logs/memcheck-$name.log" | tail -3 | tee -a "$summary"
  done
fi

fi  # only_bench

if [ $staging = 1 ]; then
  step staging_bench 300 "$build/benchmarks/staging_bench" --csv "$logs/staging.csv"
  tail -25 "$logs/staging_bench.log"
fi

if [ $bench = 1 ]; then
  step bench "${BENCH_TIMEOUT:-900}" "$build/benchmarks/pipeline_bench" --csv "$logs/bench.csv" --svg "$logs/bench.svg" $bench_args
  sed -n '/== targets/,$p' "$logs/bench.log"
fi

note "logs packed in gpu-check.tar.gz"
pack
