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
  flags, guided by each member's exact cost-to-go under its own constraints), and the search restarts.
  The joint search is finite, so it also proves that a crowded board has no plan at all (e.g. two agents
  that must swap in a dead-end corridor). Boards whose joint state space is tiny skip CBS altogether.
* **Makespan** — the lower bound is the longest individual shortest path and the upper bound the makespan
  of the SoC-optimal plan. On small boards a joint A* over positions finds the first time all agents
  stand on their goals; otherwise every horizon ``T`` in between is decided, in increasing order, by a
  feasibility CBS whose low level must arrive by ``T`` (a finite search, so it proves infeasibility).
  A conflict at which both agents' depth-``T`` decision diagrams hold a single cell closes the node.

``node_budget`` bounds the work of one call, all searches together, in units of about one low-level
expansion: a state of the single-agent A* costs 1, a state of a joint search ``JOINT_STATE_COST`` and a
high-level CBS node ``CBS_NODE_COST``. The default is a fraction of a second of CPU; exceeding it raises
:class:`~envengineer.errors.SolverBudgetExceeded`, so the solver never runs unbounded and its answer
(solved or not) does not depend on the machine.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from envengineer.errors import InstanceFormatError, SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import FROZEN, MOVES, Cell, Instance

logger = logging.getLogger(__name__)

#: Default work limit of one call: about 0.1-0.2 s of CPU on a 2020s laptop core when it runs out.
DEFAULT_NODE_BUDGET = 30_000
#: Budget units one expansion costs: a state of the single-agent A* (1), a state of a group's joint A*,
#: and a high-level CBS node (its conflict classification and decision diagrams); measured ratios.
JOINT_STATE_COST = 2
CBS_NODE_COST = 20
#: Two groups of agents merge (and plan jointly) after this many splits between them, provided that
#: their joint state space (see ``_space``, times 2 ** agents for the "finished" flags) stays within
#: ``MERGE_SPACE``: a joint search pays off on small, crowded regions, while on larger ones CBS with
#: symmetry reasoning does better.
MERGE_AFTER = 16
MERGE_SPACE = 20_000
#: Boards whose joint position space is at most ``JOINT_SPACE`` get their makespan from a joint search
#: (no horizon CBS), and those whose joint state space with "finished" flags is at most
#: ``JOINT_SPACE_SOC`` their sum of costs too (no CBS).
JOINT_SPACE = 50_000
JOINT_SPACE_SOC = 40_000

_INF = 1 << 30
_STEP_NAME = {v: k for k, v in MOVES.items()}


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


# -- board helpers -------------------------------------------------------------------------------------
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


# -- the search problem --------------------------------------------------------------------------------
class _Budget:
    """Work counters shared by all searches of one ``solve`` call."""

    __slots__ = ("left", "total")

    def __init__(self, node_budget: int) -> None:
        self.total = node_budget
        self.left = node_budget


class _OutOfBudget(Exception):
    """Internal: a search used up its share of the budget."""


class _Problem:
    """Cells as integers ``row * n + col``, neighbour lists and each agent's distance-to-goal table."""

    __slots__ = ("_chains", "_corr", "_dist", "goals", "h", "k", "n", "nbrs", "nc", "region", "starts")

    def __init__(self, grid: Sequence[str], starts: Sequence[int], goals: Sequence[int]) -> None:
        self.n = len(grid)
        self.nc = self.n * self.n
        self.nbrs = _neighbours(grid)
        self.starts = list(starts)
        self.goals = list(goals)
        self.k = len(starts)
        self.h = [_bfs(self.nbrs, g) for g in goals]
        self.region = [sum(1 for d in h if d < _INF) for h in self.h]  # cells each agent can reach
        self._corr: list[int] | None = None
        self._chains: list[tuple[frozenset[int], int, int]] = []
        self._dist: dict[tuple[int, int], list[int]] = {}

    def corridor(self, cell: int) -> tuple[int, frozenset[int], int, int] | None:
        """The corridor through ``cell``: (id, its cells, end 1, end 2), or ``None``.

        A corridor is a maximal chain of cells with exactly two frozen neighbours each; its ends are the
        two distinct cells outside the chain next to its first and last cell."""
        if self._corr is None:
            self._find_corridors()
        cid = self._corr[cell]  # type: ignore[index]
        return None if cid < 0 else (cid, *self._chains[cid])

    def _find_corridors(self) -> None:
        nbrs = self.nbrs
        deg = [len(x) - 1 for x in nbrs]
        corr = [-1] * self.nc
        seen = [False] * self.nc
        for v in range(self.nc):
            if deg[v] != 2 or seen[v]:
                continue
            chain = [v]
            seen[v] = True
            ends = []
            for first in nbrs[v][1:]:
                prev, cur = v, first
                while deg[cur] == 2 and not seen[cur]:
                    seen[cur] = True
                    chain.append(cur)
                    prev, cur = cur, next(w for w in nbrs[cur][1:] if w != prev)
                ends.append(cur)
            if ends[0] == ends[1] or any(deg[e] == 2 for e in ends):
                continue  # a loop or a ring: no corridor reasoning there
            cid = len(self._chains)
            self._chains.append((frozenset(chain), ends[0], ends[1]))
            for c in chain:
                corr[c] = cid
        self._corr = corr

    def dist_from(self, cell: int, avoid: int = -1) -> list[int]:
        """BFS distances from ``cell``; with ``avoid`` a corridor id, never entering that corridor."""
        key = (cell, avoid)
        d = self._dist.get(key)
        if d is None:
            if avoid < 0:
                d = _bfs(self.nbrs, cell)
            else:
                cells = self._chains[avoid][0]
                d = _bfs([() if v in cells else x for v, x in enumerate(self.nbrs)], cell)
            self._dist[key] = d
        return d


