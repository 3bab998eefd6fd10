"""Benchmark: the whole default study idle and beside busy processes, its CPU time and wall time.

Runs ``attnwh study`` (no options: the bundled MiniLM, the sample sentiment task, 1000 train
examples, 3 epochs, 200 eval examples, 100 for the ablation sweep) into a fresh warehouse and
model folder each time, as a child process, in turns:

- idle: the study alone (whatever else the machine runs stays running: see the load average
  printed beside each run);
- loaded: the same beside --busy processes that each keep a core busy from before the study
  starts until it ends (``--load python``: a pure-Python loop; ``--load numpy``: a loop of
  512×512 matrix products on one thread), each in its own session, as other users' jobs are.

The CPU time is user + system time of the study's process and its children
(``getrusage(RUSAGE_CHILDREN)``), which a busy machine inflates only by what the study wastes,
not by its waiting. With --runtime, every repeat also runs both under
``ATTNWH_THREADING=runtime`` (the OpenMP runtime's own spin-waiting, as attnwh ran before it
shortened the spin: `attnwh.ingest.runs.threads`), so before and after are in the same run.

The variants take turns and the order flips every repeat (A B C D, D C B A, …). Prints every
run (wall, CPU, the fine-tuning's seconds, the load average when it started), then per
variant the median and range, and the ratios within each repeat, loaded to idle and each
variant to attnwh's idle run: median [min, max]. Usage: ``python bench/contention.py
[--repeats 5] [--runtime] [--quick]``; --quick (or --study-args) for a smaller study while
developing. The default study takes minutes on 2 cores, so 5 repeats of 4 variants take hours.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATTNWH = [sys.executable, "-m", "attnwh"]
BUSY = {
    "python": "while True: pass",
    "numpy": "import numpy as np\na = np.random.default_rng(0).random((512, 512))\nwhile True: a @ a",
}
# A smaller study with every stage, for trying things out.
QUICK = "--max-train-examples 320 --epochs 1 --limit 100 --ablation-limit 40 --resamples 200"
# The variables of attnwh's threading policy, and those a user may have set for the runtime.
SWITCH = "ATTNWH_THREADING"
USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", SWITCH)


def start_busy(n: int, load: str) -> list[subprocess.Popen]:
    # One thread each (numpy's BLAS would otherwise start a pool of its own).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return [
        subprocess.Popen([sys.executable, "-c", BUSY[load]], env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.kill()
    for p in processes:
        p.wait()


def run_study(work: Path, study_args: list[str], env: dict[str, str], busy: int, load: str) -> dict[str, float]:
    """One study into a fresh folder: wall seconds, CPU seconds (user + system), the
    fine-tuning's seconds as the warehouse recorded them, and the 1-minute load average
    when it started."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    command = [*ATTNWH, "study", "--db", str(work / "w.duckdb"), "--out-dir", str(work / "models")]
    command += ["--report", str(work / "report.html"), *study_args]
    load_average = os.getloadavg()[0]
    busy_processes = start_busy(busy, load)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        stop(busy_processes)
    if done.returncode:
        raise SystemExit(f"failed: {shlex.join(command)}\n{done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "finetune": finetune_seconds(work / "w.duckdb"), "load": load_average}


def finetune_seconds(db: Path) -> float:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT sum(seconds) FROM runs WHERE kind = 'finetune'").fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):7.2f} [{ordered[0]:.2f}, {ordered[-1]:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each variant (default 5)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the loaded study (default 2)")
    parser.add_argument("--load", choices=sorted(BUSY), default="python", help="what each busy process runs")
    parser.add_argument(
        "--runtime", action="store_true", help=f"also run the study under {SWITCH}=runtime (the behaviour before)"
    )
    parser.add_argument("--quick", action="store_true", help=f"a smaller study: {QUICK}")
    parser.add_argument("--study-args", default="", help="more options for `attnwh study`, e.g. '--epochs 1'")
    args = parser.parse_args()

    study_args = shlex.split((QUICK + " " if args.quick else "") + args.study_args)
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    mine = {k: base_env.pop(k) for k in USER_KEYS if k in base_env}
    if mine:
        print(f"ignoring the environment's {mine}: each variant sets its own policy", file=sys.stderr)
    policies = {"attnwh": base_env} | ({"runtime": {**base_env, SWITCH: "runtime"}} if args.runtime else {})
    variants = [(policy, busy) for policy in policies for busy in (0, args.busy)]

    def name(policy: str, busy: int) -> str:
        return f"{policy}, {'idle' if not busy else f'{busy} busy ({args.load})'}"

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    settings = shlex.join(study_args) or "(defaults)"
    print(f"attnwh study {settings}: {args.repeats} repeats of {len(variants)} variants; {cpus} CPUs")
    # Warm the file cache (torch, transformers, the model) so that the first run is not slower.
    subprocess.run([*ATTNWH, "study", "--help"], env=base_env, stdout=subprocess.DEVNULL, check=True)
    subprocess.run([sys.executable, "-c", "import torch, transformers, attnwh.ingest.runs.loop"], check=True)
    results: dict[tuple[str, int], list[dict[str, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="attnwh-bench-contention-") as tmp:
        for repeat in range(args.repeats):
            for policy, busy in variants if repeat % 2 == 0 else list(reversed(variants)):
                r = run_study(Path(tmp) / "study", study_args, policies[policy], busy, args.load)
                results[(policy, busy)].append(r)
                print(
                    f"  repeat {repeat + 1}  {name(policy, busy):28s} wall {r['wall']:7.1f} s  CPU {r['cpu']:7.1f} s"
                    f"  (fine-tuning {r['finetune']:6.1f} s)  load average {r['load']:.1f}",
                    flush=True,
                )

    print(f"\n{'variant':30s} {'wall s: median [range]':>26s} {'CPU s: median [range]':>26s}")
    for (policy, busy), runs in results.items():
        print(
            f"{name(policy, busy):30s} {summary([r['wall'] for r in runs]):>26s}"
            f" {summary([r['cpu'] for r in runs]):>26s}"
        )
    baseline = results[("attnwh", 0)]
    print("\nratios within each repeat, median [min, max]:")
    for policy in policies:
        idle, loaded = results[(policy, 0)], results[(policy, args.busy)]
        for key in ("cpu", "wall"):
            ratios = [b[key] / a[key] for a, b in zip(idle, loaded, strict=True)]
            print(f"  {policy:8s} loaded / idle, {key:4s} {summary(ratios)}")
    if args.runtime:
        for variant in variants[2:]:
            for key in ("cpu", "wall"):
                ratios = [b[key] / a[key] for a, b in zip(baseline, results[variant], strict=True)]
                print(f"  {name(*variant):28s} / attnwh, idle, {key:4s} {summary(ratios)}")
    cpu = statistics.median(b["cpu"] / a["cpu"] for a, b in zip(baseline, results[("attnwh", args.busy)]))
    print(f"\nattnwh's CPU time loaded / idle: median {cpu:.2f} ({'within' if cpu <= 1.3 else 'over'} 1.3)")


if __name__ == "__main__":
    main()
