"""Benchmark and validation subsets keep the full set's wait share (issue 11, item 1).

A file-order prefix of the benchmark holds only instances that need a wait (the generator writes them
first in each cell), so every subset an experiment file, the README or the docs use is checked here: in
every (agents, size, subset) cell, every (agents, size) cell and in the whole subset, the number that
need a wait is within one instance of the full set's share.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from envengineer.errors import InstanceFormatError
from envengineer.evaluation import stratified_subset
from envengineer.loop.demo import DEMO, DEMO_SMOLLM2
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.sets import select_benchmark
from envengineer.mapf.benchmark import PER_CELL, SUBSETS, cells, draw_subset, load_benchmark
from envengineer.mapf.generator import counts_for
from envengineer.mapf.instance import Instance

ROOT = Path(__file__).resolve().parents[1]
GRID = ("...", "...", "...")


def shaped_set(per_cell: int, agents: Sequence[int] = (3, 4, 5), max_size: int = 10) -> list[Instance]:
    """A set of the benchmark's shape and file order (waiting instances first in each cell), boards fake."""
    out = []
    for k, n in cells(agents, max_size):
        for name, ratio in SUBSETS.items():
            w = counts_for(per_cell, ratio)
            for i in range(per_cell):
                out.append(
                    Instance(
                        f"{k}agents_{n}x{n}_{name.replace('_', '')}_{i:06d}",
                        tuple("." * n for _ in range(n)),
                        tuple((0, j) for j in range(k)),
                        tuple((n - 1, j) for j in range(k)),
                        optimal_soc=k * (n - 1) + (i < w),
                        shortest_sum=k * (n - 1),
                        meta={"subset": name},
                    )
                )
    return out


def assert_wait_share_kept(full: Sequence[Instance], subset: Sequence[Instance]) -> None:
    """In each (agents, size, subset) cell, each (agents, size) cell and overall: waits within one.

    The expected count of a cell is its chosen count times the full cell's share; coarser groups add up
    the expectations of their (agents, size, subset) cells.
    """

    def key3(i: Instance) -> tuple:
        return (i.num_agents, i.size, i.meta.get("subset"))

    total, waiting = Counter(map(key3, full)), Counter(key3(i) for i in full if i.needs_wait)
    got, got_wait = Counter(map(key3, subset)), Counter(key3(i) for i in subset if i.needs_wait)
    expected = {c: n * waiting[c] / total[c] for c, n in got.items()}
    for coarse in (lambda c: c, lambda c: c[:2], lambda c: ()):
        exp_sum: Counter = Counter()
        got_sum: Counter = Counter()
        for c in got:
            exp_sum[coarse(c)] += expected[c]
            got_sum[coarse(c)] += got_wait[c]
        for g in exp_sum:
            assert abs(got_sum[g] - exp_sum[g]) <= 1.0 + 1e-9, (g, got_sum[g], exp_sum[g])


def used_subsets() -> list[tuple[str, str, int | None, int | None, dict]]:
    """(where, which set, per_cell, limit, set shape) for every subset the project's files use."""
    found = []
    exps = [(p, load_experiment(p)) for p in sorted((ROOT / "experiments").rglob("*.yaml"))]
    exps.append((Path("DEMO"), Experiment.model_validate(DEMO)))
    exps.append((Path("DEMO_SMOLLM2"), Experiment.model_validate(DEMO_SMOLLM2)))
    for path, exp in exps:
        ev, v = exp.evaluation, exp.validation
        if ev.benchmark_per_cell is not None or ev.benchmark_limit is not None:
            found.append((str(path.name), "benchmark", ev.benchmark_per_cell, ev.benchmark_limit, {}))
        if v.limit is not None:
            shape = {"per_cell": v.per_cell, "agents": v.agents, "max_size": v.max_size}
            found.append((str(path.name), "validation", None, v.limit, shape))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"eval\b[^\n]*?--limit (\d+)", doc.read_text(encoding="utf-8")):
            found.append((doc.name, "benchmark", None, int(m.group(1)), {}))
    return found


USED = used_subsets()


def test_the_files_use_subsets() -> None:
    wheres = {w for w, *_ in USED}
    assert {"demo-smollm2.yaml", "_small.yaml", "README.md"} <= wheres
    assert any(limit == 63 for *_, limit, _ in USED)


@pytest.mark.parametrize(("where", "which", "per_cell", "limit", "shape"), USED, ids=lambda x: str(x))
def test_every_used_subset_keeps_the_wait_share(where, which, per_cell, limit, shape) -> None:
    full = shaped_set(PER_CELL) if which == "benchmark" else shaped_set(**shape)
    subset = draw_subset(full, per_cell=per_cell, limit=limit)
    expected = min(limit or len(full), len(draw_subset(full, per_cell=per_cell)))
    assert len(subset) == expected
    assert_wait_share_kept(full, subset)


def test_the_packaged_benchmark_subsets_are_representative() -> None:
    bench = load_benchmark()
    share = sum(i.needs_wait for i in bench) / len(bench)
    for per_cell, limit in ((1, None), (None, 21), (None, 63), (1, 21), (4, None), (None, 210)):
        subset = select_benchmark(bench, per_cell, limit)
        assert_wait_share_kept(bench, subset)
        waiting = sum(i.needs_wait for i in subset)
        assert abs(waiting - share * len(subset)) <= 1.0
        assert 0 < waiting < len(subset)  # a file-order prefix would be all waiting
    first = {}
    for i in bench:
        first.setdefault((i.num_agents, i.size, i.meta["subset"]), i)
    assert all(i.needs_wait for i in first.values())  # why the subsets are drawn, not cut


def test_limits_spread_over_cells_and_subsets() -> None:
    full = shaped_set(PER_CELL)
    for limit in (8, 21, 30, 63, 100):
        subset = draw_subset(full, limit=limit)
        per_cell = Counter((i.num_agents, i.size) for i in subset)
        counts = [per_cell.get(c, 0) for c in cells()]
        assert max(counts) - min(counts) <= 1, limit
        per_subset = Counter(i.meta["subset"] for i in subset)
        assert max(per_subset.values()) - min(per_subset.values()) <= 1, limit
    one = draw_subset(full, per_cell=1)
    assert Counter((i.num_agents, i.size, i.meta["subset"]) for i in one) == Counter(
        {(k, n, s): 1 for k, n in cells() for s in SUBSETS}
    )


def test_draws_are_seeded_and_keep_file_order() -> None:
    full = shaped_set(PER_CELL)
    a = draw_subset(full, limit=63)
    assert [i.id for i in a] == [i.id for i in draw_subset(full, limit=63)]
    assert [i.id for i in a] != [i.id for i in draw_subset(full, limit=63, seed=1)]
    position = {i.id: p for p, i in enumerate(full)}
    assert [position[i.id] for i in a] == sorted(position[i.id] for i in a)
    assert draw_subset(full) == full
    assert draw_subset(full, limit=len(full) + 5) == full
    assert draw_subset(full, limit=0) == []
    assert stratified_subset(full, 63) == a  # `eval --limit` draws the same way
    for bad in (-1, True, 2.5):
        with pytest.raises(InstanceFormatError, match="int >= 0"):
            draw_subset(full, limit=bad)  # type: ignore[arg-type]


def test_a_set_without_wait_subsets_is_stratified_by_cell_and_wait() -> None:
    full = [
        Instance(
            f"x{i}", GRID, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6 if i < 5 else 4, shortest_sum=4
        )
        for i in range(10)
    ]
    subset = draw_subset(full, limit=4)
    assert sum(i.needs_wait for i in subset) == 2
