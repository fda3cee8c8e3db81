"""The strict plan validator: the 8 checks of SPEC §2.1, in order, and the costs of §2.2.

The checks apply to the whole plan one after another, not step by step in time: the first check that
fails anywhere in the plan names the failure, and the verdict reports where that failure first happens
(the earliest time step, ties broken by the lower agent index).

Time steps: ``t = 0`` is the start; the ``t``-th action of an agent moves it to its position at time
``t``, so a failing move or token is reported at the (1-based) step ``t`` it leads to.

>>> from envengineer.mapf.instance import Instance
>>> inst = Instance("ex", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)),
...                 optimal_soc=6, optimal_makespan=4, shortest_sum=4)
>>> v = validate(inst, "<answer>\\nA0: RIGHT RIGHT\\nA1: DOWN LEFT LEFT UP\\n</answer>")
>>> (v.valid, v.optimal, v.soc, v.makespan)
(True, True, 6, 4)
>>> validate(inst, "<answer>\\nA0: RIGHT RIGHT\\nA1: LEFT LEFT\\n</answer>").failure
'vertex_conflict'
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import accumulate, chain
from operator import add
from typing import Any

from envengineer.errors import InstanceFormatError
from envengineer.mapf.instance import HOLE, MOVES, Cell, Instance, agent_name
from envengineer.mapf.parser import PlanParse, check_plan_tokens, parse_plan_fast

__all__ = [
    "FAILURE_CATEGORIES",
    "SUBOPTIMAL",
    "Verdict",
    "format_answer",
    "validate",
    "validate_plan",
]

logger = logging.getLogger(__name__)

FAILURE_CATEGORIES: tuple[str, ...] = (
    "parse_error",
    "agent_mismatch",
    "invalid_action",
    "out_of_bounds",
    "hole",
    "vertex_conflict",
    "swap_conflict",
    "goal_not_reached",
)
#: The ``failure`` of a valid plan whose sum of costs is above the optimum.
SUBOPTIMAL = "suboptimal"


@dataclass(frozen=True)
class Verdict:
    """The validator's judgement of one response.

    Attributes:
        valid: All 8 checks passed.
        optimal: Valid and the sum of costs equals the instance's optimal SoC.
        makespan_optimal: Valid and the makespan equals the instance's optimal makespan.
        failure: ``None`` when optimal, ``"suboptimal"`` when valid but not SoC-optimal, else the first
            failing check's category (one of :data:`FAILURE_CATEGORIES`).
        soc: Sum of costs (valid plans only).
        makespan: Largest cost (valid plans only).
        agent: The agent where the named failure first happens (``None`` when it concerns no agent).
        step: The time step where it first happens (1-based for moves and tokens; ``None`` when it has
            no time, e.g. a ``parse_error``).
        checks_passed: How many of the 8 checks passed in order (8 for valid plans).
        agents_on_goal: Agents on their own goal at the horizon ``T`` (0 when checks 1-3 failed and the
            plan cannot be simulated).
        detail: A short human-readable explanation of the failure (empty for valid plans).
    """

    valid: bool
    optimal: bool
    makespan_optimal: bool
    failure: str | None
    soc: int | None
    makespan: int | None
    agent: int | None
    step: int | None
    checks_passed: int
    agents_on_goal: int
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The verdict as a JSON-ready dict."""
        return asdict(self)


def _require_solved(instance: Instance) -> None:
    if not isinstance(instance, Instance):
        raise TypeError(
            f"expected an Instance, got {type(instance).__name__}; build one with Instance.from_dict"
        )
    if instance.optimal_soc is None or instance.optimal_makespan is None:
        raise InstanceFormatError(
            f"instance {instance.id!r} has no optimal_soc/optimal_makespan, so optimality cannot be judged; "
            "fill them in with `envengineer solve`"
        )


