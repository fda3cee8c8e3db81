"""Whether a board has any conflict-free plan at all: reachability of the goal positions, no costs.

A plan exists exactly when the joint position with every agent on its goal can be reached from the start
position by joint steps without a vertex or swap conflict (the agents may then all wait). A joint step
splits into *trains*, agents each stepping into a cell that is free or that the agent ahead leaves, and
*rotations*, a closed cycle of occupied cells whose agents all move one cell along it (a cycle of two
would be a swap, and a square grid has no odd cycle, so a rotation takes four agents or more). A train
can be moved one agent at a time from its head, so the reachable positions are those reached by single
agents stepping into free cells and by rotations of occupied cycles; this search explores those moves.
Every move can be undone, so the positions split into classes that can reach each other: the search
grows the classes of the start and of the goal together, layer by layer from the smaller side, and stops
when they meet (a plan exists) or when one of them is exhausted (none does). It proves what the cost
searches cannot prove cheaply: that a crowded board has no plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from envengineer.errors import SolverBudgetExceeded
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver.grid import _INF, _bfs, _check_board, _neighbours
from envengineer.mapf.solver.problem import _Budget, _OutOfBudget, _Problem


def plan_exists(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], *, node_budget: int
) -> bool:
    """Whether a conflict-free plan takes every agent from its start to its goal, whatever its cost.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        node_budget: Most joint positions the search may reach (one unit each).

    Raises:
        SolverBudgetExceeded: Neither side was exhausted and they did not meet within ``node_budget``.

    >>> plan_exists(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], node_budget=1000)
    True
    >>> plan_exists(["...", "HHH", "HHH"], [(0, 0), (0, 2)], [(0, 2), (0, 0)], node_budget=1000)
    False
    """
    _, s_cells, g_cells = _check_board(grid, starts, goals)
    s_ids, g_ids = tuple(s_cells), tuple(g_cells)  # joint positions are tuples: kept in the sets below
    nbrs = _neighbours(grid)
    if any(_bfs(nbrs, g)[s] >= _INF for s, g in zip(s_ids, g_ids, strict=True)):
        return False
    left = node_budget

    def spend() -> None:
        nonlocal left
        left -= 1
        if left < 0:
            raise SolverBudgetExceeded(
                f"whether any plan exists was not settled within node_budget={node_budget}; raise node_budget"
            )

    return _classes_meet(nbrs, s_ids, g_ids, spend)


def _has_plan(prob: _Problem, budget: _Budget) -> bool:
    """:func:`plan_exists` inside the solver: a board's integer problem, one budget unit per joint position
    reached (about the time of a unit of the searches: 190 positions a CPU millisecond against 200-230
    units). Called on a problem of at most ``REACH_SPACE`` joint positions, so it ends within the budget's
    few thousand units."""

    def spend() -> None:
        budget.left -= 1
        if budget.left < 0 and budget.exhausted():
            raise _OutOfBudget

    return _classes_meet(prob.nbrs, tuple(prob.starts), tuple(prob.goals), spend)


def _classes_meet(
    nbrs: list[tuple[int, ...]], s_ids: tuple[int, ...], g_ids: tuple[int, ...], spend: Callable[[], None]
) -> bool:
    """Whether the classes of the start and goal positions meet (see the module docstring); ``spend()``
    is called for every new position and raises to stop the search."""
    if s_ids == g_ids:
        return True
    moves = [cells[1:] for cells in nbrs]  # the four moves, without WAIT
    seen = [{s_ids}, {g_ids}]
    layer = [[s_ids], [g_ids]]
    while layer[0] and layer[1]:
        side = 0 if len(layer[0]) <= len(layer[1]) else 1
        other = seen[1 - side]
        grown: list[tuple[int, ...]] = []
        for pos in layer[side]:
            for nxt in _steps(pos, moves):
                if nxt in other:
                    return True
                if nxt not in seen[side]:
                    spend()
                    seen[side].add(nxt)
                    grown.append(nxt)
        layer[side] = grown
    return False


def _steps(pos: tuple[int, ...], moves: list[tuple[int, ...]]):
    """Positions one move away: one agent into a free neighbouring cell, or one rotation of a cycle."""
    occupied = set(pos)
    for a, here in enumerate(pos):
        for v in moves[here]:
            if v not in occupied:
                yield (*pos[:a], v, *pos[a + 1 :])
    if len(pos) >= 4:
        yield from _rotations(pos, moves, occupied)


def _rotations(pos: tuple[int, ...], moves: list[tuple[int, ...]], occupied: set[int]):
    """Every simple cycle of occupied cells, turned one cell either way (each cycle once per direction)."""
    adj = {c: [v for v in moves[c] if v in occupied] for c in pos}
    if sum(len(v) for v in adj.values()) < 8:  # a cycle needs four cells with two occupied neighbours each
        return
    who = {c: a for a, c in enumerate(pos)}
    found: set[tuple[int, ...]] = set()
    for first in pos:
        # cycles whose smallest cell is ``first``, walked from it in both directions (each is one rotation)
        stack = [(first, (first,))]
        while stack:
            cell, path = stack.pop()
            for v in adj[cell]:
                if v == first and len(path) >= 4:
                    if path not in found:
                        found.add(path)
                        out = list(pos)
                        for i, c in enumerate(path):
                            out[who[c]] = path[(i + 1) % len(path)]
                        yield tuple(out)
                elif v > first and v not in path:
                    stack.append((v, (*path, v)))
