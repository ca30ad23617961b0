#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU machine's check: build, every test, the GPU tests under
# compute-sanitizer, every example, and (when asked) the benchmarks. Full
# logs, packed after every step, go to OUTDIR/gpu-check.tar.gz; a summary
# is printed as it goes and kept in OUTDIR/summary.txt. OUTDIR is created
# if missing.
#
# Every step's exit status counts: the check exits 0 and its last line reads
# "gpu-check: PASSED" only when every step (the GPU's presence, configure,
# build, each ctest, each sanitizer run, each example, each benchmark)
# succeeded; otherwise it exits 1 and the last line reads
# "gpu-check: FAILED (steps: ...)", naming them.
#
#   scripts/gpu-check.sh OUTDIR [--bench | --only-bench] [--bench-args "..."]
#                               [--staging] [--bench-prog NAME [--bench-prog-args "..."]]...
#                               [--sanitizers "memcheck racecheck synccheck"] [--no-sanitizer]
#                               [--no-tests | --only-sanitizers] [--demo-args "..."]
#
# --bench             adds benchmarks/pipeline_bench, with --bench-args.
# --only-bench        --bench --no-tests.
# --staging           adds benchmarks/staging_bench.
# --bench-prog NAME   adds build-gpu/benchmarks/NAME (any benchmark or probe,
#                     e.g. probe_copy_lanes); repeat for more. It runs in the
#                     logs folder, so its relative paths (a default NAME.csv,
#                     "--csv mine.csv") land there and come back packed.
# --bench-prog-args "..."  the arguments of the --bench-prog before it, split
#                     on spaces.
# --sanitizers "..."  the compute-sanitizer tools to run over every GPU test
#                     program in build-gpu/tests/gpu except gpu_fault_test
#                     (which plants a fault on purpose): any of memcheck,
#                     racecheck, synccheck, initcheck. Default: memcheck.
# --no-sanitizer      runs none.
# --no-tests          after the build, runs only the benchmarks asked for:
#                     no ctest, examples or sanitizers.
# --only-sanitizers   after the build, runs only the sanitizers (and the
#                     benchmarks asked for): no ctest, no examples. For a
#                     second call after a full one, within a time limit.
# --demo-args "..."   double_buffer's arguments (default --sweep).
# --cpu-exclude RE    leaves CPU tests matching RE out (ctest -E) besides
#                     docs (no doxygen there; CI builds it), e.g. the
#                     compile-only checks CI runs anyway: "^compile_".
#
# HEADER_PAIRS (environment, default cover) sets CHUNKPIPE_HEADER_PAIRS.
# Every program is built with the Release flags (CHUNKPIPE_COMPILE_ONLY=OFF),
# whatever an earlier scripts/test.sh left in the folder's cache.
#
# Timeouts (seconds, environment): BENCH_TIMEOUT (900, each benchmark),
# SANITIZER_TIMEOUT (600 per tool and program; MEMCHECK_TIMEOUT, 300,
# overrides it for memcheck).
set -uo pipefail
usage="usage: scripts/gpu-check.sh OUTDIR [--bench | --only-bench] [--bench-args ARGS] [--staging]
       [--bench-prog NAME [--bench-prog-args ARGS]]... [--sanitizers \"TOOL...\"] [--no-sanitizer]
       [--no-tests | --only-sanitizers] [--demo-args ARGS]"
help() { sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) help; exit 0 ;; esac
if [ $# -lt 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "$usage" >&2
  exit 2
fi
outdir=$1
shift
bench=0; staging=0; sanitizers="memcheck"; bench_args=""; demo_args="--sweep"; tests=1; cpu_exclude=""
progs=(); prog_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --only-bench) bench=1; tests=0 ;;
    --no-tests) tests=0 ;;
    --only-sanitizers) tests=2 ;;
    --staging) staging=1 ;;
    --bench-args|--demo-args|--sanitizers|--bench-prog|--bench-prog-args|--cpu-exclude)
      if [ $# -lt 2 ]; then echo "gpu-check: $1 needs a value" >&2; echo "$usage" >&2; exit 2; fi
      case "$1" in
        --bench-args) bench_args=$2 ;;
        --demo-args) demo_args=$2 ;;
        --sanitizers) sanitizers=$2 ;;
        --cpu-exclude) cpu_exclude=$2 ;;
        --bench-prog) progs+=("$2"); prog_args+=("") ;;
        --bench-prog-args)
          if [ ${#progs[@]} -eq 0 ]; then echo "gpu-check: --bench-prog-args must follow a --bench-prog" >&2; exit 2; fi
          prog_args[${#prog_args[@]}-1]=$2 ;;
      esac
      shift ;;
    --no-sanitizer) sanitizers="" ;;
    -h|--help) help; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
for tool in $sanitizers; do
  case "$tool" in
    memcheck|racecheck|synccheck|initcheck) ;;
    *) echo "gpu-check: unknown sanitizer tool '$tool' (memcheck, racecheck, synccheck, initcheck)" >&2; exit 2 ;;
  esac
