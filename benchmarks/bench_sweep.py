"""Sweep wall time: the plumbing experiment x N seeds one after another, in lanes, and on a local Ray.

Runs ``experiments/cpu/plumbing.yaml`` (scripted greedy policy, threshold engineer, no model) for seeds
0..N-1 three times, into temporary folders: once one after another in this process (``--lanes 1``), once
in lanes (``envengineer run --seeds``'s default: one ``envengineer run`` subprocess per core at a time,
each on one thread), once with ``--executor ray`` (every run one Ray task running ``envengineer run`` in a
subprocess, as many at once as the machine has CPUs). Prints:

* the wall time of each sweep and their ratios to the one-after-another sweep,
* what starting the local Ray took inside the Ray sweep, and a bare ``ray.init`` + ``ray.shutdown``,
* whether the sweeps' run directories are equal (ledger stages, every data file, the scores),
* the load average before the start (other jobs on the cores make both sweeps slower).

``--samples`` sizes the training data per round (the part of a plumbing run that takes time: generating
and solving instances), so that runs are long enough for their overlap to pay for starting Ray.

Usage::

    python benchmarks/bench_sweep.py                       # 4 seeds, 2,000 instances per round
    python benchmarks/bench_sweep.py --seeds 8 --samples 500 --json bench_sweep.json
    python benchmarks/bench_sweep.py --lanes 2 --no-ray                # without Ray
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from envengineer.loop.rundir import RunDir
from envengineer.machine import usable_cpus
from envengineer.sweep import LanesExecutor, RayExecutor, SequentialExecutor, file_tasks, run_sweep

ROOT = Path(__file__).resolve().parents[1]
PLUMBING = ROOT / "experiments" / "cpu" / "plumbing.yaml"
TIMED = {"eval_info.json", "decision.json", "ledger.jsonl", "sweep.log", "sweep.status.json", ".sweep.lock"}


def same_runs(a: Path, b: Path) -> bool:
    """Equal ledger stages and equal files apart from those holding wall-clock times."""
    if [(e.round, e.stage) for e in RunDir(a).entries()] != [(e.round, e.stage) for e in RunDir(b).entries()]:
        return False
    files = [{p.relative_to(d) for p in d.rglob("*") if p.is_file() and p.name not in TIMED} for d in (a, b)]
    return files[0] == files[1] and all((a / f).read_bytes() == (b / f).read_bytes() for f in files[0])


def sweep_seconds(executor: object, out: Path, seeds: int, sets: list[str]) -> tuple[float, list[Path]]:
    tasks = file_tasks(PLUMBING, list(range(seeds)), out, name="bench", sets=sets, report=False)
    with open(os.devnull, "w") as quiet:
        t0 = time.perf_counter()
        run_sweep(tasks, executor, stream=quiet)  # type: ignore[arg-type]
        return time.perf_counter() - t0, [t.run_dir for t in tasks]


def bare_ray_start(num_cpus: int) -> float:
    import ray

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             logging_level="warning")  # fmt: skip
    ray.shutdown()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="runs per sweep (seeds 0..N-1)")
    ap.add_argument("--samples", type=int, default=2000, help="training instances per round")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the local Ray")
    ap.add_argument("--lanes", type=int, default=None, help="runs at once in lanes (default: one per core)")
    ap.add_argument("--no-ray", action="store_true", help="measure no Ray sweep")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    sets = [f"samples_per_round={args.samples}"]
    lanes = args.lanes or max(1, min(args.seeds, usable_cpus()))
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        seq, seq_dirs = sweep_seconds(SequentialExecutor(), Path(tmp) / "seq", args.seeds, sets)
        lane_executor = LanesExecutor(lanes, poll_s=0.5)
        lane_s, lane_dirs = sweep_seconds(lane_executor, Path(tmp) / "lanes", args.seeds, sets)
        equal = all(same_runs(a, b) for a, b in zip(seq_dirs, lane_dirs, strict=True))
        if not args.no_ray:
            ray_executor = RayExecutor(num_cpus=args.cpus, poll_s=0.5)
            par, ray_dirs = sweep_seconds(ray_executor, Path(tmp) / "ray", args.seeds, sets)
            equal = equal and all(same_runs(a, b) for a, b in zip(seq_dirs, ray_dirs, strict=True))
    figures = {
        "seeds": args.seeds,
        "samples_per_round": args.samples,
        "cpus": args.cpus,
        "load_average_before": round(load, 2),
        "sequential_s": round(seq, 2),
        "lanes": lanes,
        "lane_threads": lane_executor.threads,
        "lanes_s": round(lane_s, 2),
        "lanes_ratio": round(lane_s / seq, 3),
        "run_dirs_equal": equal,
    }
    print(f"plumbing x {args.seeds} seeds, {args.samples} instances per round, {args.cpus} CPUs "
          f"(load average {load:.2f} before)")  # fmt: skip
    print(f"  one after another:   {seq:.1f} s")
    print(f"  {lane_executor.label}: {lane_s:.1f} s  ({lane_s / seq:.2f} x one after another)")
    if not args.no_ray:
        bare = bare_ray_start(args.cpus)
        figures.update(
            ray_s=round(par, 2),
            ratio=round(par / seq, 3),
            ray_start_in_sweep_s=round(ray_executor.start_seconds, 2),
            ray_bare_init_shutdown_s=round(bare, 2),
        )
        print(f"  ray executor:        {par:.1f} s  ({par / seq:.2f} x one after another)")
        print(
            f"  starting local Ray:  {ray_executor.start_seconds:.1f} s in the sweep; "
            f"bare init + shutdown {bare:.1f} s"
        )
    print(f"  run directories equal (ledger stages, data files, scores): {'yes' if equal else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
