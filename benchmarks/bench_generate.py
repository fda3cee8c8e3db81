"""Generation speed: a 4,000-instance two-agent round on one core, and the whole benchmark on all cores.

python benchmarks/bench_generate.py round        # 4,000 instances, sizes 3-10 equal, holes 0.3, waits 0.5
python benchmarks/bench_generate.py benchmark    # the 3,150-instance benchmark, 2 worker processes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bench_round(samples: int, seed: int) -> None:
    from envengineer.mapf.config import RoundConfig
    from envengineer.mapf.generator import generate_round

    sizes = {n: {"data_ratio": 1, "hole_ratio": 0.3, "wait_ratio": 0.5} for n in range(3, 11)}
    config = RoundConfig.model_validate({"num_samples": samples, "num_agents": 2, "sizes": sizes})
    t0, c0 = time.perf_counter(), time.process_time()
    instances = generate_round(config, seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    waits = sum(bool(i.needs_wait) for i in instances)
    print(f"round: {len(instances)} two-agent instances ({waits} need a wait), sizes 3-10 equal, holes 0.3")
    print(
        f"  wall {wall:.2f} s, CPU {cpu:.2f} s on one core "
        f"({1000 * cpu / len(instances):.2f} ms CPU per instance)"
    )


def bench_benchmark(workers: int) -> None:
    from envengineer.mapf.benchmark import BENCHMARK_SHA256, build_benchmark, sha256_file
    from envengineer.mapf.instance import save_instances
    from envengineer.mapf.solver import solve_instance

    t0 = time.perf_counter()
    instances = build_benchmark(workers=workers)
    wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = save_instances(instances, Path(tmp) / "benchmark.jsonl")
        digest = sha256_file(path)
    print(
        f"benchmark: {len(instances)} instances in {wall:.1f} s wall with {workers} workers "
        f"(sha256 {digest[:16]}..., "
        f"{'matches' if digest == BENCHMARK_SHA256 else 'DIFFERS FROM'} the packaged hash)"
    )
    hardest = [i for i in instances if i.num_agents == 5 and i.size == 10]
    times = []
    for inst in hardest:
        t = time.perf_counter()
        solve_instance(inst)
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    print(
        f"solver on the hardest cell (5 agents, 10x10, {len(times)} instances): "
        f"median {statistics.median(times):.1f} ms, "
        f"p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms, worst {times[-1]:.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("round", "benchmark"))
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.what == "round":
        bench_round(args.samples, args.seed)
    else:
        bench_benchmark(args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
