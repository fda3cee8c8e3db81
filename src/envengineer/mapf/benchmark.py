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
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from importlib import resources
from pathlib import Path

from envengineer.errors import InstanceFormatError
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
            wait_count=counts_for(per_cell, ratio),
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
        results = map(job, todo)
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        # Large cells first keeps both workers busy to the end; results are re-ordered below.
        order = sorted(range(len(todo)), key=lambda i: -todo[i][0] * todo[i][1])
        futures = {i: pool.submit(job, todo[i]) for i in order}
        results = (futures[i].result() for i in range(len(todo)))
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
    if workers > 1:
        pool.shutdown()
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
