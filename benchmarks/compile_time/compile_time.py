#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What chunkpipe costs a user's compile: the table of issue 33, measured.

Compiles the translation units in tu/ one at a time, never two at once,
each R times, interleaved (a, b, c, d, e, a, b, ...) so that a neighbour's
load falls on every row alike, and prints, per row, the median wall time,
the peak memory of the compiler, the object's size and nvcc's own
per-phase times, each time also as a ratio to row (b), one Thrust sort:

  a  a plain kernel and two cudaMemcpy (the floor of any .cu file)   nvcc
  b  thrust::device_vector + thrust::sort (the reference)            nvcc
  c  ChunkedPipeline<Map<Scale>> and one run(x, y) (README, first)   nvcc
     from <chunkpipe/chunked_pipeline.cuh>, as the README includes it
  d  a reduce and a filter pipeline, each run once (README)          nvcc
     from the umbrella <chunkpipe/pipeline.cuh> (CUB's select included)
  e  HostPipeline<Map<Scale>> in a .cpp                              g++
  f  row c with CHUNKPIPE_COMPILED (chunkpipe::compiled)             nvcc
  g  row e with CHUNKPIPE_COMPILED                                    g++
  h  the compiled part itself, <chunkpipe/compiled.hpp> (paid once    g++
     per program, not per file)
  i  row d from <chunkpipe/chunked_pipeline.cuh> and <chunkpipe/      nvcc
     filter.cuh> instead of the umbrella, with CHUNKPIPE_COMPILED: the
     same file written to compile fastest

Every nvcc row is `nvcc -O2 -std=c++17 -arch=sm_90 -c` with only
include/ added, the g++ row `g++ -O2 -std=c++17 -c` with include/ and the
toolkit's include and include/cccl (what CCCL::CCCL gives a consumer).

  compile_time.py [--reps R] [--rows abcdefghi] [--csv PATH] [--quick]
                  [--nvcc PATH] [--cxx PATH] [--include DIR] [--arch SM]

Memory: `peak MB` is the kernel's maximum resident set of the largest
single process of the compiler's tree (wait4's ru_maxrss, exact; nvcc runs
its phases one after another, so this is the largest phase);
`tree MB` is the largest sum over the whole tree seen by sampling /proc
every 20 ms (an estimate, never above the truth by more than a sample's
drift). Load: the 1, 5 and 15 minute load averages (as `uptime` prints
them) are read before every compile and written with it to the runs CSV.

Writes PATH (one line per row: medians and ratios) and PATH's stem with
-runs.csv (one line per compile, with its load averages). The default PATH
is benchmarks/results/<date>-compile-time.csv, with -2, -3, ... added when
that file exists, so a second run of the day never overwrites the first.

