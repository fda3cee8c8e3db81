"""Exact optimal solver for MAPF-FrozenLake: optimal sum of costs, optimal makespan, shortest paths.

The task is the one of SPEC §2: agents move on the frozen cells of a square grid with ``UP``, ``DOWN``,
``LEFT``, ``RIGHT`` or ``WAIT``; two agents may not share a cell at the same time (vertex conflict) nor
exchange cells in one step (swap conflict); following an agent into the cell it leaves is allowed. The
cost of an agent is the earliest time from which it stays on its goal, so an agent may pass over its goal
and come back, and an agent that rests on its goal blocks that cell for everybody else.

Algorithms
----------
* **Sum of costs** — Conflict-Based Search with the usual improvements: a space-time A* low level (true
  distance to the goal as heuristic, a conflict-avoidance table to break ties), conflicts chosen
  cardinal first (from multi-valued decision diagrams), bypassing, the admissible CG heuristic (minimum
  vertex cover of the cardinal-conflict graph) evaluated lazily, and pairwise symmetry reasoning:
  *target* conflicts (an agent crosses the goal of an agent that already rests there) split on the
  resting agent's cost (``> t`` or ``<= t`` with its goal barred to everybody from ``t`` on), and
  *corridor* conflicts (two agents meeting head-on in a chain of single cells) split on range constraints
  at the corridor's ends. Two groups of agents that keep conflicting on a small region are merged and
  planned jointly (A* with operator decomposition over the group's positions and per-agent "finished"
  flags, guided by each member's exact cost-to-go under its own constraints and, on boards of at least
  ``AIDS_MIN_AGENTS`` agents and in a group of two or three, by each pair's exact cost-to-go with the
  others ignored, a table computed once per board), and the search restarts.
  The joint search is finite, so it also proves that a crowded board has no plan at all (e.g. two agents
  that must swap in a dead-end corridor). Boards whose joint state space is tiny skip CBS altogether.
* **Makespan** — the lower bound is the longest individual shortest path (on boards of at least
  ``AIDS_MIN_AGENTS`` agents raised to the makespan of each pair of agents alone, A* over the pair's
  positions), and the upper bound the makespan of the SoC-optimal plan; when they meet, nothing else is
  searched. On small boards a joint A* over positions
  finds the first time all agents stand on their goals; otherwise every horizon ``T`` in between is
  decided, in increasing order, by a feasibility CBS whose low level must arrive by ``T`` (a finite
  search, so it proves infeasibility). A node is closed when a conflict is cardinal for both agents'
  depth-``T`` decision diagrams, or (with ``AIDS_MIN_AGENTS`` agents or more) when two conflicting agents'
  depth-``T`` diagrams hold no pair of paths without a conflict (the dependency check of CBSH, used here
  only to prune).
* **Satisfiability** — on boards of at least ``AIDS_MIN_AGENTS`` agents, the sum-of-costs CBS gets
  ``CBS_UNITS_BEFORE_SAT`` units (``SAT_SCOUT`` of them, where a pair of agents is delayed more than a
  step or two) and the makespan's horizon searches ``HORIZON_UNITS_BEFORE_SAT``; a board that needs more
  (a crowded one, its optimum many steps above the shortest paths through delays of three agents or more)
  is settled by a SAT solver (:mod:`~envengineer.mapf.solver.sat`), its cost bound growing from the bound
  CBS proved. Satisfiability cannot prove that a board has no plan, so a board of at most ``REACH_SPACE``
  joint positions is first checked for a plan at all (:mod:`~envengineer.mapf.solver.reach`); a larger
  board without one runs to the end of the budget.
* **Regions** — on boards of at least ``AIDS_MIN_AGENTS`` agents, agents that stand in different connected
  regions of frozen cells never meet, so each region is searched as a board of its own, the smallest
  first (a region without a plan, such as two agents that must swap in a dead end, is found at once);
  the sum of costs is the regions' sum and the makespan their largest.
* **Aids of the slow boards** — the pairs' tables, the pairs' makespans and the dependency pruning above,
  the memory of a member's rows and of the constraint sets under which a search found no path, the
  regions searched apart and satisfiability serve boards of at least ``AIDS_MIN_AGENTS`` (4) agents only:
  each keeps the optima but changes the counted work, and with it which draws a budgeted training round
  keeps and which optimal plan is found. Boards of two and three agents, those of every CPU experiment's
  rounds, are searched as before them, so their seeded rounds and every figure measured from them stand.

``node_budget`` bounds the work of one call, all searches together, in units of about one low-level
expansion: a state of the single-agent A* costs 1, a state of a joint search ``JOINT_STATE_COST``, a
high-level CBS node ``CBS_NODE_COST``, and satisfiability its clauses and its solver's propagations at
measured rates. The default is a fraction of a second of CPU; exceeding it raises
:class:`~envengineer.errors.SolverBudgetExceeded`, so the solver never runs unbounded and its answer
(solved or not) does not depend on the machine.

Modules
-------
``grid`` board checks, neighbour lists, BFS distances and the public board helpers; ``problem`` the
budget, the integer-cell problem, per-agent constraints, the single-agent A* and decision diagrams;
``joint`` the joint (coupled-group) A* and the joint makespan search; ``pairs`` the pairs' cost-to-go
tables that guide it; ``cbs`` Conflict-Based Search with its symmetry reasoning; ``sat`` the
satisfiability fallback; ``memo`` the last answers. This package holds the entry points :func:`solve` and
:func:`solve_instance`. ``waitfree``, ``reach``, ``dense`` and ``ilp`` decide, whatever the cost, the draws
of benchmark v2 that the default budget does not settle (:func:`~envengineer.mapf.generator.decide_draw`;
``reach`` also serves the solver's check above); ``teacher`` finds the best continuation of a partial answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from envengineer.errors import ConfigError, InstanceFormatError, SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import Cell, Instance
from envengineer.mapf.solver.cbs import CBS_NODE_COST, MERGE_SPACE, _cbs, _Merge, _Node
from envengineer.mapf.solver.delays import DIAGRAM_DELAYS, _known_pair_delays, _pair_delays
from envengineer.mapf.solver.grid import (
    _INF,
    _check_board,
    distance_map,
    path_cost,
    paths_to_actions,
    shortest_path_lengths,
)
from envengineer.mapf.solver.joint import JOINT_STATE_COST, _joint_makespan, _pair_makespan, _plan_group
from envengineer.mapf.solver.memo import MEMO
from envengineer.mapf.solver.problem import (
    _NO_CONS,
    AIDS_MIN_AGENTS,
    NO_PLAN,
    _Budget,
    _Cons,
    _OutOfBudget,
    _Problem,
    _space,
)
from envengineer.mapf.solver.reach import _has_plan
from envengineer.mapf.solver.sat import _makespan_by_sat, _plan_by_sat

__all__ = [
    "AIDS_MIN_AGENTS",
    "CBS_NODE_COST",
    "DEFAULT_NODE_BUDGET",
    "JOINT_SPACE",
    "JOINT_SPACE_SOC",
    "JOINT_STATE_COST",
    "MAX_AGENTS",
    "MAX_BOARD_SIZE",
    "MEMO",
    "MERGE_AFTER",
    "MERGE_SPACE",
    "Solution",
    "check_limits",
    "distance_map",
    "joint_space",
    "last_units",
    "path_cost",
    "paths_to_actions",
    "remember",
    "shortest_path_lengths",
    "solve",
    "solve_instance",
    "solve_joint",
]

logger = logging.getLogger(__name__)

#: Default work limit of one call: about 45-50 ms of CPU on the 2-core machine of docs/benchmarks.md when
#: it runs out (seed 9's board 28 of ``bench_solver.py --agents 5 --size 10``).
DEFAULT_NODE_BUDGET = 30_000
#: The largest board side and agent count the solver accepts, checked before any work: the distance
#: tables alone grow with ``agents x side^2`` and are not part of the node budget, so an unchecked
#: 5,000 x 5,000 board would run for hours before the first search step.
MAX_BOARD_SIZE = 64
MAX_AGENTS = 16
#: Two groups of agents merge (and plan jointly) after this many splits between them, provided that
#: their joint state space stays within ``MERGE_SPACE`` (see :mod:`~envengineer.mapf.solver.cbs`).
MERGE_AFTER = 16
#: Boards whose joint position space is at most ``JOINT_SPACE`` get their makespan from a joint search
#: (no horizon CBS), and those whose joint state space with "finished" flags is at most
#: ``JOINT_SPACE_SOC`` their sum of costs too (no CBS).
JOINT_SPACE = 50_000
JOINT_SPACE_SOC = 40_000
#: A region of a board whose agents stand in several (see ``_solve_parts``) takes the joint searches in place
#: of CBS only up to this space (both of its searches): its regions are small, and the joint searches'
#: thresholds above, measured on whole boards of two and three agents, would send most of them there.
PART_JOINT_SPACE = 1_000
#: On boards of ``AIDS_MIN_AGENTS`` agents or more, the sum-of-costs CBS gets this many units and the
#: makespan's horizon searches ``HORIZON_UNITS_BEFORE_SAT``; a board that needs more is settled by
#: satisfiability (:mod:`~envengineer.mapf.solver.sat`) from the bound they proved. ``None``: CBS alone (v1's
#: rule was measured so). The horizons' share is small: their formulas are small and settle the crowded boards
#: in a few hundred units, where the horizon searches take thousands; CBS's share was 12,000 until the formula
#: grew with the bound and took the pairs' delays, which made satisfiability the cheaper search on those
#: boards from a few thousand units of CBS on, and 3,000 until the pairs' delays came mostly from their
#: decision diagrams and their sweeps stopped early: then 500 (docs/benchmarks.md, "The solver's tail").
CBS_UNITS_BEFORE_SAT: int | None = 500
HORIZON_UNITS_BEFORE_SAT = 1_000
#: CBS's first try, this many units of ``CBS_UNITS_BEFORE_SAT``: a board it has not settled by then goes
#: to satisfiability at once when a pair of its agents is delayed more than ``delays.DIAGRAM_DELAYS`` (the
#: pair must be swept, and satisfiability needs the pairs' delays anyway); otherwise CBS searches again,
#: afresh, with the rest of the share. CBS settles few boards with such a pair in the units left, and a
#: crowded board handed over sooner saves most of CBS's share (docs/benchmarks.md, "CBS's first try").
SAT_SCOUT = 100
#: A board (or region) that the sum-of-costs CBS did not settle within its share and whose joint positions
#: number at most this many is first checked for a plan at all (:mod:`~envengineer.mapf.solver.reach`, one
#: unit a position): satisfiability cannot prove that there is none, and these are the dead-end boards.
REACH_SPACE = 5_000


@dataclass(frozen=True)
class Solution:
    """The exact optima of one instance and an SoC-optimal plan.

    Attributes:
        soc: Optimal sum of costs (SPEC §2.2).
        makespan: Optimal makespan: the least, over conflict-free plans, of the largest agent cost. It may
            come from another plan than ``paths``.
        shortest_sum: Sum of the agents' individual shortest-path lengths, ignoring the other agents.
        paths: An SoC-optimal conflict-free plan: each agent's cells at ``t = 0..T``, all of length
            ``T + 1``, where ``T`` is the plan's largest agent cost.
    """

    soc: int
    makespan: int
    shortest_sum: int
    paths: tuple[tuple[Cell, ...], ...]

    @property
    def needs_wait(self) -> bool:
        """Whether the optimal SoC exceeds the sum of individual shortest paths."""
        return self.soc > self.shortest_sum


def solve(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    node_budget: int = DEFAULT_NODE_BUDGET,
    time_limit: float | None = None,
    memo: bool = True,
) -> Solution:
    """Optimal sum of costs, optimal makespan and an SoC-optimal plan of one board.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell ``(row, col)``; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        node_budget: Work limit of the whole call in units of about one low-level A* expansion (see
            the module docstring); the default settles all but the hardest few crowded boards (one
            of 600 random 5-agent 10x10 draws, 12 of benchmark v2's 3,150), and runs out after about
            50 ms of CPU (docs/benchmarks.md).
        time_limit: Wall-clock seconds after which the call gives up (``SolverBudgetExceeded``), whatever
            budget is left; ``None`` (the default) keeps the answer independent of the machine.
        memo: Read and fill :data:`MEMO` (calls without a time limit only); the generator turns it off
            for its draws and remembers only the boards it keeps.

    Returns:
        The :class:`Solution`.

    Raises:
        UnsolvableInstance: An agent cannot reach its goal, or the joint search proved that no
            conflict-free plan exists.
        SolverBudgetExceeded: The searches needed more than ``node_budget`` (or ``time_limit``).
        InstanceFormatError: The board itself is malformed, or larger than :data:`MAX_BOARD_SIZE` /
            :data:`MAX_AGENTS`.
        ConfigError: ``node_budget`` or ``time_limit`` is not positive.

    >>> sol = solve(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    >>> sol.soc, sol.makespan, sol.shortest_sum
    (6, 4, 4)
    """
    check_budget(node_budget, time_limit)
    n, s_ids, g_ids = _checked(grid, starts, goals)
    if time_limit is not None or not memo:  # a timed answer may depend on the machine: never memoized
        return _solution(_optimum(grid, s_ids, g_ids, node_budget, time_limit), n)
    key = _memo_key(grid, s_ids, g_ids, node_budget)
    settled = MEMO.get(key)
    if settled is None:
        settled = _optimum(grid, s_ids, g_ids, node_budget, None)
        MEMO.put(key, settled)
    return _solution(settled, n)


def solve_joint(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], *, node_budget: int
) -> Solution:
    """:func:`solve` by the joint searches alone, whatever the board's size: A* over all agents' joint
    states for the sum of costs, then over joint positions for the makespan (no CBS, no memo).

    Both searches are finite, so on a small crowded board, where CBS can split for ever on agents that
    keep blocking each other (or fail to prove that there is no plan), they settle the board; on a large
    open board their state space is hopeless and :func:`solve` is the one to call. The answer is the same
    exact optimum as :func:`solve`'s, the plan possibly another optimal one.

    Raises:
        As :func:`solve` (without a time limit).

    >>> sol = solve_joint(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], node_budget=100_000)
    >>> sol.soc, sol.makespan, sol.shortest_sum
    (6, 4, 4)
    """
    check_budget(node_budget, None)
    n, s_ids, g_ids = _checked(grid, starts, goals)
    return _solution(_optimum(grid, s_ids, g_ids, node_budget, None, joint=True), n)


def joint_space(grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]) -> int:
    """About the number of states :func:`solve_joint`'s sum-of-costs search can reach: the product of the
    agents' region sizes (less one cell per earlier agent of the same region) times ``2 ** agents`` for
    their "finished" flags.

    >>> joint_space(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    288
    """
    _, s_ids, g_ids = _checked(grid, starts, goals)
    return _space(_Problem(grid, s_ids, g_ids)) << len(s_ids)


def _checked(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]
) -> tuple[int, list[int], list[int]]:
    """The board's side and the starts and goals as integer cells, after every check :func:`solve` makes."""
    check_limits(len(grid), len(starts))
    return _check_board(grid, starts, goals)


def remember(inst: Instance, solution: Solution, *, node_budget: int = DEFAULT_NODE_BUDGET) -> None:
    """Put a solution found elsewhere (another process) into :data:`MEMO`, as :func:`solve` would have
    with ``node_budget``: a round generated in worker processes then needs no second solve for its
    supervised targets. The caller vouches that ``solution`` is the solver's answer to ``inst``."""
    n = len(inst.grid)
    ids = [[r * n + c for r, c in cells] for cells in (inst.starts, inst.goals, *solution.paths)]
    key = _memo_key(inst.grid, ids[0], ids[1], node_budget)
    MEMO.put(key, (solution.soc, solution.makespan, solution.shortest_sum, tuple(map(tuple, ids[2:]))))


def _memo_key(grid: Sequence[str], s_ids: Sequence[int], g_ids: Sequence[int], node_budget: int) -> tuple:
    # rows as strings whatever sequence of characters they came as, so that a board given as lists of
    # characters (which the solver takes) is a hashable key, the same key as its string form
    return (tuple("".join(row) for row in grid), tuple(s_ids), tuple(g_ids), node_budget)


def _solution(settled: tuple[int, int, int, tuple[tuple[int, ...], ...]], n: int) -> Solution:
    soc, makespan, shortest_sum, cells = settled
    paths = tuple(tuple(divmod(c, n) for c in p) for p in cells)
    return Solution(soc=soc, makespan=makespan, shortest_sum=shortest_sum, paths=paths)


def _optimum(
    grid: Sequence[str],
    s_ids: Sequence[int],
    g_ids: Sequence[int],
    node_budget: int,
    time_limit: float | None,
    *,
    joint: bool = False,
) -> tuple[int, int, int, tuple[tuple[int, ...], ...]]:
    """The optima of a checked board and an SoC-optimal plan as integer cells, every path padded to the
    plan's horizon; raises as :func:`solve` does. ``joint`` takes the joint searches whatever the board's
    size (:func:`solve_joint`)."""
    _LAST.units = 0  # a goal out of reach is refused before any search
    prob = _Problem(grid, s_ids, g_ids)
    n = prob.n
    shortest = []
    for i in range(prob.k):
        d = prob.h[i][s_ids[i]]
        if d >= _INF:
            start, goal = divmod(s_ids[i], n), divmod(g_ids[i], n)
            raise UnsolvableInstance(
                f"agent {i} cannot reach its goal {goal} from {start}: holes separate "
                "them; put the goal in the start's connected region of frozen cells"
            )
        shortest.append(d)
    budget = _Budget(node_budget, time_limit)
    try:
        parts = _regions(prob) if prob.aids and not joint else [tuple(range(prob.k))]
        if len(parts) == 1:
            paths, groups = _solve_soc(prob, budget, joint)
            costs = [path_cost(p, g) for p, g in zip(paths, g_ids, strict=True)]
            makespan = _solve_makespan(prob, budget, max(shortest), max(costs), groups, joint)
        else:
            paths, costs, makespan = _solve_parts(grid, prob, parts, budget, max(shortest))
    except _OutOfBudget:
        if budget.timed_out:
            raise SolverBudgetExceeded(
                f"the optimum was not settled within time_limit={time_limit:g} s; raise the time limit or "
                "use a board with fewer agents or more room to pass"
            ) from None
        raise SolverBudgetExceeded(
            f"the optimum was not settled within node_budget={node_budget}; raise node_budget or use a board "
            "with fewer agents or more room to pass"
        ) from None
    finally:
        _LAST.units = budget.used
    soc = sum(costs)
    horizon = max(costs)
    cells = tuple(tuple(p[t] if t < len(p) else p[-1] for t in range(horizon + 1)) for p in paths)
    return soc, makespan, sum(shortest), cells


def _regions(prob: _Problem) -> list[tuple[int, ...]]:
    """The agents grouped by the connected region of frozen cells they stand in (a goal lies in its start's
    region, or the board was refused before). Agents of two regions never meet, so each region is a board
    of its own."""
    parts: list[list[int]] = []
    for a in range(prob.k):
        part = next((p for p in parts if prob.h[p[0]][prob.starts[a]] < _INF), None)
        if part is None:
            parts.append([a])
        else:
            part.append(a)
    return [tuple(p) for p in parts]


def _solve_parts(
    grid: Sequence[str], prob: _Problem, parts: list[tuple[int, ...]], budget: _Budget, lb: int
) -> tuple[list[tuple[int, ...]], list[int], int]:
    """Paths, costs and the optimal makespan of a board whose agents stand in several regions, each region
    searched as a board of its own (with the whole board's aids) under the one budget.

    Without it CBS resolves the conflicts of the regions in one tree, which grows with the product of their
    trees rather than their sum, and a region that has no plan (two agents that must swap in a dead end)
    waits behind the others' conflicts. The smallest regions go first: a region without a plan is found
    at once, before the large ones are searched. The optimal sum of costs is the regions' sum and the
    optimal makespan their largest, so a region's makespan is searched only where its plan's may exceed
    what the others already need."""
    subs = [
        (
            part,
            _Problem(
                grid,
                [prob.starts[a] for a in part],
                [prob.goals[a] for a in part],
                aids=True,
                nbrs=prob.nbrs,
                h=[prob.h[a] for a in part],
            ),
        )
        for part in parts
    ]
    subs.sort(key=lambda ps: _space(ps[1]) << len(ps[0]))
    paths: list[tuple[int, ...]] = [()] * prob.k
    costs = [0] * prob.k
    found = []
    for part, sub in subs:
        sub_paths, groups = _solve_soc(sub, budget, joint_space=PART_JOINT_SPACE)
        sub_costs = [path_cost(p, g) for p, g in zip(sub_paths, sub.goals, strict=True)]
        for a, p, c in zip(part, sub_paths, sub_costs, strict=True):
            paths[a], costs[a] = p, c
        found.append((max(sub_costs), sub, groups))
    makespan = lb  # the longest shortest path of the board: every region's makespan is at least its own
    for ub, sub, groups in sorted(found, key=lambda x: -x[0]):
        if ub > makespan:
            # the least horizon at or above what the board needs already at which this region has a plan
            floor = max(makespan, *(sub.h[x][sub.starts[x]] for x in range(sub.k)))
            own = _solve_makespan(sub, budget, floor, ub, groups, joint_space=PART_JOINT_SPACE)
            makespan = max(makespan, own)
    return paths, costs, makespan


_LAST = threading.local()


def last_units() -> int:
    """The budget units (see the module docstring) that this thread's last search spent, whatever its
    outcome: above the node budget when it ran out, 0 when a goal was out of reach. A call answered from
    :data:`MEMO` runs no search and leaves the figure as it was; pass ``memo=False`` to count every call.
    A figure kept after the search, so :func:`solve` pays nothing for it (``benchmarks/bench_solver.py
    --units`` reports it).

    >>> _ = solve(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], memo=False)
    >>> 0 < last_units() < DEFAULT_NODE_BUDGET
    True
    """
    return getattr(_LAST, "units", 0)


def check_limits(size: int, num_agents: int, *, where: str = "board") -> None:
    """Refuse a board the solver would not finish: a side above :data:`MAX_BOARD_SIZE` or more than
    :data:`MAX_AGENTS` agents (checked before any work).

    >>> check_limits(10, 5)
    >>> check_limits(5000, 2)
    Traceback (most recent call last):
    ...
    envengineer.errors.InstanceFormatError: board: a 5000x5000 grid is larger than the solver takes ...
    """
    if size > MAX_BOARD_SIZE:
        raise InstanceFormatError(
            f"{where}: a {size}x{size} grid is larger than the solver takes (side at most {MAX_BOARD_SIZE}); "
            "use a smaller board"
        )
    if num_agents > MAX_AGENTS:
        raise InstanceFormatError(
            f"{where}: {num_agents} agents are more than the solver takes (at most {MAX_AGENTS}); use fewer"
        )


def check_budget(node_budget: int, time_limit: float | None) -> None:
    """Refuse a node budget below 1 and a time limit that is not a positive finite number of seconds."""
    if isinstance(node_budget, bool) or not isinstance(node_budget, int) or node_budget < 1:
        raise ConfigError(f"node_budget must be a positive integer, got {node_budget!r}")
    if time_limit is not None and not (0 < time_limit < float("inf")):
        raise ConfigError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")


def _merged(groups: list[tuple[int, ...]], pair: tuple[int, int]) -> list[tuple[int, ...]]:
    gi, gj = pair
    rest = [g for x, g in enumerate(groups) if x not in pair]
    return [*rest, tuple(sorted(groups[gi] + groups[gj]))]


def _search(
    prob: _Problem,
    budget: _Budget,
    horizon: int | None,
    groups: list[tuple[int, ...]],
    root_cons: Sequence[_Cons] | None = None,
) -> tuple[_Node | None, list[tuple[int, ...]]]:
    """CBS with merge-and-restart; returns the node (``None``: no plan) and the final groups."""
    while True:
        try:
            return _cbs(prob, budget, horizon, groups, MERGE_AFTER, root_cons), groups
        except _Merge as exc:
            groups = _merged(groups, exc.pair)
            logger.debug("merging agents %s", groups[-1])


def _crowded(prob: _Problem, budget: _Budget) -> bool:
    """Whether a pair of agents is delayed more than its decision diagrams look for, or can never finish
    at all (see :func:`~envengineer.mapf.solver.delays._pair_delays`)."""
    delays = _pair_delays(prob, budget)
    return delays is None or max(delays.values(), default=0) > DIAGRAM_DELAYS


def _solve_soc(
    prob: _Problem, budget: _Budget, joint: bool = False, joint_space: int = JOINT_SPACE_SOC
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    everyone = tuple(range(prob.k))
    if joint or _space(prob) << prob.k <= joint_space:
        paths = _plan_group(prob, everyone, [_NO_CONS] * prob.k, (), _INF, False, budget)
        if paths is None:
            raise UnsolvableInstance(NO_PLAN)
        return paths, [everyone]
    singles = [(i,) for i in range(prob.k)]
    if prob.aids and CBS_UNITS_BEFORE_SAT is not None:
        found = budget.within(
            min(SAT_SCOUT, CBS_UNITS_BEFORE_SAT), lambda: _search(prob, budget, None, singles)
        )
        if found is None and SAT_SCOUT < CBS_UNITS_BEFORE_SAT and not _crowded(prob, budget):
            found = budget.within(
                CBS_UNITS_BEFORE_SAT - SAT_SCOUT, lambda: _search(prob, budget, None, singles)
            )
        if found is None:  # CBS needed more than its share: satisfiability, from what CBS proved
            if _space(prob) <= REACH_SPACE and not _has_plan(prob, budget):
                raise UnsolvableInstance(NO_PLAN)
            return _plan_by_sat(prob, budget, prob.soc_floor), singles
        node, groups = found
    else:
        node, groups = _search(prob, budget, None, singles)
    if node is None:
        raise UnsolvableInstance(NO_PLAN)
    return node.paths, groups


def _solve_makespan(
    prob: _Problem,
    budget: _Budget,
    lb: int,
    ub: int,
    groups: list[tuple[int, ...]],
    joint: bool = False,
    joint_space: int = JOINT_SPACE,
) -> int:
    if lb >= ub:
        return ub
    if prob.aids:
        # every pair's own makespan (the others ignored) bounds the board's from below; a board whose
        # SoC-optimal plan is late is often late because of one pair, and then this settles the makespan
        pairs = sorted(
            combinations(range(prob.k), 2),
            key=lambda p: -max(prob.h[p[0]][prob.starts[p[0]]], prob.h[p[1]][prob.starts[p[1]]]),
        )
        # a pair whose sum of costs is not delayed (its delays known when CBS handed the board on) has
        # conflict-free shortest paths, so its makespan is its longer shortest path: no more than ``lb``
        delays = _known_pair_delays(prob)
        for a, b in pairs:
            if delays is not None and delays[a, b] == 0:
                continue
            lb = max(lb, _pair_makespan(prob, a, b, budget, ub))
            if lb >= ub:
                return ub
        # single agents, whose conflicts have decision diagrams for the dependency pruning, rather than
        # the SoC search's merged groups
        groups = [(i,) for i in range(prob.k)]
    if joint or _space(prob) <= joint_space:
        return _joint_makespan(prob, budget, lb, ub)
    t = lb

    def horizons() -> int:
        nonlocal t, groups
        while t < ub:
            node, groups = _search(prob, budget, t, groups)
            if node is not None:
                return t
            t += 1
        return ub

    if prob.aids and CBS_UNITS_BEFORE_SAT is not None:
        found = budget.within(HORIZON_UNITS_BEFORE_SAT, horizons)
        # the horizons below t are proven too short; satisfiability decides the rest
        return found if found is not None else _makespan_by_sat(prob, budget, t, ub)
    return horizons()


def solve_instance(inst: Instance, **kw: Any) -> Solution:
    """:func:`solve` on an :class:`~envengineer.mapf.instance.Instance` (keyword arguments pass through)."""
    return solve(inst.grid, inst.starts, inst.goals, **kw)