def _failed(category: str, *, agent: int | None, step: int | None, on_goal: int, detail: str) -> Verdict:
    return Verdict(
        valid=False,
        optimal=False,
        makespan_optimal=False,
        failure=category,
        soc=None,
        makespan=None,
        agent=agent,
        step=step,
        checks_passed=FAILURE_CATEGORIES.index(category),
        agents_on_goal=on_goal,
        detail=detail,
    )


def _from_parse(parsed: PlanParse) -> Verdict:
    assert parsed.failure is not None
    return _failed(parsed.failure, agent=parsed.agent, step=parsed.step, on_goal=0, detail=parsed.detail)


def validate(instance: Instance, response: Any) -> Verdict:
    """Run the 8 checks on a model response and compute its costs. Never raises on model text.

    Args:
        instance: A solved instance (``optimal_soc`` and ``optimal_makespan`` set).
        response: The model's response: a string, or TRL's list of chat messages.

    Returns:
        The :class:`Verdict`.

    Raises:
        InstanceFormatError: The instance is not solved (a caller error, not a model error).

    >>> from envengineer.mapf.instance import Instance
    >>> inst = Instance("f", ("...",) * 3, ((1, 0), (1, 1)), ((1, 1), (1, 2)), optimal_soc=2,
    ...                 optimal_makespan=1, shortest_sum=2)
    >>> validate(inst, "<think>A1 moves first.</think><answer>A0: RIGHT\\nA1: RIGHT</answer>").optimal
    True
    """
    _require_solved(instance)
    plan = parse_plan_fast(response, instance.num_agents)
    if isinstance(plan, PlanParse):
        return _from_parse(plan)
    return _check_moves(instance, plan)


def validate_plan(instance: Instance, plan: Sequence[Sequence[str]]) -> Verdict:
    """Run checks 2-8 on an already split plan (per agent a list of action tokens, in agent order).

    Tokens are matched case-insensitively. An empty sequence means the agent waits in place.

    Args:
        instance: A solved instance.
        plan: One action sequence per agent.

    Returns:
        The :class:`Verdict` (``agent_mismatch`` when the number of sequences is wrong).

    Raises:
        InstanceFormatError: The instance is not solved.

    >>> from envengineer.mapf.instance import Instance
    >>> inst = Instance("s", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6,
    ...                 optimal_makespan=4, shortest_sum=4)
    >>> validate_plan(inst, [["WAIT", "RIGHT", "RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]]).failure
    'suboptimal'
    """
    _require_solved(instance)
    if isinstance(plan, (str, bytes)) or not isinstance(plan, Sequence):
        return _failed(
            "parse_error", agent=None, step=None, on_goal=0, detail="the plan is not a list of sequences"
        )
    parsed = check_plan_tokens(list(plan), instance.num_agents)
    if parsed.plan is None:
        return _from_parse(parsed)
    return _check_moves(instance, parsed.plan)


def format_answer(plan: Sequence[Sequence[str]]) -> str:
    """The canonical answer text for a plan (what the prompt asks for).

    >>> print(format_answer([["RIGHT", "RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]]))
    <answer>
    A0: RIGHT RIGHT
    A1: DOWN LEFT LEFT UP
    </answer>
    """
    lines = [f"{agent_name(i)}: {' '.join(seq)}".rstrip() for i, seq in enumerate(plan)]
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


def _cell(cell: Cell) -> str:
    return f"({cell[0]},{cell[1]})"


# -- the simulation ----------------------------------------------------------------------------------------
# Cells are encoded as integers on a grid padded by one ring of "outside" cells and twice as wide as needed:
# ``id = (row + 1) * width + (col + 1)`` with ``width = 2 * (n + 2)``. Then
# * one step from an inside cell lands inside or on the ring, so a plan leaves the grid exactly when a path
#   touches a ring cell;
# * ``a + b`` of two neighbouring ids encodes the midpoint of their edge (row sum, col sum) uniquely, and
#   differs from the doubled id of any waiting agent, so two agents crossing the same edge at the same
#   time (a swap, once vertex conflicts are excluded) share a ``(t, a + b)`` key.
# Every check is then one set operation over the whole plan; the per-step search for the agent and step to
# report only runs for the check that fails.


