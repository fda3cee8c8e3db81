"""The fixed 3,150-instance benchmark and the validation set (SPEC §4).

Shape: 3, 4 and 5 agents; sizes from ``k x k`` to ``10 x 10`` for ``k`` agents (8 + 7 + 6 = 21 cells);
three wait-ratio subsets ``wr_025``, ``wr_050``, ``wr_075``; 50 instances per cell and subset. The hole
ratio of each instance is uniform in [0, 0.5]. Within a cell the ``wr_XXX`` subset holds exactly
``round_lr(50 * XXX / 100)`` instances that need a wait (largest remainder: 13, 25 and 38 of 50).

Two versions ship with the package, each a file with its SHA-256 (:data:`VERSIONS`); they differ only in
the rule that keeps a drawn board:

* ``v1`` (``envengineer/data/benchmark-v1.jsonl``): a draw is kept when the solver settles it within its
  default node budget, so which draws are kept depends on how much counted work the search needs, and a
  faster search changes the benchmark. Kept, loadable by name, for comparisons with earlier figures.
* ``v2`` (``envengineer/data/benchmark-v2.jsonl``): a draw is kept when it is solvable (and meets its
  needs-wait target); the build decides every draw, the ones the default budget does not settle with
  :data:`~envengineer.mapf.generator.DECIDE_BUDGET`, and stops naming the draw when one is not decided,
  so no search can change which boards it holds. Its boards that the default budget does not settle ship
  with an optimal plan each (``benchmark-v2-plans.jsonl``), so that the scripted optimal policy needs no
  long search; those plans are one optimum among several and, unlike the instances, may change with the
  solver.

:data:`DEFAULT_VERSION` is ``v1`` until ``benchmark-v2.jsonl`` is built and shipped; asking for v2 before
that is an error that names the build command.

A test rebuilds v2 (a stratified part of it) byte for byte. The validation set has the benchmark's shape,
its own seed and split, fewer instances per cell, no board in common with the benchmark, and v2's rule.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from importlib import resources
from pathlib import Path

import numpy as np

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.machine import in_workers
from envengineer.mapf.generator import DECIDE_BUDGET, counts_for, generate_cell
from envengineer.mapf.instance import Cell, Instance, load_instances

Plan = tuple[tuple[Cell, ...], ...]

log = logging.getLogger(__name__)

BENCHMARK_SEED = 2606_17682
VALIDATION_SEED = 2606_17683
AGENTS: tuple[int, ...] = (3, 4, 5)
MAX_SIZE = 10
SUBSETS: dict[str, float] = {"wr_025": 0.25, "wr_050": 0.50, "wr_075": 0.75}
PER_CELL = 50
VALIDATION_PER_CELL = 4

#: SHA-256 of the packaged ``benchmark-v1.jsonl`` (also in docs/testbed.md).
BENCHMARK_V1_SHA256 = "2cb56073dd210b729c7bee43f3a96563ac3d59611dd7d40956b62c4ad475b277"
#: SHA-256 of the packaged ``benchmark-v2.jsonl`` and of its plans file (also in docs/testbed.md).
BENCHMARK_V2_SHA256 = "65346573ab64fa1fae710702aca580828591dc1f0abc629dfa6a2e8fbc6c136c"
BENCHMARK_V2_PLANS_SHA256 = "82c5825395efefe9262900c6397ddf923855957e6ec3fb37c8914de769c973d6"


@dataclass(frozen=True)
class BenchmarkVersion:
    """One shipped version of the benchmark: its file, its hash and the rule that keeps a draw.

    Attributes:
        name: ``v1`` or ``v2``.
        file: The instance file in ``envengineer/data``.
        sha256: The file's SHA-256.
        decide: ``None``: a draw is kept only when the solver settles it within its default budget (v1);
            a budget: every draw is decided, with it where the default budget does not settle it (v2).
        plans_file: Optimal plans of the boards the default budget does not settle (v2), or ``None``.
        plans_sha256: That file's SHA-256.
    """

    name: str
    file: str
    sha256: str
    decide: int | None
    plans_file: str | None = None
    plans_sha256: str | None = None


VERSIONS: dict[str, BenchmarkVersion] = {
    "v1": BenchmarkVersion("v1", "benchmark-v1.jsonl", BENCHMARK_V1_SHA256, None),
    "v2": BenchmarkVersion(
        "v2",
        "benchmark-v2.jsonl",
        BENCHMARK_V2_SHA256,
        DECIDE_BUDGET,
        "benchmark-v2-plans.jsonl",
        BENCHMARK_V2_PLANS_SHA256,
    ),
}
#: The version every loader, command and experiment uses unless told otherwise
#: (``EvaluationSettings.benchmark_version`` has the same default).
DEFAULT_VERSION = "v2"
#: SHA-256 of the default version's file.
BENCHMARK_SHA256 = VERSIONS[DEFAULT_VERSION].sha256


def benchmark_version(name: str = DEFAULT_VERSION) -> BenchmarkVersion:
    """The shipped benchmark version called ``name``; a clear error for any other name.

    >>> benchmark_version("v1").file
    'benchmark-v1.jsonl'
    >>> benchmark_version("v3")
    Traceback (most recent call last):
    ...
    envengineer.errors.ConfigError: unknown benchmark version 'v3'; use one of v1, v2 (default ...)
    """
    if not isinstance(name, str) or name not in VERSIONS:
        names = ", ".join(VERSIONS)
        raise ConfigError(
            f"unknown benchmark version {name!r}; use one of {names} (default {DEFAULT_VERSION})"
        )
    return VERSIONS[name]


def benchmark_name(name: str) -> str | None:
    """The version a set name stands for: ``benchmark`` the default, ``benchmark-v1`` / ``benchmark-v2``
    that version; ``None`` for any other name (a path). ``benchmark-vX`` for an unknown ``X`` is an error.

    >>> benchmark_name("benchmark-v2"), benchmark_name("benchmark-v1"), benchmark_name("boards.jsonl")
    ('v2', 'v1', None)
    >>> benchmark_name("benchmark") == DEFAULT_VERSION
    True
    """
    if name == "benchmark":
        return DEFAULT_VERSION
    if name.startswith("benchmark-v") and "." not in name and "/" not in name:
        return benchmark_version(name.removeprefix("benchmark-")).name
    return None


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
    cell: tuple[int, int],
    *,
    seed: int,
    split: str,
    per_cell: int,
    exclude: frozenset[str],
    decide: int | None,
) -> tuple[list[Instance], dict[str, Plan]]:
    k, n = cell
    out: list[Instance] = []
    plans: dict[str, Plan] = {}
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
            decide=decide,
            plans=plans,
        )
        taken.update(inst.board_hash() for inst in batch)
        out.extend(batch)
    return out, plans


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
    decide: int | None = VERSIONS[DEFAULT_VERSION].decide,
    plans: dict[str, Plan] | None = None,
) -> list[Instance]:
    """Build a benchmark-shaped set, cells in parallel processes; ``workers`` does not change the result.

    ``decide`` is the keep rule (:func:`~envengineer.mapf.generator.generate_instance`): the default
    version's by default, ``None`` for v1's, :data:`~envengineer.mapf.generator.DECIDE_BUDGET` for v2's.
    ``plans``, when given, receives the optimal plans of the kept boards the default budget does not
    settle, by instance id.
    """
    todo = cells(agents, max_size, min_size)
    job = partial(
        _build_cell, seed=seed, split=split, per_cell=per_cell, exclude=frozenset(exclude), decide=decide
    )
    workers = workers if workers is not None else min(2, len(todo))
    if workers <= 1:
        results: Iterable[tuple[list[Instance], dict[str, Plan]]] = map(job, todo)
    else:
        # heaviest first, so no worker is left with a long cell at the end: v1's cost grows with the board,
        # v2's with the agents and with crowding, the small boards first (its CPU per cell: 5 agents on 6x6
        # 6.2 s, 5x5 5.7 s, 4 agents on 5x5 3.5 s and 4x4 3.4 s, 5 on 10x10 2.1 s, every other under 2 s)
        weights = [k * n if decide is None else k**3 / n for k, n in todo]
        results = in_workers(job, todo, workers, weights)
    out: list[Instance] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"building {split}", unit="cell")
    for batch, found in results:
        out.extend(batch)
        if plans is not None:
            plans.update(found)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def build_benchmark(
    *,
    version: str = DEFAULT_VERSION,
    workers: int | None = None,
    progress: bool = False,
    plans: dict[str, Plan] | None = None,
    agents: Sequence[int] = AGENTS,
    max_size: int = MAX_SIZE,
    min_size: int | None = None,
) -> list[Instance]:
    """The 3,150-instance benchmark of ``version``, exactly as shipped (``plans`` as for :func:`build_set`).

    ``agents``, ``max_size`` and ``min_size`` build only those cells, each exactly as in the whole.
    """
    v = benchmark_version(version)
    return build_set(
        seed=BENCHMARK_SEED,
        split="benchmark",
        per_cell=PER_CELL,
        agents=agents,
        max_size=max_size,
        min_size=min_size,
        workers=workers,
        progress=progress,
        decide=v.decide,
        plans=plans,
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
    version: str = DEFAULT_VERSION,
) -> list[Instance]:
    """A validation set of the benchmark's shape (``per_cell`` per cell and subset), disjoint from the
    benchmark ``version`` and drawn with that version's keep rule."""
    v = benchmark_version(version)
    exclude = {inst.board_hash() for inst in load_benchmark(v.name)}
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
        decide=v.decide,
    )


