"""The exact optima of a board by integer programming on its time-expanded graph (HiGHS), for the boards the
search settles slowly: crowded corridors where agents must step aside for one another many times.

For a horizon ``T``, one binary variable per agent, time step ``t < T`` and move ``u -> v`` (``WAIT``
included) says that the agent takes it; each agent's moves form one path from its start at ``t = 0`` to
its goal at ``t = T`` (flow conservation); at most one agent stands on a cell at a time (vertex conflicts)
and at most one crosses an edge between two cells in a step, in either direction (swap conflicts), so
following an agent into the cell it leaves, and rotations of three or more agents, stay allowed, as in
SPEC §2. A move is only created where it can lie on such a path (the agent is at most ``t`` steps from its
start and at most ``T - t - 1`` from its goal), which keeps the program small. Its cost is SPEC §2.2's:
``y[a, t]`` (continuous, and integral at any optimum) may be 1 only when agent ``a`` waits on its goal
from ``t`` to ``t + 1`` and ``y[a, t + 1]`` is 1, and the agent's cost is the number of steps ``t < T``
with ``y[a, t] = 0``.

Both optima follow from horizons alone:

* **makespan**: the least ``T >= max d_i`` whose program is feasible (``d_i`` the agents' shortest-path
  lengths);
* **sum of costs**: ``U``, the cheapest plan at the optimal makespan, unless a cheaper plan exists. A plan
  of cost at most ``sum d + s`` (``s = U - 1 - sum d``) brings every agent ``i`` home by ``d_i + s``,
  since the others cost at least their ``d_j``; so the program with those deadlines, the horizon
  ``max d + s`` and a row capping the total holds every cheaper plan, and its optimum, if it has one, is
  the board's. Without the cap the same proof at that horizon took four times as long (a crowded 6x6
  board of five agents: 90 s against 21 s).

A program that the horizon makes infeasible proves nothing about larger horizons, so a board with no
plan at all is not decided here: :func:`~envengineer.mapf.solver.reach.plan_exists` is the proof for
those, and :func:`solve_ilp` gives up with :class:`~envengineer.errors.SolverBudgetExceeded` past
``max_horizon``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from envengineer.errors import SolverBudgetExceeded
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver import Solution
from envengineer.mapf.solver.grid import IndexedBoard, path_cost

#: How far past the longest shortest path :func:`solve_ilp` looks for a first plan by default.
HORIZON_SLACK = 60


def solve_ilp(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    max_horizon: int | None = None,
) -> Solution:
    """The optimal sum of costs, the optimal makespan and an SoC-optimal plan of a board: the optima
    :func:`~envengineer.mapf.solver.solve` finds, the plan possibly another optimal one.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        max_horizon: The largest makespan tried for a first plan (default: the longest shortest path plus
            :data:`HORIZON_SLACK`).

    Raises:
        UnsolvableInstance: An agent cannot reach its goal at all.
        SolverBudgetExceeded: No plan within ``max_horizon`` (which does not prove that none exists).

    >>> sol = solve_ilp(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    >>> sol.soc, sol.makespan, sol.shortest_sum, len(sol.paths[0]) - 1
    (6, 4, 4, 4)
    """
    board = IndexedBoard(grid, starts, goals)
    d = board.shortest
    if max(d) == 0:  # every agent already on its goal
        return Solution(soc=0, makespan=0, shortest_sum=0, paths=tuple((tuple(s),) for s in starts))
    horizon = max(d)
    last = horizon + HORIZON_SLACK if max_horizon is None else max_horizon
    while _Program(board, horizon).solve(minimise=False) is None:
        horizon += 1
        if horizon > last:
            raise SolverBudgetExceeded(f"no plan of makespan up to {last}; whether one exists is undecided")
    makespan = horizon
    best = _Program(board, makespan).solve(minimise=True)
    assert best is not None  # feasible at this horizon, just shown
    spare = sum(path_cost(p, g) for p, g in zip(best, board.goals, strict=True)) - sum(d) - 1
    if spare >= 0:  # a cheaper plan, if any, is the optimum of the plans costing at most sum d + spare
        best = _Program(board, max(d) + spare, spare).solve(minimise=True) or best
    costs = [path_cost(p, g) for p, g in zip(best, board.goals, strict=True)]
    end = max(costs)
    n = board.n
    paths = tuple(tuple((c // n, c % n) for c in p[: end + 1]) for p in best)
    return Solution(soc=sum(costs), makespan=makespan, shortest_sum=sum(d), paths=paths)


class _Program:
    """The integer program of one horizon (see the module docstring), built for HiGHS as sparse rows."""

    def __init__(self, board: IndexedBoard, horizon: int, spare: int | None = None) -> None:
        """With ``spare``, only the plans that cost at most ``sum d + spare``: each agent home by its
        ``d + spare`` (the others cost at least their ``d``) and a row on the total."""
        self.board, self.horizon = board, horizon
        home = [horizon if spare is None else min(horizon, d + spare) for d in board.shortest]
        self.moves: list[tuple[int, int, int, int]] = []  # (agent, from, to, t)
        for a, goal in enumerate(board.goals):
            near, far = board.from_start[a], board.to_goal[a]
            for t in range(home[a]):
                for u, nbrs in enumerate(board.nbrs):
                    if near[u] <= t:
                        self.moves += [(a, u, v, t) for v in nbrs if far[v] <= home[a] - t - 1]
            self.moves += [(a, goal, goal, t) for t in range(home[a], horizon)]
        index = {m: i for i, m in enumerate(self.moves)}
        # y[a, t] between the agent's shortest length (it cannot rest on its goal earlier) and its deadline
        resting = [(a, t) for a, d in enumerate(board.shortest) for t in range(d, home[a])]
        self.rest = {key: len(self.moves) + k for k, key in enumerate(resting)}
        self.rows: list[tuple[float, float, list[tuple[int, float]]]] = []
        self._paths(index)
        self._conflicts()
        for (a, t), j in self.rest.items():
            goal = board.goals[a]
            stay = index.get((a, goal, goal, t))
            self.rows.append((-np.inf, 0.0, [(j, 1.0)] + ([] if stay is None else [(stay, -1.0)])))
            if (a, t + 1) in self.rest:
                self.rows.append((-np.inf, 0.0, [(j, 1.0), (self.rest[a, t + 1], -1.0)]))
        if spare is not None:  # the cost above sum d, the steps not resting on the goal, is at most spare
            self.rows.append((len(self.rest) - spare, np.inf, [(j, 1.0) for j in self.rest.values()]))

    def _paths(self, index: dict[tuple[int, int, int, int], int]) -> None:
        """Each agent leaves its start at 0, leaves every cell it enters, and ends on its goal."""
        into: dict[tuple[int, int, int], list[int]] = {}
        out: dict[tuple[int, int, int], list[int]] = {}
        for i, (a, u, v, t) in enumerate(self.moves):
            out.setdefault((a, u, t), []).append(i)
            into.setdefault((a, v, t + 1), []).append(i)
        for a, (s, g) in enumerate(zip(self.board.starts, self.board.goals, strict=True)):
            self.rows.append((1.0, 1.0, [(i, 1.0) for i in out.get((a, s, 0), [])]))
            self.rows.append((1.0, 1.0, [(i, 1.0) for i in into.get((a, g, self.horizon), [])]))
        for key in into.keys() | out.keys():
            if 0 < key[2] < self.horizon:
                self.rows.append(
                    (0.0, 0.0, [(i, 1.0) for i in into.get(key, [])] + [(i, -1.0) for i in out.get(key, [])])
                )

    def _conflicts(self) -> None:
        """At most one agent on a cell at ``t + 1``, and at most one crossing of an edge in a step."""
        cell: dict[tuple[int, int], list[int]] = {}
        edge: dict[tuple[int, int, int], list[int]] = {}
        for i, (_, u, v, t) in enumerate(self.moves):
            cell.setdefault((v, t + 1), []).append(i)
            if u != v:
                edge.setdefault((min(u, v), max(u, v), t), []).append(i)
        for group in (*cell.values(), *edge.values()):
            if len(group) > 1:
                self.rows.append((-np.inf, 1.0, [(i, 1.0) for i in group]))

    def solve(self, *, minimise: bool) -> list[list[int]] | None:
        """Every agent's cells at ``t = 0..horizon`` in a plan (of least cost with ``minimise``), or
        ``None`` when the horizon admits none."""
        import highspy

        h = _highs()
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.5)  # costs are integers: a gap below 1 proves the optimum
        nx, ny = len(self.moves), len(self.rest)
        h.addVars(nx + ny, np.zeros(nx + ny), np.ones(nx + ny))
        binary = np.array([highspy.HighsVarType.kInteger] * nx)
        h.changeColsIntegrality(nx, np.arange(nx, dtype=np.int32), binary)
        if minimise:  # the cost is constant - sum(y): maximise the steps spent resting on the goal
            cols = np.arange(nx, nx + ny, dtype=np.int32)
            h.changeColsCost(ny, cols, -np.ones(ny))
        lower = np.array([r[0] for r in self.rows])
        upper = np.array([r[1] for r in self.rows])
        starts = np.cumsum([0] + [len(r[2]) for r in self.rows[:-1]]).astype(np.int32)
        entries = [e for r in self.rows for e in r[2]]
        cols = np.array([i for i, _ in entries], dtype=np.int32)
        vals = np.array([v for _, v in entries])
        h.addRows(len(self.rows), lower, upper, len(entries), starts, cols, vals)
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverBudgetExceeded(f"HiGHS stopped with {h.modelStatusToString(status)}")
        x = np.asarray(h.getSolution().col_value[:nx]) > 0.5
        taken = (m for m, on in zip(self.moves, x, strict=True) if on)
        nxt: dict[tuple[int, int, int], int] = {(a, u, t): v for a, u, v, t in taken}
        paths = []
        for a, s in enumerate(self.board.starts):
            path = [s]
            for t in range(self.horizon):
                path.append(nxt[a, path[-1], t])
            paths.append(path)
        return paths


def _highs() -> Any:
    """A silent HiGHS instance. Its C++ constructor prints a banner to the process's standard output
    before any option can turn that off, so the descriptor points to the null device while it runs."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