# Per-agent constraints: (vertex keys t*nc+v, edge keys (t*nc+u)*nc+v, latest constraint time, earliest
# time from which the agent may rest on its goal, latest time by which it must rest on its goal, cells
# barred from a time on {cell: t}). Never mutated: a child copies what it changes.
_Cons = tuple[frozenset, frozenset, int, int, int, dict]
_NO_CONS: _Cons = (frozenset(), frozenset(), -1, 0, _INF, {})


def _plan(
    prob: _Problem,
    i: int,
    cons: _Cons,
    others: Sequence[Sequence[int]],
    horizon: int,
    conflict_first: bool,
    budget: _Budget,
) -> tuple[int, ...] | None:
    """Space-time A* for agent ``i`` under ``cons``; ties (or, with ``conflict_first``, the primary key)
    are broken by the number of conflicts with ``others``. ``None`` when no path exists within ``horizon``.
    """
    vset, eset, tcons, goal_min, max_len, blk = cons
    if max_len < horizon:
        horizon = max_len
    nc = prob.nc
    nbrs = prob.nbrs
    h = prob.h[i]
    s, g = prob.starts[i], prob.goals[i]
    occ, emov, final, tcat, gvl = _cat(others, (g,), nc)
    gvis = gvl[0]
    tstat = tcat if tcat > tcons + 1 else tcons + 1
    use_cat = bool(others)
    closed: dict[int, int] = {}
    heap: list[tuple[int, int, int, int, int]] = [
        (0, h[s], 0, s, -1) if conflict_first else (h[s], 0, 0, s, -1)
    ]
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        if conflict_first:
            c, f, negt, v, pk = pop(heap)
        else:
            f, c, negt, v, pk = pop(heap)
        if v < 0:
            budget.left -= len(closed)
            return _unwind(closed, pk, nc)
        t = -negt
        key = (t if t < tstat else tstat) * nc + v
        if key in closed:
            continue
        closed[key] = pk
        if v == g and t >= goal_min:
            extra = sum(1 for x in gvis if x > t) if gvis else 0
            if extra == 0:
                budget.left -= len(closed)
                return _unwind(closed, key, nc)
            push(heap, (c + extra, f, negt, -1, key) if conflict_first else (f, c + extra, negt, -1, key))
        t1 = t + 1
        kb = (t1 if t1 < tstat else tstat) * nc
        vb = t1 * nc
        eb = (t * nc + v) * nc
        for w in nbrs[v]:
            f1 = t1 + h[w]
            if f1 > horizon or (kb + w) in closed or (vb + w) in vset:
                continue
            if w != v and (eb + w) in eset:
                continue
            if blk and t1 >= blk.get(w, _INF):
                continue
            c1 = c
            if use_cat:
                c1 += occ.get(vb + w, 0)
                fw = final.get(w)
                if fw is not None and t1 >= fw:
                    c1 += 1
                if w != v and ((t * nc + w) * nc + v) in emov:
                    c1 += 1
            push(heap, (c1, f1, -t1, w, key) if conflict_first else (f1, c1, -t1, w, key))
    budget.left -= len(closed)
    return None


def _unwind(closed: dict[int, int], key: int, nc: int) -> tuple[int, ...]:
    cells = []
    while key >= 0:
        cells.append(key % nc)
        key = closed[key]
    cells.reverse()
    return tuple(cells)


def _mdd(prob: _Problem, i: int, cons: _Cons, depth: int) -> list[set[int]]:
    """Levels ``0..depth`` of agent ``i``'s decision diagram: the cells of the paths that respect
    ``cons`` and stand on the goal at ``depth`` (waiting allowed)."""
    vset, eset, blk = cons[0], cons[1], cons[5]
    nc = prob.nc
    nbrs = prob.nbrs
    h = prob.h[i]
    fwd = [{prob.starts[i]}]
    cur = fwd[0]
    for t in range(depth):
        nxt: set[int] = set()
        vb = (t + 1) * nc
        left = depth - t - 1
        for u in cur:
            eb = (t * nc + u) * nc
            for w in nbrs[u]:
                if h[w] <= left and (vb + w) not in vset and (w == u or (eb + w) not in eset):
                    if not blk or t + 1 < blk.get(w, _INF):
                        nxt.add(w)
        fwd.append(nxt)
        cur = nxt
    levels: list[set[int]] = [set() for _ in range(depth + 1)]
    g = prob.goals[i]
    levels[depth] = {g} if g in fwd[depth] else set()
    for t in range(depth - 1, -1, -1):
        after = levels[t + 1]
        lv = levels[t]
        for u in fwd[t]:
            eb = (t * nc + u) * nc
            for w in nbrs[u]:
                if w in after and (w == u or (eb + w) not in eset):
                    lv.add(u)
                    break
    return levels


