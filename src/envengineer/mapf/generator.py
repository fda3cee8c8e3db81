"""The instance generator: boards drawn to a target (size, agents, hole ratio, needs-wait), solved exactly.

Every instance comes from its own seed tuple ``(base_seed, split, num_agents, size, stream, index)`` through
:class:`numpy.random.SeedSequence`, so sets made with different splits or seeds never share a stream
(SPEC §3; STYLE "seeds that never collide"). An instance is rejected and redrawn from the same stream
until it is solvable and its needs-wait flag matches the target; the seed tuple is stored with the
instance, so any instance can be regenerated alone.

Two keep rules (``decide``):

* ``decide=None`` — training rounds and the v1 benchmark: a draw is kept only when the solver settles it
  within its default budget; a draw over that budget is redrawn, so which draws are kept depends on how
  much counted work the search needs (a faster search can change a seeded round);
* ``decide=N`` — the v2 benchmark and validation sets: every draw is decided with a budget of ``N``
  (:data:`DECIDE_BUDGET`); a draw is kept when it is solvable, and a draw the solver cannot decide within
  ``N`` stops the build with :class:`~envengineer.errors.UndecidedDraw` naming it. The kept draws are
  then a function of the boards alone, whatever the search.

How a board is drawn (decisions the spec leaves open, also in ``docs/testbed.md``):

* exactly ``round(hole_ratio * n * n)`` holes, at cells drawn uniformly without replacement (capped so that
  at least ``2 * num_agents`` cells stay frozen);
* each agent's start uniformly among the free cells not yet taken as a start, its goal uniformly among the
  cells of the start's connected component that are neither its start nor another agent's goal;
* the instance is kept when the exact solver proves it solvable, its needs-wait flag is the target and its
  board hash is not excluded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from envengineer.errors import (
    GenerationError,
    InstanceFormatError,
    SolverBudgetExceeded,
    UndecidedDraw,
    UnsolvableInstance,
)
from envengineer.machine import in_workers, thread_allowance
from envengineer.mapf.config import RoundConfig, largest_remainder
from envengineer.mapf.instance import FROZEN, HOLE, Cell, Instance, board_hash
from envengineer.mapf.solver import (
    MAX_BOARD_SIZE,
    Solution,
    check_limits,
    joint_space,
    path_cost,
    remember,
    solve,
    solve_joint,
)
from envengineer.mapf.solver.dense import DENSE_SPACE, dense_space, solve_dense
from envengineer.mapf.solver.ilp import solve_ilp
from envengineer.mapf.solver.reach import plan_exists
from envengineer.mapf.solver.waitfree import wait_free_paths

log = logging.getLogger(__name__)

#: Split codes that enter every seed tuple: sets of different splits never share a random stream.
SPLITS: dict[str, int] = {"train": 0, "validation": 1, "benchmark": 2, "custom": 3}

#: Draws allowed per instance before giving up with a GenerationError naming the knob to change.
MAX_ATTEMPTS = 20_000

#: Work limit with which the v2 benchmark and validation sets decide every draw the default budget does
#: not settle (``decide``), in the solver's budget units (:func:`decide_draw`). Not part of the benchmark's
#: definition: a larger budget changes no verdict a smaller one reached, it only lets more draws be decided
#: (v2's build never comes near it: its slowest draw takes under a minute).
DECIDE_BUDGET = 500_000_000
#: Draws whose joint state space (:func:`~envengineer.mapf.solver.joint_space`) is at most this are decided
#: by the joint searches (:func:`~envengineer.mapf.solver.solve_joint`), which also prove that a board has
#: no plan; larger ones as :func:`decide_draw` says.
DECIDE_JOINT_SPACE = 2_000_000
#: Work the search may spend on a larger draw before :func:`decide_draw` hands it to the dense table or the
#: integer program (a few seconds of CPU): crowded 5x5 boards that CBS settles in a second can take the
#: others a minute, while the long corridors of 10x10 boards that CBS splits for hours take the program
#: seconds, and a crowded 6x6 board that neither CBS nor the program settled in 20 minutes takes the
#: table 43 s.
DECIDE_SEARCH_BUDGET = 2_000_000
#: Joint positions :func:`decide_draw` explores to prove that a draw has no plan at all before it hands the
#: draw to the solver; a speed knob only (a draw it does not settle goes to the solver).
REACH_BUDGET = 300_000


@dataclass(frozen=True)
class Target:
    """What one instance must look like."""

    num_agents: int
    size: int
    hole_ratio: float
    needs_wait: bool


def sample_board(
    rng: np.random.Generator, size: int, num_agents: int, hole_ratio: float
) -> tuple[tuple[str, ...], tuple[Cell, ...], tuple[Cell, ...]] | None:
    """Draw holes, starts and goals; ``None`` when the agents do not fit on the frozen cells.

    >>> grid, starts, goals = sample_board(np.random.default_rng(0), 4, 2, 0.25)
    >>> sum(row.count("H") for row in grid), len(starts)
    (4, 2)
    """
    cells = size * size
    holes = min(round(hole_ratio * cells), cells - 2 * num_agents)
    if holes < 0:
        return None
    hole_idx = rng.choice(cells, size=holes, replace=False) if holes else np.empty(0, dtype=np.int64)
    flat = [FROZEN] * cells
    for i in hole_idx.tolist():
        flat[i] = HOLE
    grid = tuple("".join(flat[r * size : (r + 1) * size]) for r in range(size))
    comp = _components(flat, size)

    free = [i for i in range(cells) if flat[i] == FROZEN]
    starts: list[int] = []
    goals: list[int] = []
    for _ in range(num_agents):
        start_choices = [i for i in free if i not in starts]
        s = start_choices[int(rng.integers(len(start_choices)))]
        goal_choices = [i for i in free if comp[i] == comp[s] and i != s and i not in goals]
        if not goal_choices:
            return None
        g = goal_choices[int(rng.integers(len(goal_choices)))]
        starts.append(s)
        goals.append(g)
    return grid, tuple(divmod(s, size) for s in starts), tuple(divmod(g, size) for g in goals)


def check_fit(size: int, num_agents: int) -> None:
    """Refuse a cell the generator cannot fill: beyond the solver's limits, or more agents than distinct
    starts and goals fit on (the generator keeps ``2 * num_agents`` cells frozen).

    >>> check_fit(3, 16)
    Traceback (most recent call last):
    ...
    envengineer.errors.GenerationError: 16 agents do not fit on a 3x3 grid: ... or a grid of at least 6x6
    """
    try:
        check_limits(size, num_agents, where=f"{size}x{size} with {num_agents} agents")
    except InstanceFormatError as exc:
        raise GenerationError(str(exc)) from None
    if 2 * num_agents > size * size:
        side = next((n for n in range(size, MAX_BOARD_SIZE + 1) if n * n >= 2 * num_agents), MAX_BOARD_SIZE)
        raise GenerationError(
            f"{num_agents} agents do not fit on a {size}x{size} grid: distinct starts and goals need "
            f"{2 * num_agents} frozen cells, the grid has {size * size}; use at most {size * size // 2} "
            f"agents on {size}x{size} or a grid of at least {side}x{side}"
        )


def generate_instance(
    target: Target,
    seed: Sequence[int],
    *,
    instance_id: str,
    exclude: Iterable[str] | None = None,
    meta: dict | None = None,
    decide: int | None = None,
    plans: dict[str, tuple[tuple[Cell, ...], ...]] | None = None,
) -> Instance:
    """Draw boards from the stream of ``seed`` until one meets ``target``; solve it exactly.

    Args:
        target: Size, agents, hole ratio and whether the optimum must need a wait.
        seed: The seed tuple; it is stored in the instance so that it can be regenerated alone.
        instance_id: The id to give the instance.
        exclude: Board hashes the instance must not have (other splits, earlier instances).
        meta: Extra fields to carry in the instance (e.g. the benchmark subset).
        decide: ``None`` keeps only draws the solver settles within its default budget (training rounds,
            benchmark v1); a budget decides every draw with it and keeps the draw when it is solvable
            (benchmark v2, see the module docstring and :func:`decide_draw`).
        plans: When given, receives ``instance_id -> an SoC-optimal plan`` if the kept board is one the
            default budget does not settle (the v2 build ships these plans, so that the optimal policy
            does not search for minutes).

    Raises:
        GenerationError: No board met the target within ``MAX_ATTEMPTS`` draws.
        UndecidedDraw: With ``decide``, a draw was not decided within it; the message names the draw.
    """
    rng = np.random.default_rng(np.random.SeedSequence(tuple(seed)))
    excluded = exclude if exclude is not None else ()
    for draw in range(MAX_ATTEMPTS):
        board = sample_board(rng, target.size, target.num_agents, target.hole_ratio)
        if board is None:
            continue
        grid, starts, goals = board
        if board_hash(grid, starts, goals) in excluded:  # before the search: the same draws are kept
            continue
        beyond = False  # settled beyond the default budget
        try:
            sol = solve(grid, starts, goals, memo=False)  # most draws are rejected: memoize the kept ones
        except UnsolvableInstance:
            continue
        except SolverBudgetExceeded:
            if decide is None:
                continue
            which = f"draw {draw} of instance {instance_id}"
            sol = _decide_beyond(grid, starts, goals, target, decide, which, _draw_name(target, seed, meta))
            if sol is None:
                continue
            beyond = True
        if (sol.soc > sol.shortest_sum) != target.needs_wait:
            continue
        inst = Instance(
            id=instance_id,
            grid=grid,
            starts=starts,
            goals=goals,
            optimal_soc=sol.soc,
            optimal_makespan=sol.makespan,
            shortest_sum=sol.shortest_sum,
            seed=tuple(int(x) for x in seed),
            meta=dict(meta or {}),
        )
        if not beyond:
            remember(inst, sol)
        elif plans is not None:
            plans[instance_id] = sol.paths
        return inst
    kind = "needing a wait" if target.needs_wait else "without a wait"
    raise GenerationError(
        f"no {target.size}x{target.size} board with {target.num_agents} agents, hole ratio "
        f"{target.hole_ratio:.3f} and an optimum {kind} in {MAX_ATTEMPTS} draws; "
        f"change the wait_ratio or hole_ratio of size {target.size}"
    )


def _decide_beyond(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    target: Target,
    decide: int,
    draw: str,
    where: str,
) -> Solution | None:
    """:func:`decide_draw` for a draw the default budget did not settle, logged; a draw it cannot decide
    raises :class:`~envengineer.errors.UndecidedDraw` naming ``draw`` (which) and ``where`` (its cell
    and seeds)."""
    began = time.perf_counter()
    try:
        sol = decide_draw(grid, starts, goals, needs_wait=target.needs_wait, node_budget=decide)
    except SolverBudgetExceeded as exc:
        raise UndecidedDraw(
            f"{draw} ({where}) was not decided within node_budget={decide} ({exc}); whether the set "
            "keeps it is unknown: raise DECIDE_BUDGET (a larger budget changes no verdict a smaller one "
            "reached) or make the search faster"
        ) from None
    log.info(
        "%s: decided beyond the default budget in %.1f s (%s)",
        draw,
        time.perf_counter() - began,
        "not kept: no plan, or a wait its target excludes"
        if sol is None
        else f"optimal SoC {sol.soc}, shortest sum {sol.shortest_sum}",
    )
    return sol


def decide_draw(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    needs_wait: bool,
    node_budget: int = DECIDE_BUDGET,
) -> Solution | None:
    """Decide a draw the default budget did not settle: its exact optimum, or ``None`` when a set that
    wants ``needs_wait`` cannot keep it because it has no plan (or, for ``needs_wait=False``, because
    its optimum needs a wait).

    Exact whatever the order of the steps, which only make it cheaper:

    1. a wait-free plan (:func:`~envengineer.mapf.solver.waitfree.wait_free_paths`, a search over the agents'
       shortest paths alone) is an optimum without a wait: optimal SoC ``sum d_i``, makespan ``max d_i``;
    2. without one, the board needs a wait or has no plan, so a draw that must not need a wait is rejected;
    3. a draw that must need a wait is rejected when no plan exists at all
       (:func:`~envengineer.mapf.solver.reach.plan_exists`, cut off at :data:`REACH_BUDGET` positions);
    4. otherwise its optima are found: by the joint searches with ``node_budget`` on boards whose joint
       state space is at most :data:`DECIDE_JOINT_SPACE` (:func:`~envengineer.mapf.solver.solve_joint`;
       finite, so they also prove that a board has no plan); on larger ones by the solver with
       :data:`DECIDE_SEARCH_BUDGET`; where that is not enough, by the search over a dense table of all
       joint states (:func:`~envengineer.mapf.solver.dense.solve_dense`, also finite) when the table
       holds at most :data:`~envengineer.mapf.solver.dense.DENSE_SPACE` states (few free cells: crowded
       boards up to 6x6 with five agents), else by the integer program
       (:func:`~envengineer.mapf.solver.ilp.solve_ilp`; the long corridors of 10x10 boards).

    Raises:
        SolverBudgetExceeded: Step 1 or the joint searches needed more than ``node_budget``, the dense
            table met a sum of costs above 254 (its one-byte costs), or the integer program found no plan
            within its horizons (on a board step 3 could not prove plan-less).

    >>> sol = decide_draw(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], needs_wait=True)
    >>> sol.soc, sol.makespan, sol.shortest_sum
    (6, 4, 4)
    >>> decide_draw(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], needs_wait=False) is None
    True
    """
    try:
        paths = wait_free_paths(grid, starts, goals, node_budget=node_budget)
    except UnsolvableInstance:
        return None
    if paths is not None:
        lengths = [path_cost(p, p[-1]) for p in paths]  # each path ends on its goal
        return Solution(soc=sum(lengths), makespan=max(lengths), shortest_sum=sum(lengths), paths=paths)
    if not needs_wait:
        return None
    try:
        if not plan_exists(grid, starts, goals, node_budget=REACH_BUDGET):
            return None
    except SolverBudgetExceeded:
        pass  # a plan may or may not exist: the solver decides
    try:
        if joint_space(grid, starts, goals) <= DECIDE_JOINT_SPACE:
            return solve_joint(grid, starts, goals, node_budget=node_budget)
        try:
            return solve(grid, starts, goals, node_budget=min(node_budget, DECIDE_SEARCH_BUDGET), memo=False)
        except SolverBudgetExceeded:
            if dense_space(grid, starts, goals) <= DENSE_SPACE:
                return solve_dense(grid, starts, goals)
            return solve_ilp(grid, starts, goals)
    except UnsolvableInstance:
        return None


def _draw_name(target: Target, seed: Sequence[int], meta: dict | None) -> str:
    """Where a draw comes from, in words: cell, subset, stream, index and the seed tuple."""
    words = [f"{target.num_agents} agents", f"{target.size}x{target.size}"]
    if meta and "subset" in meta:
        words.append(f"subset {meta['subset']}")
    seed = tuple(int(x) for x in seed)
    if len(seed) == 6:  # generate_cell's (seed, split, agents, size, stream, index)
        words += [f"stream {seed[4]}", f"index {seed[5]}", f"seed {seed[0]}"]
    words.append(f"seed tuple {seed}")
    return ", ".join(words)


def generate_cell(
    *,
    num_agents: int,
    size: int,
    count: int,
    wait_count: int,
    seed: int,
    split: str,
    hole_ratio: float | None = None,
    stream: int = 0,
    id_prefix: str | None = None,
    exclude: Iterable[str] = (),
    unique: bool = True,
    meta: dict | None = None,
    decide: int | None = None,
    plans: dict[str, tuple[tuple[Cell, ...], ...]] | None = None,
) -> list[Instance]:
    """``count`` instances of one (agents, size) cell, exactly ``wait_count`` of which need a wait.

    The first ``wait_count`` instances need a wait, the rest do not. With ``hole_ratio=None`` each
    instance draws its own hole ratio uniformly in [0, 0.5] (the benchmark's rule). ``decide`` and
    ``plans`` are those of :func:`generate_instance`.

    >>> cell = generate_cell(num_agents=2, size=3, count=4, wait_count=2, seed=0, split="custom",
    ...                      hole_ratio=0.0)
    >>> [inst.needs_wait for inst in cell]
    [True, True, False, False]
    """
    if split not in SPLITS:
        raise GenerationError(f"unknown split {split!r}; use one of {sorted(SPLITS)}")
    if not 0 <= wait_count <= count:
        raise GenerationError(f"wait_count {wait_count} must lie in [0, count={count}]")
    if seed < 0:
        raise GenerationError(f"seed must be a non-negative integer, got {seed}")
    check_fit(size, num_agents)
    prefix = id_prefix or f"{num_agents}agents_{size}x{size}"
    excluded = set(exclude)
    out: list[Instance] = []
    for i in range(count):
        seed_tuple = (seed, SPLITS[split], num_agents, size, stream, i)
        h = hole_ratio
        if h is None:
            h = float(np.random.default_rng(np.random.SeedSequence((*seed_tuple, 1))).uniform(0.0, 0.5))
        target = Target(num_agents=num_agents, size=size, hole_ratio=h, needs_wait=i < wait_count)
        inst = generate_instance(
            target,
            seed_tuple,
            instance_id=f"{prefix}_{i:06d}",
            exclude=excluded,
            meta=meta,
            decide=decide,
            plans=plans,
        )
        if unique:
            excluded.add(inst.board_hash())
        out.append(inst)
    return out


def generate_round(
    config: RoundConfig,
    seed: int,
    *,
    split: str = "train",
    exclude: Iterable[str] = frozenset(),
    progress: bool = False,
    workers: int | None = None,
) -> list[Instance]:
    """All instances of a training round: exact counts per size and per needs-wait (SPEC §3), shuffled.

    Instances may repeat within a round (small boards have few distinct layouts) but never have a hash
    in ``exclude`` (the validation and benchmark sets). Sizes are generated in ``workers`` processes
    (default :func:`round_workers`); the result does not depend on it, and the workers' solutions go into
    the solver's memo, so the round's supervised targets are not solved a second time.
    """
    for size in config.sizes:
        check_fit(size, config.num_agents)  # before any board is drawn, so no size waits on another
    alloc = config.allocation()
    excluded = frozenset(exclude)
    jobs = [
        dict(
            num_agents=config.num_agents,
            size=size,
            count=count,
            wait_count=wait_count,
            seed=seed,
            split=split,
            hole_ratio=config.sizes[size].hole_ratio,
            exclude=excluded,
            unique=False,
        )
        for size, (count, wait_count) in alloc.items()
        if count
    ]
    workers = round_workers(config.num_samples, len(jobs)) if workers is None else workers
    bar = _progress(sum(c for c, _ in alloc.values()), progress, f"generating {split}")
    instances: list[Instance] = []
    if workers <= 1:
        cells: Iterable[list[Instance]] = (generate_cell(**job) for job in jobs)
    else:
        weights = [job["count"] * job["size"] ** 2 for job in jobs]
        cells = (_remembered(*x) for x in in_workers(_solved_cell, jobs, workers, weights))
    for cell in cells:
        instances.extend(cell)
        if bar is not None:
            bar.update(len(cell))
    if bar is not None:
        bar.close()
    order = np.random.default_rng(np.random.SeedSequence((seed, SPLITS[split], 0x5F0F))).permutation(
        len(instances)
    )
    return [instances[i] for i in order.tolist()]


#: A round this small is generated in this process: a worker process costs more than its share saves.
PARALLEL_FROM = 1_000


def round_workers(num_samples: int, cells: int) -> int:
    """Processes for a round: one per size up to this process's thread allowance
    (:func:`~envengineer.machine.thread_allowance`: ``OMP_NUM_THREADS``, which lanes set to 1, else the cores
    it may use), and one for rounds under :data:`PARALLEL_FROM`."""
    if num_samples < PARALLEL_FROM:
        return 1
    return max(1, min(cells, thread_allowance()))


def _solved_cell(job: dict) -> tuple[list[Instance], list[Solution]]:
    """A worker's cell with the solutions its memo holds for the cell's instances."""
    cell = generate_cell(**job)
    return cell, [solve(inst.grid, inst.starts, inst.goals) for inst in cell]


def _remembered(cell: list[Instance], solutions: list[Solution]) -> list[Instance]:
    for inst, sol in zip(cell, solutions, strict=True):
        remember(inst, sol)
    return cell


def counts_for(count: int, wait_ratio: float) -> int:
    """Instances that need a wait among ``count`` (largest remainder, ties to the waiting side).

    >>> counts_for(50, 0.25)
    13
    """
    return largest_remainder([wait_ratio, 1.0 - wait_ratio], count)[0] if count else 0


def _components(flat: list[str], size: int) -> list[int]:
    """Connected-component label of every cell (holes get -1), 4-neighbourhood."""
    comp = [-1] * len(flat)
    label = 0
    for i, ch in enumerate(flat):
        if ch != FROZEN or comp[i] >= 0:
            continue
        comp[i] = label
        stack = [i]
        while stack:
            j = stack.pop()
            r, c = divmod(j, size)
            for k in (
                j - size if r > 0 else -1,
                j + size if r < size - 1 else -1,
                j - 1 if c > 0 else -1,
                j + 1 if c < size - 1 else -1,
            ):
                if k >= 0 and comp[k] < 0 and flat[k] == FROZEN:
                    comp[k] = label
                    stack.append(k)
        label += 1
    return comp


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="inst")
