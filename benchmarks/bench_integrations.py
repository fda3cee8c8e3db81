"""Speed of the integrations: Gymnasium environment steps per second, `envengineer export` of the benchmark.

* **Environment steps.** ``MapfFrozenLakeEnv`` on benchmark cells, stepped with uniformly random joint
  actions (most such episodes end within a few steps by a rule break, so resets are frequent: the
  figure includes them) and with the optimal plans played step by step (long episodes, one reset per
  plan). One process, one core.
* **Export.** ``envengineer export benchmark -o OUT.parquet`` (and ``--format verl``) for the 3,150
  instances, run as a command in a fresh process: the wall time includes Python's start-up and imports.

Usage::

    python benchmarks/bench_integrations.py --steps 20000 --repeat 3

Prints the best, median and worst of ``--repeat`` passes and the load average; on a machine whose cores
are shared quote the median with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from envengineer.integrations.gym_env import MapfFrozenLakeEnv, benchmark_cell, play_plan
from envengineer.mapf.policies import optimal_plan

CELLS = ((3, 5), (4, 8), (5, 10))


def random_steps(cell: tuple[int, int], steps: int, seed: int) -> tuple[float, int]:
    """Steps per second (CPU time) with random joint actions; returns (rate, episodes)."""
    env = MapfFrozenLakeEnv(benchmark_cell(*cell))
    env.action_space.seed(seed)
    env.reset(seed=seed)
    episodes = 1
    t0 = time.process_time()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
            episodes += 1
    return steps / (time.process_time() - t0), episodes


def optimal_steps(cell: tuple[int, int]) -> float:
    """Steps per second (CPU time) playing every optimal plan of the cell (plans computed beforehand)."""
    instances = benchmark_cell(*cell)
    env = MapfFrozenLakeEnv(instances)
    rng = np.random.default_rng(0)
    plans = [(inst.id, optimal_plan(inst, rng)) for inst in instances]
    total = sum(max(len(p) for p in plan) for _, plan in plans)
    t0 = time.process_time()
    for iid, plan in plans:
        play_plan(env, plan, instance=iid)
    return total / (time.process_time() - t0)


def export_seconds(fmt: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.parquet"
        cmd = [sys.executable, "-m", "envengineer.cli", "export", "benchmark", "--format", fmt]
        cmd += ["-o", str(out)]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0


def _line(name: str, values: list[float], unit: str) -> str:
    values = sorted(values)
    return (
        f"{name:<44} median {statistics.median(values):>10,.0f} {unit}  "
        f"(best {values[-1]:,.0f}, worst {values[0]:,.0f})"
        if unit == "steps/s"
        else f"{name:<44} median {statistics.median(values):>6.2f} {unit}  (best {values[0]:.2f}, "
        f"worst {values[-1]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000, help="random steps per cell and pass")
    parser.add_argument("--repeat", type=int, default=3, help="passes (default 3)")
    args = parser.parse_args()

    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for cell in CELLS:
        rates = [random_steps(cell, args.steps, seed) for seed in range(args.repeat)]
        name = f"random actions, {cell[0]} agents {cell[1]}x{cell[1]}"
        print(_line(name, [r for r, _ in rates], "steps/s"), f"[{rates[0][1]:,} episodes]")
        print(_line(f"optimal plans, {cell[0]} agents {cell[1]}x{cell[1]}",
                    [optimal_steps(cell) for _ in range(args.repeat)], "steps/s"))  # fmt: skip
    for fmt in ("hf", "verl"):
        times = [export_seconds(fmt) for _ in range(args.repeat)]
        print(_line(f"envengineer export benchmark --format {fmt}", times, "s wall"))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