done
for p in "${progs[@]}"; do
  case "$p" in
    */*|.*|"") echo "gpu-check: --bench-prog takes a program name in build-gpu/benchmarks, got '$p'" >&2; exit 2 ;;
  esac
done

# OUTDIR is relative to where the script was started, not to the repository.
if ! mkdir -p "$outdir" || ! out=$(cd "$outdir" && pwd); then
  echo "gpu-check: cannot create the output folder '$outdir'" >&2
  exit 2
fi
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
# Logs live outside OUTDIR and are packed into it after every step, so a
# run cut short still brings back everything it wrote (and one file, not
# dozens).
logs=${TMPDIR:-/tmp}/chunkpipe-gpu-logs; rm -rf "$logs"; mkdir -p "$logs"
pack() { tar -czf "$out/gpu-check.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"; }
summary="$out/summary.txt"
if ! : > "$summary"; then
  echo "gpu-check: cannot write $summary" >&2
  exit 2
fi
build="build-gpu"
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
failed=()
note() { echo "$*" | tee -a "$summary"; }
fail() { failed+=("$1"); }  # fail STEP: records a failed step that step() did not run
step() {  # step NAME TIMEOUT CMD...: runs CMD, logs to logs/NAME.log, records the result
  local name=$1 limit=$2; shift 2
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  local verdict=ok
  [ $rc -eq 0 ] || { verdict=FAILED; failed+=("$name"); }
  [ $rc -eq 124 ] && verdict="FAILED (timed out after ${limit}s)"
  note "$(printf '%-28s rc=%-3s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$verdict")"
  pack
  return $rc
}
finish() {
  if [ ${#failed[@]} -eq 0 ]; then
    note "logs packed in $out/gpu-check.tar.gz"
    pack
    note "gpu-check: PASSED"
    exit 0
  fi
  note "logs packed in $out/gpu-check.tar.gz"
  pack
  note "gpu-check: FAILED (steps: ${failed[*]})"
  exit 1
}

note "gpu-check $(date -u +%FT%TZ) on $(hostname)"
step gpu 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
tee -a "$summary" < "$logs/gpu.log"
nvcc --version 2>&1 | tail -2 | tee -a "$summary"

# The header-order tests: "cover" (the default) checks every ordered pair
# that "all" compiles, with 10 nvcc TUs instead of 205 (23 public headers).
if ! step configure 300 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DCHUNKPIPE_HEADER_PAIRS="${HEADER_PAIRS:-cover}" \
       -DCHUNKPIPE_COMPILE_ONLY=OFF; then
  tail -30 "$logs/configure.log" | tee -a "$summary"
  finish  # nothing below can run without a configured build
fi
step build 900 cmake --build "$build" -j16 || { grep -E "error" "$logs/build.log" | head -30 | tee -a "$summary"; }

# ctest STEP ARGS...: a ctest step that also fails when tests were skipped
# (on the GPU machine a skipped test is one that did not run) or none matched.
ctest_step() {
  local name=$1; shift
  step "$name" 600 ctest --test-dir "$build" --output-on-failure --no-tests=error "$@"
  if grep -qE "\*\*\*Skipped|tests did not run" "$logs/$name.log"; then
    note "$name: some tests were skipped, which counts as a failure here"
    fail "$name(skipped)"
  fi
}

if [ $tests = 1 ]; then
  # CPU tests in parallel; GPU tests one at a time so they do not share the card.
  # The API reference needs doxygen, which the GPU machine lacks (and
  # cannot install): CI builds it. Everything else skipped is a failure.
  ctest_step ctest-cpu -LE gpu -j16 -E "^docs\$${cpu_exclude:+|$cpu_exclude}"
  ctest_step ctest-gpu -L gpu -LE example -j1
  grep -hE "tests passed|tests failed|Skipped|Failed|\*\*\*" "$logs/ctest-cpu.log" "$logs/ctest-gpu.log" | tee -a "$summary"

  # Every example; one that was not built is a failure too.
  for ex in overlap saxpy multistage chunk_sort prefetch streaming file_convert histogram filter predict double_buffer; do
    if [ ! -x "$build/examples/$ex" ]; then
      note "example $ex was not built"
      fail "example-$ex(not built)"
      continue
    fi
    case "$ex" in
      file_convert) step example-file_convert 300 "$build/examples/file_convert" --mib 2048 ;;
      predict) step example-predict 60 "$build/examples/predict" --timeline "$logs" ;;
      histogram|filter) step "example-$ex" 120 "$build/examples/$ex" --mib 256 ;;
      # The main job, as scripts/demo.sh runs it.
      double_buffer)
        # shellcheck disable=SC2086  # demo_args is a list of words
        step double_buffer 300 "$build/examples/double_buffer" $demo_args --timeline "$logs"
        cat "$logs/double_buffer.log" ;;
      *) step "example-$ex" 120 "$build/examples/$ex" ;;
    esac
  done
fi  # ctest and examples

if [ $tests != 0 ]; then
  if [ -n "$sanitizers" ]; then
    # Every GPU test program but the one that plants a fault on purpose, run
    # directly (CTest's test names may be one per test case).
    shopt -s nullglob
    gpu_tests=("$build"/tests/gpu/gpu_*_test)
    shopt -u nullglob
    if [ ${#gpu_tests[@]} -eq 0 ]; then
      note "no GPU test programs in $build/tests/gpu to run under compute-sanitizer"
      fail "sanitizers(no programs)"
    fi
    for tool in $sanitizers; do
      limit=${SANITIZER_TIMEOUT:-600}
      extra=()
      case "$tool" in
        memcheck) limit=${MEMCHECK_TIMEOUT:-300}; extra=(--leak-check full) ;;
        racecheck) extra=(--racecheck-report all) ;;
      esac
      for t in "${gpu_tests[@]}"; do
        name=$(basename "$t")
        [ "$name" = gpu_fault_test ] && continue
        # Test cases tagged [cuda-api-errors] make CUDA calls fail on
        # purpose, which the tools count as errors; ctest runs them.
        step "$tool-$name" "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 1 "$t" \
          "~[cuda-api-errors]"
        grep -E "SUMMARY|test cases|assertions" "$logs/$tool-$name.log" | tail -3 | tee -a "$summary"
      done
    done
  fi
fi  # tests

if [ $staging = 1 ]; then
  step staging_bench "${BENCH_TIMEOUT:-900}" "$build/benchmarks/staging_bench" --csv "$logs/staging.csv"
  tail -25 "$logs/staging_bench.log"
fi

if [ $bench = 1 ]; then
  # shellcheck disable=SC2086  # bench_args is a list of words
  step bench "${BENCH_TIMEOUT:-900}" "$build/benchmarks/pipeline_bench" --csv "$logs/bench.csv" --svg "$logs/bench.svg" $bench_args
  sed -n '/== targets/,$p' "$logs/bench.log"
fi

for i in "${!progs[@]}"; do
  prog=${progs[$i]}
  name="bench-$prog"
  [ -e "$logs/$name.log" ] && name="bench-$prog-$i"  # the same program twice
  if [ ! -x "$root/$build/benchmarks/$prog" ]; then
    note "benchmark $prog is not in $build/benchmarks"
    fail "$name(not built)"
    continue
  fi
  read -r -a words <<< "${prog_args[$i]}"
  # In the logs folder, so its relative output paths land there.
  # shellcheck disable=SC2016  # the inner shell expands $1 and $@
  step "$name" "${BENCH_TIMEOUT:-900}" bash -c 'cd "$1" && shift && exec "$@"' _ "$logs" \
    "$root/$build/benchmarks/$prog" "${words[@]}"
  tail -25 "$logs/$name.log"
done

finish
