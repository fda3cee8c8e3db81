"""Board helpers of the solver: grid and cell checks, neighbour lists, breadth-first distances, the board
record :class:`IndexedBoard`, and the public helpers :func:`distance_map`, :func:`shortest_path_lengths`,
:func:`path_cost` and :func:`paths_to_actions`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from envengineer.errors import InstanceFormatError, UnsolvableInstance
from envengineer.mapf.instance import FROZEN, MOVES, Cell

_INF = 1 << 30

_STEP_NAME = {v: k for k, v in MOVES.items()}

_C = TypeVar("_C")  # a cell: an integer or a (row, col) pair


def _check_grid(grid: Sequence[str]) -> int:
    n = len(grid)
    if n == 0 or any(len(row) != n for row in grid):
        raise InstanceFormatError("the grid must be a non-empty square list of row strings like '..H.'")
    for i, row in enumerate(grid):
        if set(row) - {FROZEN, "H"}:
            raise InstanceFormatError(f"grid row {i} {row!r} may hold only '.' (frozen) and 'H' (hole)")
    return n


def _check_cell(grid: Sequence[str], cell: Cell, what: str) -> int:
    n = len(grid)
    r, c = int(cell[0]), int(cell[1])
    if not (0 <= r < n and 0 <= c < n):
        raise InstanceFormatError(f"{what} {(r, c)} is outside the {n}x{n} grid; use 0 <= row, col < {n}")
    if grid[r][c] != FROZEN:
        raise InstanceFormatError(f"{what} {(r, c)} is on a hole; put it on a frozen cell '.'")
    return r * n + c


def _check_board(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]
) -> tuple[int, list[int], list[int]]:
    """The board's side and the starts and goals as integer cells, once the grid is a square of frozen
    cells and holes, every agent has one start and one goal on frozen cells, and no two share either."""
    n = _check_grid(grid)
    if len(starts) != len(goals) or not starts:
        raise InstanceFormatError(f"{len(starts)} starts but {len(goals)} goals; give one of each per agent")
    s_ids = [_check_cell(grid, s, f"agent {i}'s start") for i, s in enumerate(starts)]
    g_ids = [_check_cell(grid, g, f"agent {i}'s goal") for i, g in enumerate(goals)]
    if len(set(s_ids)) < len(s_ids) or len(set(g_ids)) < len(g_ids):
        raise InstanceFormatError(
            "two agents share a start or a goal cell; starts and goals must be distinct"
        )
    return n, s_ids, g_ids


def _neighbours(grid: Sequence[str]) -> list[tuple[int, ...]]:
    """For every cell, the cells one action reaches: itself (``WAIT``) first, then the four moves."""
    n = len(grid)
    out: list[tuple[int, ...]] = []
    for r in range(n):
        for c in range(n):
            if grid[r][c] != FROZEN:
                out.append(())
                continue
            cells = [r * n + c]
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < n and 0 <= cc < n and grid[rr][cc] == FROZEN:
                    cells.append(rr * n + cc)
            out.append(tuple(cells))
    return out


def _bfs(nbrs: list[tuple[int, ...]], source: int) -> list[int]:
    dist = [_INF] * len(nbrs)
    dist[source] = 0
    queue = [source]
    for u in queue:
        du = dist[u] + 1
        for v in nbrs[u]:
            if dist[v] == _INF:
                dist[v] = du
                queue.append(v)
    return dist


class IndexedBoard:
    """A board's cells as integers (``row * n + col``), their neighbours, and every agent's distances from
    its start and to its goal: what the integer program and the dense table search from.

    Raises:
        InstanceFormatError: Starts or goals not distinct, or not on frozen cells of the grid.
        UnsolvableInstance: An agent cannot reach its goal at all.

    >>> board = IndexedBoard(["...", "...", "..."], [(0, 0)], [(2, 2)])
    >>> board.n, board.starts, board.goals, board.shortest
    (3, [0], [8], [4])
    """

    def __init__(self, grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]) -> None:
        self.n, self.starts, self.goals = _check_board(grid, starts, goals)
        self.nbrs = _neighbours(grid)
        self.from_start = [_bfs(self.nbrs, s) for s in self.starts]
        self.to_goal = [_bfs(self.nbrs, g) for g in self.goals]
        self.shortest = [dist[s] for dist, s in zip(self.to_goal, self.starts, strict=True)]
        for i, length in enumerate(self.shortest):
            if length >= _INF:
                raise UnsolvableInstance(f"agent {i} cannot reach its goal")


def distance_map(grid: Sequence[str], goal: Cell) -> np.ndarray:
    """BFS distance (number of moves) from every cell to ``goal``; ``-1`` for holes and unreachable cells.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        goal: The target cell ``(row, col)``; it must be frozen.

    Returns:
        An ``(n, n)`` integer array indexed ``[row, col]``.

    >>> distance_map(["..", "H."], (1, 1)).tolist()
    [[2, 1], [-1, 0]]
    """
    n = _check_grid(grid)
    g = _check_cell(grid, goal, "goal")
    dist = np.asarray(_bfs(_neighbours(grid), g), dtype=np.int64)
    dist[dist >= _INF] = -1
    return dist.reshape(n, n)


def shortest_path_lengths(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]
) -> list[int | None]:
    """Each agent's individual shortest-path length, ignoring the other agents (``None``: unreachable).

    >>> shortest_path_lengths(["...", ".H.", "..."], [(0, 0), (1, 0)], [(2, 2), (1, 2)])
    [4, 4]
    """
    _check_grid(grid)
    if len(starts) != len(goals):
        raise InstanceFormatError(f"{len(starts)} starts but {len(goals)} goals; give one of each per agent")
    nbrs = _neighbours(grid)
    out: list[int | None] = []
    for i, (s, g) in enumerate(zip(starts, goals, strict=True)):
        d = _bfs(nbrs, _check_cell(grid, g, f"agent {i}'s goal"))[_check_cell(grid, s, f"agent {i}'s start")]
        out.append(None if d >= _INF else d)
    return out


def path_cost(path: Sequence[_C], goal: _C) -> int:
    """An agent's cost (SPEC §2.2): the earliest time from which ``path``, which ends on ``goal``, stays
    there. Cells may be integers or ``(row, col)`` pairs, ``goal`` of the same kind.

    >>> path_cost([(0, 0), (0, 1), (0, 0), (0, 1), (0, 1)], (0, 1))
    3
    >>> path_cost([5], 5)
    0
    """
    t = len(path) - 1
    while t > 0 and path[t - 1] == goal:
        t -= 1
    return t


def paths_to_actions(paths: Sequence[Sequence[Cell]]) -> list[list[str]]:
    """Turn per-agent cell sequences into action names, dropping the trailing ``WAIT`` s on the goal.

    >>> paths_to_actions([[(0, 0), (0, 1), (0, 1)], [(1, 1), (1, 1), (1, 0)]])
    [['RIGHT'], ['WAIT', 'LEFT']]
    """
    plan: list[list[str]] = []
    for i, path in enumerate(paths):
        actions: list[str] = []
        for t in range(1, len(path)):
            step = (path[t][0] - path[t - 1][0], path[t][1] - path[t - 1][1])
            if step not in _STEP_NAME:
                raise ValueError(
                    f"agent {i} jumps from {path[t - 1]} to {path[t]} at t={t}; paths must be "
                    "sequences of adjacent cells"
                )
            actions.append(_STEP_NAME[step])
        while actions and actions[-1] == "WAIT":
            actions.pop()
        plan.append(actions)
    return plan
