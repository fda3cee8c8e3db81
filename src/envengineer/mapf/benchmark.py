"""The fixed 3,150-instance benchmark and the validation set (SPEC §4).

Shape: 3, 4 and 5 agents; sizes from ``k x k`` to ``10 x 10`` for ``k`` agents (8 + 7 + 6 = 21 cells);
three wait-ratio subsets ``wr_025``, ``wr_050``, ``wr_075``; 50 instances per cell and subset. The hole
ratio of each instance is uniform in [0, 0.5]. Within a cell the ``wr_XXX`` subset holds exactly
``round_lr(50 * XXX / 100)`` instances that need a wait (largest remainder: 13, 25 and 38 of 50).

The benchmark ships with the package (``envengineer/data/benchmark.jsonl``); its SHA-256 is
:data:`BENCHMARK_SHA256` and a test rebuilds it byte for byte. The validation set has the same shape,
its own seed and split, fewer instances per cell, and no board in common with the benchmark.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from functools import partial
from importlib import resources
from pathlib import Path

import numpy as np

from envengineer.errors import InstanceFormatError
from envengineer.machine import in_workers
from envengineer.mapf.generator import counts_for, generate_cell
from envengineer.mapf.instance import Instance, load_instances

log = logging.getLogger(__name__)

BENCHMARK_SEED = 2606_17682
VALIDATION_SEED = 2606_17683
AGENTS: tuple[int, ...] = (3, 4, 5)
MAX_SIZE = 10
SUBSETS: dict[str, float] = {"wr_025": 0.25, "wr_050": 0.50, "wr_075": 0.75}
PER_CELL = 50
VALIDATION_PER_CELL = 4

#: SHA-256 of the packaged ``benchmark.jsonl`` (also in docs/testbed.md).
BENCHMARK_SHA256 = "2cb56073dd210b729c7bee43f3a96563ac3d59611dd7d40956b62c4ad475b277"


def cells(
    agents: Sequence[int] = AGENTS, max_size: int = MAX_SIZE, min_size: int | None = None
) -> list[tuple[int, int]]:
    """The (agents, size) cells of the benchmark shape: sizes ``k..max_size`` for ``k`` agents.

    ``min_size`` raises the smallest size (e.g. 3 drops the 2x2 boards of two agents).

    >>> len(cells()), cells((2,), 4, min_size=3)
    (21, [(2, 3), (2, 4)])
    """
    return [(k, n) for k in agents for n in range(max(k, min_size or k), max_size + 1)]


def _build_cell(
    cell: tuple[int, int], *, seed: int, split: str, per_cell: int, exclude: frozenset[str]
) -> list[Instance]:
    k, n = cell
    out: list[Instance] = []
    taken = set(exclude)
    for stream, (name, ratio) in enumerate(SUBSETS.items()):
        batch = generate_cell(
            num_agents=k,
            size=n,
            count=per_cell,
            wait_count=counts_for(per_cell, ratio) if k > 1 else 0,  # one agent has no one to wait for
            seed=seed,
            split=split,
            hole_ratio=None,
            stream=stream,
            id_prefix=f"{k}agents_{n}x{n}_{name.replace('_', '')}",
            exclude=taken,
            unique=True,
            meta={"subset": name},
        )
        taken.update(inst.board_hash() for inst in batch)
        out.extend(batch)
    return out


def build_set(
    *,
    seed: int,
    split: str,
    per_cell: int,
    agents: Sequence[int] = AGENTS,
    max_size: int = MAX_SIZE,
    min_size: int | None = None,
    exclude: Iterable[str] = (),
    workers: int | None = None,
    progress: bool = False,
) -> list[Instance]:
    """Build a benchmark-shaped set, cells in parallel processes; ``workers`` does not change the result."""
    todo = cells(agents, max_size, min_size)
    job = partial(_build_cell, seed=seed, split=split, per_cell=per_cell, exclude=frozenset(exclude))
    workers = workers if workers is not None else min(2, len(todo))
    if workers <= 1:
        results: Iterable[list[Instance]] = map(job, todo)
    else:
        results = in_workers(job, todo, workers, [k * n for k, n in todo])
    out: list[Instance] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"building {split}", unit="cell")
    for batch in results:
        out.extend(batch)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def build_benchmark(*, workers: int | None = None, progress: bool = False) -> list[Instance]:
    """The 3,150-instance benchmark, exactly as shipped."""
    return build_set(
        seed=BENCHMARK_SEED, split="benchmark", per_cell=PER_CELL, workers=workers, progress=progress
    )


def build_validation_set(
    per_cell: int = VALIDATION_PER_CELL,
    *,
    seed: int = VALIDATION_SEED,
    agents: Sequence[int] = AGENTS,
    max_size: int = MAX_SIZE,
    min_size: int | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> list[Instance]:
    """A validation set of the benchmark's shape (``per_cell`` per cell and subset), disjoint from it."""
    exclude = {inst.board_hash() for inst in load_benchmark()}
    return build_set(
        seed=seed,
        split="validation",
        per_cell=per_cell,
        agents=agents,
        max_size=max_size,
        min_size=min_size,
        exclude=exclude,
        workers=workers,
        progress=progress,
    )


def benchmark_path() -> Path:
    return Path(str(resources.files("envengineer") / "data" / "benchmark.jsonl"))


