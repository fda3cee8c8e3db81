"""Generation speed: a 4,000-instance two-agent round, and the whole benchmark, in worker processes.

python benchmarks/bench_generate.py round --workers 1   # 4,000 instances, sizes 3-10 equal, holes 0.3,
python benchmarks/bench_generate.py round --workers 2   # waits 0.5: in this process, or in 2 workers
python benchmarks/bench_generate.py benchmark            # the 3,150-instance benchmark v2, 2 worker processes
python benchmarks/bench_generate.py benchmark --version v1  # the same for v1
python benchmarks/bench_generate.py versions             # what v2 changes: the draws v1 drops that v2 keeps
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


def bench_benchmark(workers: int, version: str) -> None:
    from envengineer.errors import SolverBudgetExceeded
    from envengineer.mapf import benchmark as bm
    from envengineer.mapf.instance import save_instances
    from envengineer.mapf.solver import MEMO, solve_instance

    v = bm.benchmark_version(version)
    plans: dict = {}
    t0, c0 = time.perf_counter(), time.process_time()
    instances = bm.build_benchmark(version=v.name, workers=workers, plans=plans)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as tmp:
        path = save_instances(instances, Path(tmp) / v.file)
        digest = bm.sha256_file(path)
        plans_digest = bm.sha256_file(bm.save_plans(plans, instances, Path(tmp) / "plans.jsonl"))
    same = digest == v.sha256 and (v.plans_sha256 is None or plans_digest == v.plans_sha256)
    print(
        f"benchmark {v.name}: {len(instances)} instances in {wall:.1f} s wall with {workers} workers "
        f"(CPU of this process {cpu:.1f} s; sha256 {digest[:16]}..., "
        f"{'matches' if same else 'DIFFERS FROM'} the packaged files); {len(plans)} kept boards are beyond "
        "the solver's default budget"
    )
    hardest = [i for i in instances if i.num_agents == 5 and i.size == 10]
    MEMO.clear()  # time the searches, not the memo of boards solved in this process
    times, over = [], 0
    for inst in hardest:
        t = time.perf_counter()
        try:
            solve_instance(inst)
        except SolverBudgetExceeded:
            over += 1
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    print(
        f"solver on the hardest cell (5 agents, 10x10, {len(times)} instances): "
        f"median {statistics.median(times):.1f} ms, "
        f"p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms, worst {times[-1]:.1f} ms, "
        f"{over} over the default budget"
    )


def bench_versions() -> None:
    """v1's build in this process, counting the draws it drops for the solver's budget, against the
    packaged v2: the share of those draws that v2 keeps, and how many instances differ."""
    from envengineer.errors import SolverBudgetExceeded
    from envengineer.mapf import benchmark as bm
    from envengineer.mapf import generator as gen
    from envengineer.mapf.instance import board_hash

    dropped: list[str] = []
    draws = [0]
    real = gen.solve

    def counting(grid, starts, goals, **kw):
        draws[0] += 1
        try:
            return real(grid, starts, goals, **kw)
        except SolverBudgetExceeded:
            dropped.append(board_hash(grid, starts, goals))
            raise

    gen.solve = counting
    t0 = time.perf_counter()
    try:
        v1 = bm.build_benchmark(version="v1", workers=1)
    finally:
        gen.solve = real
    v2 = bm.load_benchmark("v2")
    assert [i.id for i in v1] == [i.id for i in v2]
    kept = {i.board_hash() for i in v2}
    v1_boards = {i.board_hash() for i in v1}
    revived = sum(h in kept for h in dropped)
    differ = sum(a.board_hash() != b.board_hash() for a, b in zip(v1, v2, strict=True))
    print(
        f"v1 build: {draws[0]} draws solved, {len(dropped)} dropped over the default budget "
        f"({100 * len(dropped) / draws[0]:.1f} %), {time.perf_counter() - t0:.1f} s in one process"
    )
    print(
        f"v2 keeps {revived} of those {len(dropped)} draws ({100 * revived / len(dropped):.1f} %); "
        f"{differ} of {len(v2)} instances differ from v1 ({100 * differ / len(v2):.1f} %), "
        f"{len(kept - v1_boards)} v2 boards are not in v1 at all"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("round", "benchmark", "versions", "warm-start"))
    parser.add_argument("--version", default="v2", help="benchmark version to build (v1 or v2)")
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=min(2, usable_cpus()))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.what == "round":
        bench_round(args.samples, args.seed, args.workers)
    elif args.what == "warm-start":
        bench_warm_start(args.workers)
    elif args.what == "versions":
        bench_versions()
    else:
        bench_benchmark(args.workers, args.version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