@dataclass(frozen=True)
class _Geometry:
    width: int
    big: int  # > every id and every sum of two ids
    ring: frozenset[int]
    deltas: dict[str, int]

    def encode(self, cell: Cell) -> int:
        return (cell[0] + 1) * self.width + cell[1] + 1

    def decode(self, cell_id: int) -> Cell:
        r, c = divmod(cell_id, self.width)
        return (r - 1, c - 1)


@lru_cache(maxsize=64)
def _geometry(n: int) -> _Geometry:
    width = 2 * (n + 2)
    ring = frozenset(
        (r + 1) * width + c + 1
        for r in range(-1, n + 1)
        for c in range(-1, n + 1)
        if not (0 <= r < n and 0 <= c < n)
    )
    deltas = {a: dr * width + dc for a, (dr, dc) in MOVES.items()}
    return _Geometry(width, 2 * (n + 2) * width, ring, deltas)


@lru_cache(maxsize=4096)
def _holes(grid: tuple[str, ...]) -> frozenset[int]:
    geo = _geometry(len(grid))
    return frozenset(
        geo.encode((r, c)) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == HOLE
    )


def _first(path: list[int], cells: frozenset[int]) -> int:
    return next(t for t, cell in enumerate(path) if cell in cells)


def _check_moves(instance: Instance, plan: Sequence[Sequence[str]]) -> Verdict:
    """Checks 4-8 and the costs, on a plan whose agents and tokens are already checked."""
    n = instance.size
    k = len(plan)
    horizon = max(map(len, plan), default=0)
    geo = _geometry(n)

    # Simulate every agent without clipping, padded with WAIT to the horizon.
    w = geo.width
    delta = geo.deltas.__getitem__
    paths = [
        list(accumulate(map(delta, seq), initial=(r + 1) * w + c + 1))
        for (r, c), seq in zip(instance.starts, plan, strict=True)
    ]
    for path in paths:
        if len(path) <= horizon:
            path.extend([path[-1]] * (horizon + 1 - len(path)))

    # 4. out_of_bounds: a path touches the ring around the grid
    ring = geo.ring
    if not ring.isdisjoint(chain.from_iterable(paths)):
        t, i = min((_first(path, ring), i) for i, path in enumerate(paths) if not ring.isdisjoint(path))
        return _failed(
            "out_of_bounds",
            agent=i,
            step=t,
            on_goal=_on_goal(instance, paths, geo),
            detail=f"{agent_name(i)} moves {plan[i][t - 1]} from {_cell(geo.decode(paths[i][t - 1]))} out of "
            f"the {n}x{n} grid at t={t}",
        )

    # 5. hole
    holes = _holes(tuple(instance.grid))
    if holes and not holes.isdisjoint(chain.from_iterable(paths)):
        t, i = min((_first(path, holes), i) for i, path in enumerate(paths) if not holes.isdisjoint(path))
        return _failed(
            "hole",
            agent=i,
            step=t,
            on_goal=_on_goal(instance, paths, geo),
            detail=f"{agent_name(i)} steps on the hole {_cell(geo.decode(paths[i][t]))} at t={t}",
        )

    if k > 1:
        # 6. vertex_conflict: fewer than k distinct cells at some time step
        if min(map(len, map(set, zip(*paths, strict=True)))) < k:
            return _vertex_conflict(instance, paths, geo)
        # 7. swap_conflict: two agents cross the same edge at the same time
        big = geo.big
        times = range(0, horizon * big, big)
        crossed: set[int] = set()
        for path in paths:
            crossed.update(map(add, times, map(add, path, path[1:])))
        if len(crossed) < k * horizon:
            return _swap_conflict(instance, paths, geo)

    # 8. goal_not_reached
    goal_ids = [(r + 1) * w + c + 1 for r, c in instance.goals]
    missed = [i for i in range(k) if paths[i][horizon] != goal_ids[i]]
    if missed:
        i = missed[0]
        return _failed(
            "goal_not_reached",
            agent=i,
            step=horizon,
            on_goal=k - len(missed),
            detail=f"{agent_name(i)} ends on {_cell(geo.decode(paths[i][horizon]))}, not its goal "
            f"{_cell(instance.goals[i])} (T={horizon})",
        )

    return _valid_verdict(instance, paths, goal_ids, horizon)