--quick (the CTest test bench_compile_time_quick, label cpu) compiles rows
a, c and e once each and prints the same table, then passes if every TU
compiled: it asserts nothing about time or memory. Why: a bound on seconds
or a ratio fails by the neighbours' load, not by the code (on the 2-core
machine the suite's own parallel compiles move a row by 2x), and a bound
loose enough never to fail that way (c/a under 30, say) would miss every
regression worth catching. What the test does catch is a user's file that
stops compiling (a header that only compiles after another, a CCCL
update), and it puts the figures in every test log, where a regression
shows. The ratios are for the full run, measured side by side. No CSV is
written in quick mode unless --csv is given.
"""

import argparse
import csv
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# (row, short name, file under tu/, compiler, what it is)
ROWS = [
    ("a", "floor", "a_floor.cu", "nvcc", "plain kernel + 2 cudaMemcpy"),
    ("b", "thrust_sort", "b_thrust_sort.cu", "nvcc", "thrust::device_vector + sort"),
    ("c", "map_pipeline", "c_map_pipeline.cu", "nvcc", "ChunkedPipeline<Map<Scale>>, run(x, y)"),
    ("d", "reduce_filter", "d_reduce_filter.cu", "nvcc", "a reduce and a filter pipeline"),
    ("e", "host_pipeline", "e_host_pipeline.cpp", "cxx", "HostPipeline<Map<Scale>> (.cpp, g++)"),
    ("f", "map_compiled", "c_map_pipeline.cu", "nvcc", "row c, CHUNKPIPE_COMPILED"),
    ("g", "host_compiled", "e_host_pipeline.cpp", "cxx", "row e, CHUNKPIPE_COMPILED"),
    ("h", "compiled_part", "h_compiled_part.cpp", "cxx", "<chunkpipe/compiled.hpp> (once a program)"),
    ("i", "reduce_filter_compiled", "i_reduce_filter_narrow.cu", "nvcc", "row d, narrow headers, CHUNKPIPE_COMPILED"),
]
# Rows built with CHUNKPIPE_COMPILED: their non-template host code comes
# from the compiled part (row h), linked once into a program.
COMPILED_ROWS = "fgi"
REFERENCE = "b"
QUICK_ROWS = "ace"
# nvcc --time phase names, grouped into the table's columns.
PHASES = [("prep_s", ("gcc (preprocessing",)), ("cudafe_s", ("cudafe++",)), ("cicc_s", ("cicc",)),
          ("ptxas_s", ("ptxas",)), ("host_cc_s", ("gcc (compiling",))]


def tree_rss_bytes(root):
    """Resident bytes of `root` and its descendants now (0 for what has gone)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass  # it exited between the listing and the read
    return total


def run_measured(cmd, log_path):
    """Runs cmd; returns (exit code, wall s, CPU s of the tree, peak single-process RSS bytes,
    sampled tree RSS bytes)."""
    peak_tree = [0]
    done = threading.Event()
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

        def sample():
            # Sampling costs well under 1% of a core at this rate.
            while not done.wait(0.02):
                peak_tree[0] = max(peak_tree[0], tree_rss_bytes(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # wait4, not Popen.wait: its rusage holds the largest RSS of any
        # process of the tree that was waited for (Linux keeps the maximum).
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, peak_tree[0]


def read_phases(path):
    """nvcc --time's CSV, summed into the table's phase columns (seconds)."""
    out = {name: 0.0 for name, _ in PHASES}
    try:
        with open(path, newline="") as f:
            for rec in csv.reader(f):
                if len(rec) < 8 or rec[7].strip() != "ms":
                    continue
                phase = rec[1].strip()
                for name, prefixes in PHASES:
                    if phase.startswith(prefixes):
                        out[name] += float(rec[6]) / 1000.0
    except (OSError, ValueError):
        return None
    return out


def tool_version(exe):
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return "?"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # nvcc names its release on a later line; g++ and clang++ on the first.
    return next((line for line in lines if "release" in line), lines[0] if lines else "?")


def default_csv_path():
    stem = os.path.join(REPO, "benchmarks", "results", f"{datetime.date.today().isoformat()}-compile-time")
    path, k = stem + ".csv", 2
    while os.path.exists(path):
        path, k = f"{stem}-{k}.csv", k + 1
    return path


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="compiles of each row, interleaved (default 3)")
    p.add_argument("--rows", default=None, help="which rows, e.g. 'abc' (default all; --quick: ace)")
    p.add_argument("--csv", default=None, help="summary CSV path (default benchmarks/results/<date>-compile-time.csv)")
    p.add_argument("--quick", action="store_true", help="rows a, c and e once; pass iff they compile (see above)")
    p.add_argument("--nvcc", default=os.environ.get("CUDACXX", "/usr/local/cuda/bin/nvcc"))
    p.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    p.add_argument("--include", default=os.path.join(REPO, "include"), help="chunkpipe's include folder")
    p.add_argument("--cuda-include", default=None,
                   help="the toolkit's include folder, for the g++ row (default: next to nvcc)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--keep", default=None, help="keep objects, logs and nvcc --time CSVs in this folder")
    a = p.parse_args()
    if a.rows is None:
        a.rows = QUICK_ROWS if a.quick else "".join(r[0] for r in ROWS)
    if a.quick and "--reps" not in sys.argv:
        a.reps = 1
    unknown = set(a.rows) - {r[0] for r in ROWS}
    if unknown or a.reps < 1:
        p.error(f"--rows takes letters of {''.join(r[0] for r in ROWS)}; --reps at least 1")
    if a.cuda_include is None:
        a.cuda_include = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(a.nvcc))), "include")
    return a