def _data(name: str) -> Path:
    return Path(str(resources.files("envengineer") / "data" / name))


def benchmark_path(version: str = DEFAULT_VERSION) -> Path:
    """The packaged file of benchmark ``version``."""
    return _data(benchmark_version(version).file)


def plans_path(version: str = DEFAULT_VERSION) -> Path | None:
    """The packaged plans file of benchmark ``version`` (``None`` for v1, which has none)."""
    v = benchmark_version(version)
    return None if v.plans_file is None else _data(v.plans_file)


def load_benchmark(version: str = DEFAULT_VERSION) -> list[Instance]:
    """The packaged benchmark ``version`` (3,150 instances); :data:`DEFAULT_VERSION` unless told otherwise.

    Raises:
        ConfigError: ``version`` is not a shipped version.
        InstanceFormatError: Its file is missing; the message names the command that builds it.
    """
    path = benchmark_path(version)
    if not path.exists():
        raise InstanceFormatError(f"benchmark {version}: {path} is missing; {build_command(version, path)}")
    return load_instances(path)


def build_command(version: str, path: str | Path) -> str:
    """The words that tell how to build benchmark ``version`` into ``path`` (two worker processes).

    >>> build_command("v2", "out.jsonl")
    'build it with `envengineer benchmark build --version v2 --workers 2 -o out.jsonl` (docs/testbed.md)'
    """
    command = f"envengineer benchmark build --version {version} --workers 2 -o {path}"
    return f"build it with `{command}` (docs/testbed.md)"