def _valid_verdict(instance: Instance, paths: list[list[int]], goal_ids: list[int], horizon: int) -> Verdict:
    """The verdict on a plan that passed checks 4-8: its costs against the instance's optima."""
    k = len(paths)
    # Costs: agent i's cost is the earliest t from which it stays on its goal until T.
    costs = []
    for path, goal in zip(paths, goal_ids, strict=True):
        t = horizon
        while t > 0 and path[t - 1] == goal:
            t -= 1
        costs.append(t)
    soc, makespan = sum(costs), max(costs)
    assert instance.optimal_soc is not None and instance.optimal_makespan is not None
    if soc < instance.optimal_soc or makespan < instance.optimal_makespan:
        logger.warning(
            "instance %s: a valid plan has SoC %d / makespan %d below the recorded optimum %d / %d; "
            "the instance's optima are wrong (re-run `envengineer solve`)",
            instance.id,
            soc,
            makespan,
            instance.optimal_soc,
            instance.optimal_makespan,
        )
    optimal = soc == instance.optimal_soc
    return Verdict(
        valid=True,
        optimal=optimal,
        makespan_optimal=makespan == instance.optimal_makespan,
        failure=None if optimal else SUBOPTIMAL,
        soc=soc,
        makespan=makespan,
        agent=None,
        step=None,
        checks_passed=len(FAILURE_CATEGORIES),
        agents_on_goal=k,
    )


def _on_goal(instance: Instance, paths: list[list[int]], geo: _Geometry) -> int:
    return sum(1 for path, goal in zip(paths, instance.goals, strict=True) if path[-1] == geo.encode(goal))


def _vertex_conflict(instance: Instance, paths: list[list[int]], geo: _Geometry) -> Verdict:
    k = len(paths)
    t = next(t for t, distinct in enumerate(map(len, map(set, zip(*paths, strict=True)))) if distinct < k)
    cells = [path[t] for path in paths]
    first: dict[int, int] = {}
    pairs = []
    for j, cell in enumerate(cells):
        i = first.setdefault(cell, j)
        if i != j:
            pairs.append((i, j))
    i, j = min(pairs)  # the lowest agent involved, then its lowest partner
    return _failed(
        "vertex_conflict",
        agent=i,
        step=t,
        on_goal=_on_goal(instance, paths, geo),
        detail=f"{agent_name(i)} and {agent_name(j)} are both on {_cell(geo.decode(cells[i]))} at t={t}",
    )


def _swap_conflict(instance: Instance, paths: list[list[int]], geo: _Geometry) -> Verdict:
    columns = list(zip(*paths, strict=True))
    for t in range(len(columns) - 1):
        cur, nxt = columns[t], columns[t + 1]
        index = {cell: i for i, cell in enumerate(cur)}
        for i in range(len(cur)):
            j = index.get(nxt[i])
            if j is not None and j != i and nxt[j] == cur[i]:
                return _failed(
                    "swap_conflict",
                    agent=i,
                    step=t + 1,
                    on_goal=_on_goal(instance, paths, geo),
                    detail=f"{agent_name(i)} and {agent_name(j)} swap {_cell(geo.decode(cur[i]))} and "
                    f"{_cell(geo.decode(cur[j]))} between t={t} and t={t + 1}",
                )
    raise AssertionError("no swap conflict found")  # pragma: no cover - the caller checked
