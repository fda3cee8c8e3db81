"""Whether a board has a wait-free optimum: every agent walks one of its shortest paths without a conflict.

An instance needs a wait (SPEC §2.2) exactly when its optimal sum of costs exceeds the sum of the agents'
shortest-path lengths ``d_i``. An agent whose cost is ``d_i`` stands on its goal at ``t = d_i`` and stays
there, so before that it is at distance ``t`` from its start and ``d_i - t`` from its goal at every step:
it walks a shortest path, one step a turn, without waiting. So the optimum is wait-free exactly when one
shortest path per agent can be chosen with no vertex or swap conflict (an agent on its goal blocks the
cell from ``d_i`` on), which a depth-first search over the agents' shortest-path cells decides: the agents
take their next cells one at a time within a step, and a joint position found to lead nowhere is
remembered. The search is finite (at most ``max d_i`` steps), so ``None`` is a proof, with no cost search.

The v2 benchmark build uses it for draws whose target has no wait: a draw without such a plan is
rejected whether it needs a wait or has no plan at all, and a draw with one is solvable with the optimal
sum of costs ``sum d_i`` and the optimal makespan ``max d_i``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver.grid import _INF, _bfs, _check_board, _neighbours


def wait_free_paths(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], *, node_budget: int
) -> tuple[tuple[Cell, ...], ...] | None:
    """One shortest path per agent with no conflict between them, or ``None`` when there is none.

    Each path holds the agent's cells at ``t = 0..max d_i`` (it stays on its goal after arriving).

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        node_budget: Most partial joint moves the search may try (one unit each).

    Raises:
        UnsolvableInstance: An agent cannot reach its goal at all.
        SolverBudgetExceeded: The search needed more than ``node_budget``.

    >>> wait_free_paths(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)], node_budget=1000) is None
    True
    >>> wait_free_paths(["...", "...", "..."], [(1, 0), (1, 1)], [(1, 1), (1, 2)], node_budget=1000)
    (((1, 0), (1, 1)), ((1, 1), (1, 2)))
    """
    n, s_ids, g_ids = _check_board(grid, starts, goals)
    nbrs = _neighbours(grid)
    to_goal = [_bfs(nbrs, g) for g in g_ids]
    dist = [h[s] for h, s in zip(to_goal, s_ids, strict=True)]
    for i, d in enumerate(dist):
        if d >= _INF:
            raise UnsolvableInstance(f"agent {i} cannot reach its goal {goals[i]} from {starts[i]}")
    # the cells agent i may step to from u at time t (t < d_i): one step closer to its goal
    ahead = [[tuple(v for v in nbrs[u][1:] if h[v] == h[u] - 1) for u in range(len(nbrs))] for h in to_goal]
    joint = _search(tuple(s_ids), dist, ahead, node_budget)
    if joint is None:
        return None
    return tuple(tuple(divmod(p[a], n) for p in joint) for a in range(len(s_ids)))


def _search(
    start: tuple[int, ...], dist: list[int], ahead: list[list[tuple[int, ...]]], node_budget: int
) -> list[tuple[int, ...]] | None:
    """The joint positions at ``t = 0..max d_i`` of a wait-free plan, or ``None``: a depth-first search
    over time (a stack, not recursion, so a long horizon cannot overflow), remembering the positions
    ``(t, pos)`` found to lead nowhere."""
    horizon = max(dist)
    if horizon == 0:
        return [start]
    left = [node_budget]
    dead: set[tuple[int, tuple[int, ...]]] = set()
    path = [start]
    stack = [_steps(start, 0, dist, ahead, left, node_budget)]
    while stack:
        t = len(path) - 1
        nxt = next(stack[-1], None)
        if nxt is None:
            dead.add((t, path.pop()))
            stack.pop()
            continue
        if (t + 1, nxt) in dead:
            continue
        path.append(nxt)
        if t + 1 == horizon:
            return path
        stack.append(_steps(nxt, t + 1, dist, ahead, left, node_budget))
    return None


def _steps(
    pos: tuple[int, ...],
    t: int,
    dist: list[int],
    ahead: list[list[tuple[int, ...]]],
    left: list[int],
    node_budget: int,
) -> Iterator[tuple[int, ...]]:
    """The joint positions at ``t + 1`` from ``pos`` at ``t``: each agent one step closer to its goal until
    it arrives, then on it; no vertex or swap conflict. Each partial choice costs one unit of ``left``."""
    k = len(pos)
    new = [0] * k

    def place(a: int) -> Iterator[tuple[int, ...]]:
        if a == k:
            yield tuple(new)
            return
        left[0] -= 1
        if left[0] < 0:
            raise SolverBudgetExceeded(
                f"whether a wait-free plan exists was not settled within node_budget={node_budget}; "
                "raise node_budget"
            )
        here = pos[a]
        for v in (here,) if t >= dist[a] else ahead[a][here]:
            if any(new[b] == v or (new[b] == here and pos[b] == v) for b in range(a)):
                continue
            new[a] = v
            yield from place(a + 1)

    return place(0)