def save_plans(plans: dict[str, Plan], instances: Sequence[Instance], path: str | Path) -> Path:
    """Write the plans of ``instances`` that ``plans`` holds, in the instances' order: one JSON line each,
    ``{"id", "board_hash", "paths"}`` with every agent's cells from ``t = 0``."""
    path = Path(path)
    lines = [
        json.dumps(
            {"id": i.id, "board_hash": i.board_hash(), "paths": [[list(c) for c in p] for p in plans[i.id]]},
            separators=(",", ":"),
        )
        for i in instances
        if i.id in plans
    ]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)
    return path


def plans_file_for(path: str | Path) -> Path:
    """Where a built benchmark's plans go: ``NAME-plans.jsonl`` next to ``NAME.jsonl``.

    >>> plans_file_for("out/benchmark-v2.jsonl").as_posix()
    'out/benchmark-v2-plans.jsonl'
    """
    path = Path(path)
    stem = path.name.removesuffix(".gz").removesuffix(".jsonl")
    return path.with_name(f"{stem}-plans.jsonl")


@cache
def _shipped_plans() -> dict[str, Plan]:
    """Every shipped plan by board hash, read once per process, each file checked against its recorded
    SHA-256 first (:func:`check_plans_file`)."""
    out: dict[str, Plan] = {}
    for v in VERSIONS.values():
        path = plans_path(v.name)
        if path is None or not path.exists():
            continue
        data = check_plans_file(path, v.plans_sha256)
        for line in data.decode("utf-8").splitlines():
            row = json.loads(line)
            out[row["board_hash"]] = tuple(tuple((int(r), int(c)) for r, c in p) for p in row["paths"])
    return out


def check_plans_file(path: Path, expected: str | None) -> bytes:
    """The bytes of a shipped plans file whose SHA-256 is ``expected``.

    A plan read from it becomes the scripted ``optimal`` policy's answer and a training target, so a
    damaged or edited file must not be read at all.

    Raises:
        InstanceFormatError: Its hash is not ``expected``; the message names the file and both hashes.
    """
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None and actual != expected:
        raise InstanceFormatError(
            f"{path}: sha256 {actual}, but this release ships {expected}; the plans file is damaged or "
            "edited: reinstall envengineer (or restore the file)"
        )
    return data


def shipped_plan(instance: Instance) -> Plan | None:
    """The optimal plan shipped for a benchmark board the default budget does not settle, else ``None``
    (found by board hash, so a copy of the board under another id finds it too).

    Raises:
        InstanceFormatError: A shipped plans file is not the one recorded (:func:`check_plans_file`).
    """
    return _shipped_plans().get(instance.board_hash())


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