def _pair_conflicts(pi: Sequence[int], pj: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """All conflicts of two paths (rest on the goal after the end): ``(t, 0, cell, cell)`` for a vertex
    conflict at time ``t``; ``(t, 1, a, b)`` when the first agent moves ``a -> b`` and the second ``b -> a``
    between ``t`` and ``t + 1``."""
    li, lj = len(pi) - 1, len(pj) - 1
    out = []
    pa, pb = pi[0], pj[0]
    for t in range(1, (li if li > lj else lj) + 1):
        a = pi[t] if t <= li else pi[li]
        b = pj[t] if t <= lj else pj[lj]
        if a == b:
            out.append((t, 0, a, a))
        elif a == pb and b == pa:
            out.append((t - 1, 1, pa, a))
        pa, pb = a, b
    return out


def _min_vertex_cover(edges: list[tuple[int, int]]) -> int:
    if not edges:
        return 0
    nodes = sorted({x for e in edges for x in e})
    if len(nodes) > 12:  # a matching is a lower bound of the cover; fine for many agents
        used: set[int] = set()
        size = 0
        for a, b in edges:
            if a not in used and b not in used:
                used.update((a, b))
                size += 1
        return size
    for r in range(1, len(nodes) + 1):
        for combo in combinations(nodes, r):
            cover = set(combo)
            if all(a in cover or b in cover for a, b in edges):
                return r
    return len(nodes)


def _cat(
    others: Sequence[Sequence[int]], goals: Sequence[int], nc: int
) -> tuple[dict[int, int], set[int], dict[int, int], int, list[list[int]]]:
    """Conflict-avoidance table of ``others``: visits ``t*nc+v``, moves ``(t*nc+u)*nc+v``, the cell each
    rests on from which time, the latest time, and for each of ``goals`` the times somebody stands on it."""
    occ: dict[int, int] = {}
    emov: set[int] = set()
    final: dict[int, int] = {}
    gvis: list[list[int]] = [[] for _ in goals]
    gidx = {g: x for x, g in enumerate(goals)}
    tcat = 0
    for p in others:
        last = len(p) - 1
        if last > tcat:
            tcat = last
        u = p[0]
        for t in range(last):
            key = t * nc + u
            occ[key] = occ.get(key, 0) + 1
            v = p[t + 1]
            if u != v:
                emov.add(key * nc + v)
            x = gidx.get(u)
            if x is not None:
                gvis[x].append(t)
            u = v
        final[u] = last
    return occ, emov, final, tcat, gvis


class _Merge(Exception):
    """Internal: two groups conflicted too often; merge them and restart the search."""

    def __init__(self, gi: int, gj: int) -> None:
        super().__init__(gi, gj)
        self.pair = (gi, gj)


class _Node:
    __slots__ = ("chosen", "confs", "cons", "f", "g", "h_done", "mdds", "nconf", "paths")

    def __init__(
        self, cons: list[_Cons], paths: list[tuple[int, ...]], confs: dict, mdds: dict, f: int
    ) -> None:
        self.cons = cons
        self.paths = paths
        self.confs = confs
        self.nconf = sum(len(v) for v in confs.values())
        self.mdds = mdds
        self.g = sum(len(p) - 1 for p in paths)
        self.f = f if f > self.g else self.g
        self.h_done = False
        self.chosen: tuple | None = None


def _add_cons(cons: _Cons, goal: int, nc: int, t: int, kind: int, a: int, b: int) -> _Cons:
    """Forbid being at ``a`` at ``t`` (``kind`` 0) or moving ``a -> b`` between ``t`` and ``t + 1``."""
    vset, eset, tcons, goal_min, max_len, blk = cons
    if kind == 0:
        vset = vset | {t * nc + a}
        if a == goal and t + 1 > goal_min:
            goal_min = t + 1
    else:
        eset = eset | {(t * nc + a) * nc + b}
    return (vset, eset, t if t > tcons else tcons, goal_min, max_len, blk)


def _finish_after(cons: _Cons, t: int) -> _Cons:
    """Length constraint ``cost > t``: the agent may not rest on its goal from ``t`` or earlier.

    The low level enforces it as "the path ends at ``t + 1`` or later", a relaxation (a path may wait on
    the goal from before ``t``). The split stays complete and the path length a lower bound; a path that
    slips through keeps its conflict, which the next split resolves with an ordinary vertex constraint.
    """
    vset, eset, tcons, goal_min, max_len, blk = cons
    return (vset, eset, t if t > tcons else tcons, max(goal_min, t + 1), max_len, blk)


def _finish_by(cons: _Cons, t: int) -> _Cons:
    """Length constraint ``cost <= t``: the agent rests on its goal from ``t`` on."""
    vset, eset, tcons, goal_min, max_len, blk = cons
    return (vset, eset, tcons, goal_min, min(max_len, t), blk)


def _bar_until(cons: _Cons, goal: int, nc: int, cell: int, last: int) -> _Cons:
    """Forbid ``cell`` at every time ``0..last`` (a range constraint)."""
    vset, eset, tcons, goal_min, max_len, blk = cons
    vset = vset | {t * nc + cell for t in range(last + 1)}
    if cell == goal and last + 1 > goal_min:
        goal_min = last + 1
    return (vset, eset, last if last > tcons else tcons, goal_min, max_len, blk)


def _corridor_split(
    prob: _Problem, node: _Node, i: int, j: int, conf: tuple[int, int, int, int]
) -> tuple | None:
    """Range constraints for a conflict inside a corridor, or ``None`` when they do not apply.

    Let the corridor have ends ``e1``, ``e2`` and ``k - 1`` cells, and let neither agent start inside
    it. If agent ``i`` first reaches ``e2`` before it could by a route that avoids the corridor, it came
    through the corridor from ``e1``; if ``j`` did the same the other way, one of them passed only after
    the other had left, since two agents cannot cross inside a chain of single cells. Hence every plan
    keeps ``i`` off ``e2`` during ``[0, min(t_i'(e2) - 1, t_j(e1) + k)]`` or ``j`` off ``e1`` during
    ``[0, min(t_j'(e1) - 1, t_i(e2) + k)]``, with ``t`` the distance and ``t'`` the distance that avoids
    the corridor. Both branches must exclude the current paths, or the split would not progress.
    """
    _t, kind, a, b = conf
    info = prob.corridor(a)
    if info is None and kind == 1:
        info = prob.corridor(b)
    if info is None:
        return None
    cid, cells, e1, e2 = info
    si, sj = prob.starts[i], prob.starts[j]
    if si in cells or sj in cells:
        return None
    k = len(cells) + 1
    pi, pj = node.paths[i], node.paths[j]
    for xi, xj in ((e2, e1), (e1, e2)):  # the end each agent leaves the corridor by
        ri = min(prob.dist_from(xi, cid)[si] - 1, prob.dist_from(xj)[sj] + k)
        rj = min(prob.dist_from(xj, cid)[sj] - 1, prob.dist_from(xi)[si] + k)
        if xi in pi[: ri + 1] and xj in pj[: rj + 1]:
            return ((i, xi, ri), (j, xj, rj))
    return None


def _bar(cons: _Cons, cell: int, t: int) -> _Cons:
    """Forbid ``cell`` at every time from ``t`` on."""
    vset, eset, tcons, goal_min, max_len, blk = cons
    if blk.get(cell, _INF) <= t:
        return cons
    return (vset, eset, t if t > tcons else tcons, goal_min, max_len, {**blk, cell: t})


def _cbs(
    prob: _Problem, budget: _Budget, horizon: int | None, groups: Sequence[Sequence[int]], merge_after: int
) -> _Node | None:
    """CBS over groups of agents (merged groups plan jointly). Without ``horizon``: the SoC-optimal node.
    With it: a conflict-free node whose paths all end by ``horizon``, or ``None`` when there is none.
    Raises ``_Merge`` when two groups have been split on more than ``merge_after`` times."""
    k, nc = prob.k, prob.nc
    feas = horizon is not None
    hz = horizon if feas else _INF
    gof = [0] * k
    for gi, grp in enumerate(groups):
        for a in grp:
            gof[a] = gi

    def merge_ok(gp: tuple[int, int]) -> bool:
        return (
            _space(prob, (*groups[gp[0]], *groups[gp[1]])) << (len(groups[gp[0]]) + len(groups[gp[1]]))
            <= MERGE_SPACE
        )

    def replan(gi: int, cons: list[_Cons], paths: list) -> bool:
        members = groups[gi]
        others = [paths[o] for o in range(k) if gof[o] != gi and paths[o] is not None]
        if len(members) == 1:
            p = _plan(prob, members[0], cons[members[0]], others, hz, feas, budget)
            if p is None:
                return False
            paths[members[0]] = p
            return True
        ps = _plan_group(prob, members, cons, others, hz, feas, budget)
        if ps is None:
            return False
        for a, p in zip(members, ps, strict=True):
            paths[a] = p
        return True

    cons0 = [_NO_CONS] * k
    paths: list = [None] * k
    for gi in range(len(groups)):
        if not replan(gi, cons0, paths):
            return None
    confs = {}
    for i, j in combinations(range(k), 2):
        if gof[i] != gof[j]:
            c = _pair_conflicts(paths[i], paths[j])
            if c:
                confs[(i, j)] = c
    root = _Node(cons0, paths, confs, {}, 0)
    counter = 0
    splits: dict[tuple[int, int], int] = {}
    open_: list[tuple[int, int, int, _Node]] = []

    def key(nd: _Node) -> tuple[int, int]:
        return (nd.nconf, nd.g) if feas else (nd.f, nd.nconf)

    heapq.heappush(open_, (*key(root), counter, root))
    while open_:
        node = heapq.heappop(open_)[-1]
        if node.nconf == 0:
            return node
        if not node.h_done:
            if not _classify(prob, node, horizon, groups, gof):
                continue  # (feasibility) a conflict no pair of paths can avoid
            if not feas and open_ and node.f > open_[0][0]:
                counter += 1
                heapq.heappush(open_, (*key(node), counter, node))
                continue
        budget.left -= CBS_NODE_COST
        if budget.left < 0:
            raise _OutOfBudget
        (i, j), (t, kind, a, b), skip, fin = node.chosen  # type: ignore[misc]
        gp = (gof[i], gof[j]) if gof[i] < gof[j] else (gof[j], gof[i])
        splits[gp] = splits.get(gp, 0) + 1
        if splits[gp] > merge_after and merge_ok(gp):
            raise _Merge(*gp)
        if fin >= 0:
            # target conflict: agent `fin` rests on its goal `a` and the other agent stands on it at t.
            # Either fin's cost exceeds t, or fin rests there from t on and nobody may enter it again.
            ga = a
            bar = {x: _bar(node.cons[x], ga, t) for x in range(k) if x != fin}
            bar[fin] = _finish_by(node.cons[fin], t)
            late = [
                x
                for x in range(k)
                if x != fin and any(node.paths[x][tt] == ga for tt in range(t, len(node.paths[x])))
            ]
            branches = [({fin: _finish_after(node.cons[fin], t)}, [fin]), (bar, late)]
        else:
            corr = _corridor_split(prob, node, i, j, (t, kind, a, b))
            if corr is not None:
                branches = [({x: _bar_until(node.cons[x], prob.goals[x], nc, e, r)}, [x]) for x, e, r in corr]
                skip = None
            else:
                branches = [
                    ({i: _add_cons(node.cons[i], prob.goals[i], nc, t, kind, a, b)}, [i]),
                    ({j: _add_cons(node.cons[j], prob.goals[j], nc, t, kind, b, a)}, [j]),
                ]
        children = []
        bypassed = False
        for idx, (updates, touched) in enumerate(branches):
            if skip == idx:
                continue
            cons = list(node.cons)
            for x, cx in updates.items():
                cons[x] = cx
            cpaths = list(node.paths)
            regroup = sorted({gof[x] for x in touched})
            if not all(replan(gi, cons, cpaths) for gi in regroup):
                continue
            moved = [x for gi in regroup for x in groups[gi]]
            rg = set(regroup)
            cconfs = {pr: c for pr, c in node.confs.items() if gof[pr[0]] not in rg and gof[pr[1]] not in rg}
            for a1 in moved:
                for o in range(k):
                    if gof[o] != gof[a1] and (gof[o] not in rg or o > a1):
                        pr = (a1, o) if a1 < o else (o, a1)
                        c = _pair_conflicts(cpaths[pr[0]], cpaths[pr[1]])
                        if c:
                            cconfs[pr] = c
            cmdds = {a2: md for a2, md in node.mdds.items() if gof[a2] not in rg}
            child = _Node(cons, cpaths, cconfs, cmdds, node.f)
            if child.nconf == 0 and (feas or child.g <= node.f):
                return child
            if not feas and child.g == node.g and child.nconf < node.nconf:
                # bypass: the child's paths are as cheap and satisfy the parent's constraints too
                node.paths, node.confs, node.nconf, node.mdds = cpaths, cconfs, child.nconf, cmdds
                node.h_done = False
                bypassed = True
                break
            children.append(child)
        if bypassed:
            counter += 1
            heapq.heappush(open_, (*key(node), counter, node))
            continue
        for child in children:
            counter += 1
            heapq.heappush(open_, (*key(child), counter, child))
    return None


def _classify(
    prob: _Problem, node: _Node, horizon: int | None, groups: Sequence[Sequence[int]], gof: Sequence[int]
) -> bool:
    """Choose the conflict to split on (cardinal first, then semi-cardinal, then the earliest) and raise
    ``node.f`` by the CG heuristic. With a ``horizon``, return ``False`` when some conflict is cardinal
    for both agents' depth-``horizon`` diagrams: then no plan within the horizon extends the node.
    Agents of merged groups count as never cardinal (their diagrams are not built)."""
    mdds = node.mdds
    paths = node.paths
    card_edges = []
    best: tuple | None = None
    best_rank = (9, _INF)
    for (i, j), lst in node.confs.items():
        single_i = len(groups[gof[i]]) == 1
        single_j = len(groups[gof[j]]) == 1
        li = len(paths[i]) - 1 if horizon is None else horizon
        lj = len(paths[j]) - 1 if horizon is None else horizon
        mi = mj = None
        if single_i:
            mi = mdds.get(i)
            if mi is None:
                mi = mdds[i] = _mdd(prob, i, node.cons[i], li)
        if single_j:
            mj = mdds.get(j)
            if mj is None:
                mj = mdds[j] = _mdd(prob, j, node.cons[j], lj)
        pair_card = False
        ri, rj = len(paths[i]) - 1, len(paths[j]) - 1
        for conf in lst:
            t, kind, _a, _b = conf
            fin = -1
            if kind == 0:
                # a target conflict when one of them already rests on its goal (its cost then must grow
                # or nobody may enter that goal again)
                fin = i if t >= ri else (j if t >= rj else -1)
                ci = (mi is not None and (t >= li or len(mi[t]) == 1)) or (fin == i and horizon is None)
                cj = (mj is not None and (t >= lj or len(mj[t]) == 1)) or (fin == j and horizon is None)
            else:
                ci = mi is not None and len(mi[t]) == 1 and len(mi[t + 1]) == 1
                cj = mj is not None and len(mj[t]) == 1 and len(mj[t + 1]) == 1
            if ci and cj:
                if horizon is not None:
                    return False
                pair_card = True
                rank = (0, t)
            elif ci or cj:
                rank = (1, t)
            else:
                rank = (2, t)
            if rank < best_rank:
                best_rank = rank
                # with a horizon, the branch that constrains the agent whose diagram is a single cell fails
                skip = (0 if ci else 1) if horizon is not None and rank[0] == 1 and fin < 0 else None
                best = ((i, j), conf, skip, fin)
            if pair_card and horizon is None:
                break
        if pair_card:
            card_edges.append((gof[i], gof[j]))
    node.chosen = best
    node.h_done = True
    if horizon is None:
        hval = _min_vertex_cover(card_edges)
        if node.g + hval > node.f:
            node.f = node.g + hval
    return True


def _plan_group(
    prob: _Problem,
    members: Sequence[int],
    cons: Sequence[_Cons],
    others: Sequence[Sequence[int]],
    horizon: int,
    conflict_first: bool,
    budget: _Budget,
) -> list[tuple[int, ...]] | None:
    """Optimal joint paths of a merged group of agents: A* with operator decomposition.

    The state is (member to move next, time, positions, positions at the step's start, finished flags).
    Members move one at a time within a step and an unfinished member pays 1 per step. A member on its
    goal may declare itself finished (free) once no constraint of its own needs it off the goal again;
    it then never moves and blocks its cell. Time is folded once every constraint and every path in
    ``others`` lies in the past, so the search is finite and ``None`` proves there is no plan.
    """
    m = len(members)
    nc, nbrs = prob.nc, prob.nbrs
    # each member's exact cost-to-go under its own constraints: the heuristic, and a member that cannot
    # reach its goal alone rules the group out at a fraction of the joint cost
    rows = [_cost_to_go(prob, a, cons[a], budget) for a in members]
    last = [len(r) - 1 for r in rows]
    if any(r[0][prob.starts[a]] > min(horizon, cons[a][4]) for r, a in zip(rows, members, strict=True)):
        return None
    goals = [prob.goals[a] for a in members]
    vsets = [cons[a][0] for a in members]
    esets = [cons[a][1] for a in members]
    gmins = [cons[a][3] for a in members]
    hzs = [min(horizon, cons[a][4]) for a in members]
    blks = [cons[a][5] for a in members]
    tcons = max(cons[a][2] for a in members)
    occ, emov, final, tcat, gvis = _cat(others, goals, nc)
    tstat = tcat if tcat > tcons + 1 else tcons + 1
    use_cat = bool(others)
    full = (1 << m) - 1
    start = tuple(prob.starts[a] for a in members)
    h0 = sum(rows[x][0][start[x]] for x in range(m))
    skey = (0, 0, start, None, 0)
    # entries: (3 ordering keys, counter, t, g, conflicts, f, state, parent state). With conflict_first:
    # fewest conflicts, then f; otherwise f, then the deepest state (a dive), then fewest conflicts.
    heap: list = [
        (0, h0, 0, 0, 0, 0, 0, h0, skey, None) if conflict_first else (h0, 0, 0, 0, 0, 0, 0, h0, skey, None)
    ]
    parent: dict = {}
    counter = 0
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        t, g, c, f, state, par = pop(heap)[4:]
        if state in parent:
            continue
        parent[state] = par
        kk, _, cur, old, mask = state
        if old is None:
            if mask == full:
                return _group_paths(parent, state, m)
            old = cur
        budget.left -= JOINT_STATE_COST
        if budget.left < 0:
            raise _OutOfBudget
        a = kk
        pa = cur[a]
        moved = cur[:a]
        olds = old[:a]
        t1 = t + 1
        ra, la = rows[a], last[a]
        hrest = f - g - ra[t if t < la else la][pa]
        ha = ra[t1 if t1 < la else la]
        succ = []
        if pa == goals[a] and t >= gmins[a] and pa not in moved:
            extra = sum(1 for x in gvis[a] if x > t) if use_cat else 0
            succ.append((pa, mask | 1 << a, 0, c + extra))
        vb = t1 * nc
        eb = (t * nc + pa) * nc
        va, ea, hza, blk = vsets[a], esets[a], hzs[a], blks[a]
        # the cell of the member that moved into ours this step (no swapping with it), finished members
        swap = olds[moved.index(pa)] if pa in moved else -1
        parked = [cur[b] for b in range(a + 1, m) if mask >> b & 1] if mask >> (a + 1) else ()
        for w in nbrs[pa]:
            if t1 + ha[w] > hza or w in moved or (vb + w) in va:
                continue
            if blk and t1 >= blk.get(w, _INF):
                continue
            if w != pa and (w == swap or w in parked or (eb + w) in ea):
                continue
            c1 = c
            if use_cat:
                c1 += occ.get(vb + w, 0)
                fw = final.get(w)
                if fw is not None and t1 >= fw:
                    c1 += 1
                if w != pa and ((t * nc + w) * nc + pa) in emov:
                    c1 += 1
            succ.append((w, mask, 1, c1))
        for w, m2, cost, c1 in succ:
            ncur = (*moved, w, *cur[a + 1 :])
            nk = a + 1
            while nk < m and m2 >> nk & 1:
                nk += 1
            g2 = g + cost
            f2 = g2 + hrest + (ha[w] if cost else 0)
            if nk < m:
                t2 = t
                nstate = (nk, t if t < tstat else tstat, ncur, old, m2)
            else:
                nk = 0
                while nk < m and m2 >> nk & 1:
                    nk += 1
                t2 = t1
                nstate = (nk if nk < m else 0, t1 if t1 < tstat else tstat, ncur, None, m2)
            if nstate in parent:
                continue
            counter += 1
            push(
                heap,
                (c1, f2, -g2, counter, t2, g2, c1, f2, nstate, state)
                if conflict_first
                else (f2, -g2, c1, counter, t2, g2, c1, f2, nstate, state),
            )
    return None


def _cost_to_go(prob: _Problem, a: int, cons: _Cons, budget: _Budget) -> list[list[int]]:
    """Rows ``t = 0..T`` of agent ``a``'s least remaining cost from each cell at time ``t`` under its
    constraints alone (row ``T``, past the last constraint, holds for every later time)."""
    vset, eset, tcons, goal_min, _max_len, blk = cons
    if tcons < 0 and not blk:
        return [prob.h[a]]
    nc, nbrs, goal = prob.nc, prob.nbrs, prob.goals[a]
    tstat = tcons + 1
    # from tstat on only the barred cells remain: a breadth-first search around them
    static = [_INF] * nc
    static[goal] = 0
    queue = [goal]
    for u in queue:
        du = static[u] + 1
        for w in nbrs[u]:
            if static[w] == _INF and w not in blk:
                static[w] = du
                queue.append(w)
    rows = [static]
    cells = [v for v in range(nc) if nbrs[v]]
    for t in range(tstat - 1, -1, -1):
        nxt = rows[-1]
        row = [_INF] * nc
        vb = (t + 1) * nc
        for v in cells:
            if v == goal and t >= goal_min:
                row[v] = 0
                continue
            best = _INF
            eb = (t * nc + v) * nc
            for w in nbrs[v]:
                x = nxt[w]
                if x < best and (vb + w) not in vset and (w == v or (eb + w) not in eset):
                    if not blk or t + 1 < blk.get(w, _INF):
                        best = x
            row[v] = best + 1 if best < _INF else _INF
        rows.append(row)
    rows.reverse()
    budget.left -= (tstat + 1) * len(cells) // 4
    return rows


def _group_paths(parent: dict, state: tuple, m: int) -> list[tuple[int, ...]]:
    frames = []
    while state is not None:
        if state[3] is None:  # the first state of a step
            frames.append((state[2], state[4]))
        state = parent[state]
    frames.reverse()
    out = []
    for x in range(m):
        end = next(i for i, (_, mask) in enumerate(frames) if mask >> x & 1) - 1
        out.append(tuple(fr[0][x] for fr in frames[: end + 1]))
    return out


def _joint_makespan(prob: _Problem, budget: _Budget, lb: int, ub: int) -> int:
    """Fewest steps after which every agent stands on its goal, by A* with operator decomposition over
    the joint positions (no time in the state: the first arrival is the optimum); ``ub`` when nothing
    shorter exists. Used where the product of the agents' region sizes is small."""
    k = prob.k
    nbrs, hs = prob.nbrs, prob.h
    goals = tuple(prob.goals)
    start_pos = tuple(prob.starts)
    start = (0, start_pos, start_pos)
    seen: set[tuple] = set()
    heap = [(max(lb, max(hs[a][start_pos[a]] for a in range(k))), 0, start)]
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        f, negt, state = pop(heap)
        if f >= ub:
            return ub
        if state in seen:
            continue
        seen.add(state)
        a, cur, old = state
        if a == 0 and cur == goals:
            return -negt
        budget.left -= JOINT_STATE_COST
        if budget.left < 0:
            raise _OutOfBudget
        t = -negt + (1 if a == 0 else 0)  # a step is paid when its first agent moves
        moved = cur[:a]
        pa = old[a]
        swap = old[moved.index(pa)] if pa in moved else -1
        for w in nbrs[pa]:
            if w in moved or (w == swap and w != pa):
                continue
            ncur = (*moved, w, *cur[a + 1 :])
            if a + 1 == k:
                nstate = (0, ncur, ncur)
                hv = max(hs[b][ncur[b]] for b in range(k))
            else:
                nstate = (a + 1, ncur, old)
                hv = max(
                    max(hs[b][ncur[b]] for b in range(a + 1)),
                    max(hs[b][ncur[b]] for b in range(a + 1, k)) - 1,
                )
            if nstate not in seen:
                push(heap, (max(t + hv, f), -t, nstate))
    return ub


# -- public entry points -------------------------------------------------------------------------------
def _cost(path: Sequence[int], goal: int) -> int:
    t = len(path) - 1
    while t > 0 and path[t - 1] == goal:
        t -= 1
    return t


def solve(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    node_budget: int = DEFAULT_NODE_BUDGET,
) -> Solution:
    """Optimal sum of costs, optimal makespan and an SoC-optimal plan of one board.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell ``(row, col)``; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        node_budget: Work limit of the whole call in units of about one low-level A* expansion (see
            the module docstring); the default settles all but the hardest few percent of crowded
            5-agent boards in about 0.1 s each.

    Returns:
        The :class:`Solution`.

    Raises:
        UnsolvableInstance: An agent cannot reach its goal, or the joint search proved that no
            conflict-free plan exists.
        SolverBudgetExceeded: The searches needed more than ``node_budget``.
        InstanceFormatError: The board itself is malformed.

    >>> sol = solve(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    >>> sol.soc, sol.makespan, sol.shortest_sum
    (6, 4, 4)
    """
    n = _check_grid(grid)
    if len(starts) != len(goals) or not starts:
        raise InstanceFormatError(f"{len(starts)} starts but {len(goals)} goals; give one of each per agent")
    s_ids = [_check_cell(grid, s, f"agent {i}'s start") for i, s in enumerate(starts)]
    g_ids = [_check_cell(grid, g, f"agent {i}'s goal") for i, g in enumerate(goals)]
    if len(set(s_ids)) != len(s_ids) or len(set(g_ids)) != len(g_ids):
        raise InstanceFormatError(
            "two agents share a start or a goal cell; starts and goals must be distinct"
        )
    if node_budget < 1:
        raise ValueError(f"node_budget must be a positive integer, got {node_budget}")
    prob = _Problem(grid, s_ids, g_ids)
    shortest = []
    for i in range(prob.k):
        d = prob.h[i][s_ids[i]]
        if d >= _INF:
            raise UnsolvableInstance(
                f"agent {i} cannot reach its goal {tuple(goals[i])} from {tuple(starts[i])}: holes separate "
                "them; put the goal in the start's connected region of frozen cells"
            )
        shortest.append(d)
    budget = _Budget(node_budget)
    try:
        paths, groups = _solve_soc(prob, budget)
        costs = [_cost(p, g) for p, g in zip(paths, g_ids, strict=True)]
        makespan = _solve_makespan(prob, budget, max(shortest), max(costs), groups)
    except _OutOfBudget:
        raise SolverBudgetExceeded(
            f"the optimum was not settled within node_budget={node_budget}; raise node_budget or use a board "
            "with fewer agents or more room to pass"
        ) from None
    soc = sum(costs)
    horizon = max(costs)
    out = tuple(tuple(divmod(p[t] if t < len(p) else p[-1], n) for t in range(horizon + 1)) for p in paths)
    return Solution(soc=soc, makespan=makespan, shortest_sum=sum(shortest), paths=out)


def _merged(groups: list[tuple[int, ...]], pair: tuple[int, int]) -> list[tuple[int, ...]]:
    gi, gj = pair
    rest = [g for x, g in enumerate(groups) if x not in pair]
    return [*rest, tuple(sorted(groups[gi] + groups[gj]))]


def _search(
    prob: _Problem, budget: _Budget, horizon: int | None, groups: list[tuple[int, ...]]
) -> tuple[_Node | None, list[tuple[int, ...]]]:
    """CBS with merge-and-restart; returns the node (``None``: no plan) and the final groups."""
    while True:
        try:
            return _cbs(prob, budget, horizon, groups, MERGE_AFTER), groups
        except _Merge as exc:
            groups = _merged(groups, exc.pair)
            logger.debug("merging agents %s", groups[-1])


def _space(prob: _Problem, agents: Sequence[int] | None = None) -> int:
    """About the number of joint positions of ``agents`` (all by default): the product of their region
    sizes, less one cell for every earlier agent of a region of the same size (usually the same one)."""
    space = 1
    seen: dict[int, int] = {}
    for a in range(prob.k) if agents is None else agents:
        r = prob.region[a]
        space *= max(1, r - seen.get(r, 0))
        seen[r] = seen.get(r, 0) + 1
    return space


def _solve_soc(prob: _Problem, budget: _Budget) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    everyone = tuple(range(prob.k))
    if _space(prob) << prob.k <= JOINT_SPACE_SOC:
        paths = _plan_group(prob, everyone, [_NO_CONS] * prob.k, (), _INF, False, budget)
        if paths is None:
            raise UnsolvableInstance(
                "no conflict-free plan exists: the agents block each other for good (e.g. they must pass "
                "each other in a dead-end corridor); change the starts, goals or holes"
            )
        return paths, [everyone]
    node, groups = _search(prob, budget, None, [(i,) for i in range(prob.k)])
    if node is None:
        raise UnsolvableInstance(
            "no conflict-free plan exists: the agents block each other for good (e.g. they must pass each "
            "other in a dead-end corridor); change the starts, goals or holes"
        )
    return node.paths, groups


def _solve_makespan(prob: _Problem, budget: _Budget, lb: int, ub: int, groups: list[tuple[int, ...]]) -> int:
    if lb >= ub:
        return ub
    if _space(prob) <= JOINT_SPACE:
        return _joint_makespan(prob, budget, lb, ub)
    t = lb
    while t < ub:
        node, groups = _search(prob, budget, t, groups)
        if node is not None:
            return t
        t += 1
    return ub


def solve_instance(inst: Instance, **kw: int) -> Solution:
    """:func:`solve` on an :class:`~envengineer.mapf.instance.Instance` (keyword arguments pass through)."""
    return solve(inst.grid, inst.starts, inst.goals, **kw)