def load_benchmark() -> list[Instance]:
    """The packaged benchmark (3,150 instances)."""
    path = benchmark_path()
    if not path.exists():
        raise InstanceFormatError(
            f"{path} is missing; rebuild it with `envengineer benchmark build -o {path}`"
        )
    return load_instances(path)


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- subsets ----------------------------------------------------------------------------------------------
#: Seed of :func:`draw_subset`: the same subset of the packaged benchmark in every run, so runs compare.
SUBSET_SEED = 0x5B5E7


def _stratum_key(inst: Instance) -> tuple[int, int, str]:
    return (inst.num_agents, inst.size, str(inst.meta.get("subset", "")))


def draw_subset(
    instances: Sequence[Instance],
    *,
    per_cell: int | None = None,
    limit: int | None = None,
    seed: int = SUBSET_SEED,
) -> list[Instance]:
    """A seeded, stratified subset that keeps every cell's share of instances that need a wait.

    Instances are grouped into cells (agents, size, wait subset) and, inside a cell, into the instances
    that need a wait and those that do not. Then:

    1. ``per_cell`` keeps at most that many instances per cell;
    2. ``limit`` spreads that many over the (agents, size) cells as evenly as their sizes allow, and
       inside each over its wait subsets, the cell that gets one more chosen by the seed;
    3. inside each cell the number that need a wait is the cell's share of the chosen count, rounded
       up or down by systematic rounding over all cells (one seeded offset), so every cell is within
       one instance of its share and so is the whole subset;
    4. which instances of a stratum are kept is a seeded draw; the result keeps the input order.

    The same arguments give the same subset; a set without wait subsets (``meta["subset"]``) is one
    subset per (agents, size). ``per_cell=None`` and ``limit=None`` keep everything.

    >>> from envengineer.mapf.instance import Instance
    >>> g = ("...", "...", "...")
    >>> cell = [Instance(f"i{k}", g, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6 if k < 2 else 4,
    ...                  shortest_sum=4, meta={"subset": "wr_050"}) for k in range(4)]
    >>> sorted(i.needs_wait for i in draw_subset(cell, limit=2))
    [False, True]
    """
    for name, value in (("per_cell", per_cell), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InstanceFormatError(f"{name} must be an int >= 0 or None, got {value!r}")
    groups: dict[tuple[int, int, str], list[int]] = {}
    for idx, inst in enumerate(instances):
        groups.setdefault(_stratum_key(inst), []).append(idx)
    keys = sorted(groups)
    quota = {k: len(groups[k]) if per_cell is None else min(per_cell, len(groups[k])) for k in keys}
    rng = np.random.default_rng(np.random.SeedSequence((seed, 0xCE11)))
    if limit is not None and limit < sum(quota.values()):
        quota = _spread(quota, limit, rng)
    # needs-wait counts: each cell's expected share, rounded systematically with one offset
    offset = float(rng.uniform())
    cumulative, taken = offset, 0
    chosen: list[int] = []
    for k in keys:
        members = groups[k]
        waiting = [i for i in members if instances[i].needs_wait]
        others = [i for i in members if not instances[i].needs_wait]
        q = quota[k]
        cumulative += q * len(waiting) / len(members)
        w = int(cumulative) - taken
        w = min(max(w, q - len(others)), len(waiting), q)
        taken += w
        for part, count in ((waiting, w), (others, q - w)):
            if count:
                pick = np.random.default_rng(np.random.SeedSequence((seed, *_key_ints(k), len(part))))
                chosen.extend(part[j] for j in pick.choice(len(part), size=count, replace=False).tolist())
    return [instances[i] for i in sorted(chosen)]


def _spread(
    quota: dict[tuple[int, int, str], int], limit: int, rng: np.random.Generator
) -> dict[tuple[int, int, str], int]:
    """Share ``limit`` over (agents, size) cells, then over each cell's subsets, as evenly as caps allow.

    The cells that get one more are drawn by the seed; inside the cells the subsets that get one more
    take turns (a rotation carried from cell to cell), so a small limit still covers every subset evenly.
    """
    cells: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for k in quota:
        cells.setdefault(k[:2], []).append(k)
    cell_caps = {c: sum(quota[k] for k in ks) for c, ks in cells.items()}
    per_cell, _ = _even_split(list(cells), cell_caps, limit, int(rng.integers(1 << 30)))
    out: dict[tuple[int, int, str], int] = {}
    turn = int(rng.integers(1 << 30))
    for c, ks in cells.items():
        got, turn = _even_split(ks, quota, per_cell[c], turn)
        out.update(got)
    return out


def _even_split(keys: list, caps: dict, total: int, turn: int) -> tuple[dict, int]:
    """``total`` split over ``keys`` as evenly as ``caps`` allow.

    A remainder goes to keys spread evenly around the list from position ``turn``; the turn moves on by
    the remainder, so successive calls rotate.
    """
    out = dict.fromkeys(keys, 0)
    left = total
    open_keys = [k for k in keys if caps[k] > 0]
    while left > 0 and open_keys:
        share, rest = divmod(left, len(open_keys))
        lucky = {(turn + j * len(open_keys) // rest) % len(open_keys) for j in range(rest)}
        if rest:
            turn += rest
        for i, k in enumerate(open_keys):
            add = min(share + (i in lucky), caps[k] - out[k])
            out[k] += add
            left -= add
        open_keys = [k for k in open_keys if out[k] < caps[k]]
    return out, turn


def _key_ints(key: tuple[int, int, str]) -> tuple[int, ...]:
    return (key[0], key[1], *key[2].encode("utf-8"))
