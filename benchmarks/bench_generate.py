"""Generation speed: a 4,000-instance two-agent round, and the whole benchmark, in worker processes.

python benchmarks/bench_generate.py round --workers 1   # 4,000 instances, sizes 3-10 equal, holes 0.3,
python benchmarks/bench_generate.py round --workers 2   # waits 0.5: in this process, or in 2 workers
python benchmarks/bench_generate.py benchmark            # the 3,150-instance benchmark, 2 worker processes
python benchmarks/bench_generate.py warm-start --workers 2  # the demo's warm-start boards and SFT targets
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envengineer.machine import usable_cpus


def bench_round(samples: int, seed: int, workers: int) -> None:
    from envengineer.mapf.config import RoundConfig
    from envengineer.mapf.generator import generate_round

    sizes = {n: {"data_ratio": 1, "hole_ratio": 0.3, "wait_ratio": 0.5} for n in range(3, 11)}
    config = RoundConfig.model_validate({"num_samples": samples, "num_agents": 2, "sizes": sizes})
    t0, c0 = time.perf_counter(), time.process_time()
    instances = generate_round(config, seed, workers=workers)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    waits = sum(bool(i.needs_wait) for i in instances)
    print(f"round: {len(instances)} two-agent instances ({waits} need a wait), sizes 3-10 equal, holes 0.3")
    where = "in this process" if workers <= 1 else f"with {workers} worker processes"
    print(
        f"  wall {wall:.2f} s {where} ({1000 * wall / len(instances):.2f} ms per instance); "
        f"CPU of this process {cpu:.2f} s"
    )


def bench_warm_start(workers: int) -> None:
    """Boards of the demo's warm-start settings, a round per agent count as its stage draws them, then their
    SFT targets."""
    from envengineer.loop.demo import demo_experiment
    from envengineer.loop.stages.warm_start import round_configs
    from envengineer.mapf.generator import generate_round
    from envengineer.mapf.solver import MEMO
    from envengineer.training.dataset import target_response

    demo = demo_experiment()
    t0 = time.perf_counter()
    instances = []
    for k, config in enumerate(round_configs(demo.warm_start, (), demo.num_agents)):
        instances += generate_round(config, 1_000 + k, workers=workers)
    t1 = time.perf_counter()
    for inst in instances:
        target_response(inst, "solver_free")
    t2 = time.perf_counter()
    print(
        f"warm-start: {len(instances)} instances generated in {t1 - t0:.1f} s wall "
        f"({'this process' if workers <= 1 else f'{workers} worker processes'}), their solver_free targets "
        f"in {t2 - t1:.1f} s ({MEMO.hits} of them read from the solver's memo)"
    )


def bench_benchmark(workers: int) -> None:
    from envengineer.mapf.benchmark import BENCHMARK_SHA256, build_benchmark, sha256_file
    from envengineer.mapf.instance import save_instances
    from envengineer.mapf.solver import MEMO, solve_instance

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
    MEMO.clear()  # time the searches, not the memo of boards solved in this process
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
    parser.add_argument("what", choices=("round", "benchmark", "warm-start"))
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=min(2, usable_cpus()))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.what == "round":
        bench_round(args.samples, args.seed, args.workers)
    elif args.what == "warm-start":
        bench_warm_start(args.workers)
    else:
        bench_benchmark(args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