def command(row, args, obj, timing):
    key, _, tu, compiler, _ = row
    src = os.path.join(HERE, "tu", tu)
    defines = ["-DCHUNKPIPE_COMPILED"] if key in COMPILED_ROWS else []
    if compiler == "nvcc":
        return [args.nvcc, "-O2", "-std=c++17", f"-arch={args.arch}", "-I", args.include, *defines, "-c", src,
                "-o", obj, "--time", timing]
    incs = ["-I", args.include, "-I", args.cuda_include]
    cccl = os.path.join(args.cuda_include, "cccl")
    if os.path.isdir(cccl):
        incs += ["-I", cccl]
    return [args.cxx, "-O2", "-std=c++17", *incs, *defines, "-c", src, "-o", obj]


def fmt(x, spec):
    """x formatted by spec, or a dash as wide as spec says."""
    return format(x, spec) if x is not None else format("-", ">" + spec.split(".")[0])


def main():
    args = parse_args()
    rows = [r for r in ROWS if r[0] in args.rows]
    if any(r[3] == "nvcc" for r in rows) and not shutil.which(args.nvcc):
        sys.exit(f"compile_time: no nvcc at {args.nvcc} (--nvcc)")
    work = args.keep or tempfile.mkdtemp(prefix="chunkpipe-compile-time-")
    os.makedirs(work, exist_ok=True)

    print(f"compile_time: {len(rows)} rows x {args.reps}, one compile at a time, on {os.cpu_count()} cores"
          f" ({platform.node()}); load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    runs, failed = [], []
    for rep in range(args.reps):
        for row in rows:
            key = row[0]
            if key in failed:
                continue
            obj = os.path.join(work, f"{key}_{rep}.o")
            timing = os.path.join(work, f"{key}_{rep}-time.csv")
            log = os.path.join(work, f"{key}_{rep}.log")
            for stale in (obj, timing):
                if os.path.exists(stale):
                    os.remove(stale)
            load = os.getloadavg()
            rc, wall, cpu, peak, tree = run_measured(command(row, args, obj, timing), log)
            size = os.path.getsize(obj) if rc == 0 and os.path.exists(obj) else None
            phases = read_phases(timing) if row[3] == "nvcc" and rc == 0 else None
            runs.append({"round": rep + 1, "row": key, "name": row[1], "exit": rc, "wall_s": wall, "cpu_s": cpu,
                         "peak_rss_mb": peak / 1e6, "tree_rss_mb": tree / 1e6, "object_bytes": size,
                         "load1": load[0], "load5": load[1], "load15": load[2],
                         **(phases or {name: None for name, _ in PHASES})})
            print(f"  round {rep + 1} {key} {row[1]:<14} {wall:7.2f} s {peak / 1e6:7.0f} MB"
                  f"  load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" + ("" if rc == 0 else f"  FAILED ({rc})"),
                  flush=True)
            if rc != 0:
                failed.append(key)
                with open(log, errors="replace") as f:
                    sys.stdout.write("".join(f.readlines()[-40:]))

    def med(key, field):
        xs = [r[field] for r in runs if r["row"] == key and r["exit"] == 0 and r[field] is not None]
        return statistics.median(xs) if xs else None

    summary = []
    for row in rows:
        key = row[0]
        ok = [r for r in runs if r["row"] == key and r["exit"] == 0]
        s = {"row": key, "name": row[1], "tu": row[2], "compiler": "nvcc" if row[3] == "nvcc" else "g++",
             "reps": len(ok), "compiled": key not in failed,
             "wall_s_median": med(key, "wall_s"),
             "wall_s_min": min((r["wall_s"] for r in ok), default=None),
             "wall_s_max": max((r["wall_s"] for r in ok), default=None),
             "cpu_s_median": med(key, "cpu_s"),
             "peak_rss_mb_median": med(key, "peak_rss_mb"), "tree_rss_mb_median": med(key, "tree_rss_mb"),
             "object_bytes": med(key, "object_bytes"),
             **{name: med(key, name) for name, _ in PHASES},
             "load1_min": min((r["load1"] for r in ok), default=None),
             "load1_max": max((r["load1"] for r in ok), default=None)}
        summary.append(s)
    ref = next((s for s in summary if s["row"] == REFERENCE and s["compiled"]), None)
    for s in summary:
        for field, out in (("wall_s_median", "wall_vs_thrust"), ("cpu_s_median", "cpu_vs_thrust"),
                           ("peak_rss_mb_median", "peak_vs_thrust"),
                           ("object_bytes", "object_vs_thrust")):
            s[out] = s[field] / ref[field] if ref and s[field] is not None and ref[field] else None

    # The table.
    print()
    print(f"{'':2}{'translation unit':<40}{'seconds':>8}{'min-max':>12}{'x b':>6}{'cpu s':>7}{'x b':>6}"
          f"{'peak MB':>8}{'x b':>6}{'tree MB':>8}{'obj KB':>7}  {'prep':>5}{'cudafe':>7}{'cicc':>6}{'ptxas':>6}"
          f"{'host cc':>8}")
    for s, row in zip(summary, rows):
        if not s["compiled"]:
            print(f"{s['row']:<2}{row[4]:<40}  FAILED to compile")
            continue
        span = f"{s['wall_s_min']:.1f}-{s['wall_s_max']:.1f}"
        print(f"{s['row']:<2}{row[4]:<40}{s['wall_s_median']:8.1f}{span:>12}{fmt(s['wall_vs_thrust'], '6.2f')}"
              f"{s['cpu_s_median']:7.1f}{fmt(s['cpu_vs_thrust'], '6.2f')}{s['peak_rss_mb_median']:8.0f}"
              f"{fmt(s['peak_vs_thrust'], '6.2f')}{s['tree_rss_mb_median']:8.0f}{s['object_bytes'] / 1024:7.0f}  "
              f"{fmt(s['prep_s'], '5.1f')}{fmt(s['cudafe_s'], '7.1f')}{fmt(s['cicc_s'], '6.1f')}"
              f"{fmt(s['ptxas_s'], '6.2f')}{fmt(s['host_cc_s'], '8.1f')}")
    loads = [r["load1"] for r in runs]
    print(f"medians of {args.reps}; x b: against row b (one Thrust sort), in this run; cpu s: user + sys of"
          f" the compiler's processes; phases: nvcc --time (s); load (1 min, before each compile, this script's"
          f" own previous compile included) {min(loads):.2f} to {max(loads):.2f}")
    if args.quick:
        print("quick mode: one compile each, alongside whatever else runs; the figures are indicative,"
              " and the test passes iff every TU compiled")

    if args.csv or not args.quick:
        path = args.csv or default_csv_path()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
                "nvcc": tool_version(args.nvcc), "cxx": tool_version(args.cxx) if "e" in args.rows else ""}
        fields = ["date", "row", "name", "tu", "compiler", "reps", "compiled", "wall_s_median", "wall_s_min",
                  "wall_s_max", "wall_vs_thrust", "cpu_s_median", "cpu_vs_thrust", "peak_rss_mb_median", "peak_vs_thrust", "tree_rss_mb_median",
                  "object_bytes", "object_vs_thrust", *[n for n, _ in PHASES], "load1_min", "load1_max", "cores",
                  "nvcc", "cxx"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            for s in summary:
                w.writerow({**meta, **{k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in s.items()}})
        runs_path = os.path.splitext(path)[0] + "-runs.csv"
        with open(runs_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(runs[0].keys()))
            w.writeheader()
            for r in runs:
                w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})
        print(f"wrote {path} and {runs_path}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print(f"compile_time: FAILED to compile: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
