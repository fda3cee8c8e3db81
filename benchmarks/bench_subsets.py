"""The scripted greedy policy on the former (file-order) and the drawn benchmark subsets.

Usage: ``python benchmarks/bench_subsets.py``. Prints, per subset, how many instances need a wait and the
greedy policy's valid % (Sum over sizes per agent count). The former subsets took the first instances of
each cell, which are the ones that need a wait; the figures are in docs/loop.md ("Subsets").
"""

from __future__ import annotations

import numpy as np

from envengineer.cli.testbed import _id_entropy
from envengineer.mapf.benchmark import draw_subset, load_benchmark
from envengineer.mapf.instance import Instance
from envengineer.mapf.policies import respond
from envengineer.mapf.scoring import score


def former_per_cell(instances: list[Instance], per_cell: int) -> list[Instance]:
    """The former ``benchmark_per_cell``: the first instances of each (agents, size, subset) cell."""
    seen: dict[tuple, int] = {}
    out = []
    for inst in instances:
        key = (inst.num_agents, inst.size, inst.meta.get("subset", ""))
        if seen.get(key, 0) < per_cell:
            seen[key] = seen.get(key, 0) + 1
            out.append(inst)
    return out


def line(name: str, instances: list[Instance]) -> str:
    # the seeding of `envengineer play --policy greedy --seed 0`, so the full line matches the README
    responses = {
        i.id: respond("greedy", i, np.random.default_rng(np.random.SeedSequence((0, *_id_entropy(i.id)))))
        for i in instances
    }
    report = score(instances, responses)
    table = report.table()
    sums = " / ".join(f"{table[a]['sum']['valid']:.2f}" for a in table)
    waiting = sum(i.needs_wait for i in instances)
    return f"{name:<36} n={len(instances):<5} need a wait {waiting:<5} greedy valid Sum (3/4/5 agents) {sums}"


def main() -> None:
    bench = load_benchmark()
    print(line("full benchmark", bench))
    print(line("former benchmark_per_cell: 1", former_per_cell(bench, 1)))
    print(line("drawn benchmark_per_cell: 1", draw_subset(bench, per_cell=1)))
    print(line("drawn benchmark_limit: 21", draw_subset(bench, limit=21)))
    print(line("drawn eval --limit 63", draw_subset(bench, limit=63)))


if __name__ == "__main__":
    main()
