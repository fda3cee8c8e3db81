"""The search problem shared by all searches: the work budget, the board as integer cells with each
agent's distance tables and corridors, per-agent constraints, the single-agent space-time A*, the
conflict-avoidance table, decision diagrams (MDDs) and the joint state-space estimate."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from envengineer.mapf.solver.grid import _INF, _bfs, _neighbours

_T = TypeVar("_T")


class _Budget:
    """Work counters shared by all searches of one ``solve`` call, with an optional wall-clock deadline.

    The searches spend ``left`` and stop when it drops below zero, unless :meth:`exhausted` says otherwise.
    Without a deadline ``left`` is the whole budget, so the answer does not depend on the machine. With one,
    the budget is handed out in chunks of ``CHUNK`` units and the clock is read only when a chunk runs out:
    the hot loops stay as cheap as before and the call ends by the deadline (give or take one chunk).
    """

    __slots__ = ("deadline", "left", "reserve", "total")

    CHUNK = 4_000

    def __init__(self, node_budget: int, time_limit: float | None = None) -> None:
        self.total = node_budget
        if time_limit is None:
            self.deadline = None
            self.left = node_budget
            self.reserve = 0
        else:
            self.deadline = time.monotonic() + time_limit
            self.left = min(node_budget, self.CHUNK)
            self.reserve = node_budget - self.left

    def exhausted(self) -> bool:
        """Called when ``left < 0``: refill from the reserve while time remains; True when work must stop."""
        while self.left < 0 and self.reserve > 0:
            if self.deadline is not None and time.monotonic() > self.deadline:
                return True
            take = min(self.reserve, self.CHUNK)
            self.reserve -= take
            self.left += take
        return self.left < 0

    @property
    def used(self) -> int:
        """Units spent so far; above ``total`` when a search ran out (by the overshoot of its last step)."""
        return self.total - self.left - self.reserve

    @property
    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def within(self, units: int, search: Callable[[], _T]) -> _T | None:
        """``search()`` with at most ``units`` of this budget's work: its answer, or ``None`` when it needed
        more (what it spent stays counted, the rest of the budget stays for what comes next). When no more
        than ``units`` is left, running out ends the call as usual."""
        left, reserve = self.left, self.reserve
        if left + reserve <= units:
            return search()
        self.left, self.reserve = units, 0
        try:
            return search()
        except _OutOfBudget:
            return None
        finally:
            self.left += left - units  # what the search spent, from what there was
            self.reserve = reserve


#: Boards of at least this many agents get the searches' aids for slow boards: the pairs' tables in a
#: merged group's search, each pair's makespan as a bound and the dependency pruning of the horizon
#: searches (which then start from single agents), and the memory of the member rows and of the
#: constraint sets under which a search found no path. Each keeps the optima but changes the counted work,
#: and with it which draws a budgeted round keeps, and which of several optimal plans a search finds. On
#: boards of two and three agents (every CPU experiment's rounds, all fast) the searches stay as they
#: were measured, so a seeded round of them, and every figure measured from one, is the same as before.
AIDS_MIN_AGENTS = 4


class _OutOfBudget(Exception):
    """Internal: a search used up its share of the budget."""


class _Problem:
    """Cells as integers ``row * n + col``, neighbour lists and each agent's distance-to-goal table."""

    __slots__ = (
        "_chains",
        "_corr",
        "_dist",
        "aids",
        "dead",
        "delays_memo",
        "goals",
        "h",
        "k",
        "n",
        "nbrs",
        "nc",
        "pairs_memo",
        "region",
        "rows_memo",
        "soc_floor",
        "starts",
    )

    def __init__(
        self,
        grid: Sequence[str],
        starts: Sequence[int],
        goals: Sequence[int],
        aids: bool | None = None,
        *,
        nbrs: list[tuple[int, ...]] | None = None,
        h: list[list[int]] | None = None,
    ) -> None:
        # ``nbrs`` and ``h`` (each goal's distance table), when given, are the board's already computed:
        # a region of a board searched as a board of its own (see ``_solve_parts`` of the package)
        self.n = len(grid)
        self.nc = self.n * self.n
        self.nbrs = _neighbours(grid) if nbrs is None else nbrs
        self.starts = list(starts)
        self.goals = list(goals)
        self.k = len(starts)
        self.h = [_bfs(self.nbrs, g) for g in goals] if h is None else h
        self.region = [sum(1 for d in h if d < _INF) for h in self.h]  # cells each agent can reach
        self._corr: list[int] | None = None
        self._chains: list[tuple[frozenset[int], int, int]] = []
        self._dist: dict[tuple[int, int], list[int]] = {}
        #: each agent's cost-to-go rows under given constraints (the joint searches' heuristic)
        self.rows_memo: dict[tuple, list[list[int]]] = {}
        #: per agent, constraint sets (with the horizon) under which its single-agent search found no path
        self.dead: list[list[tuple[_Cons, int]]] = [[] for _ in starts]
        #: whether the searches use the aids of the slow boards (see :data:`AIDS_MIN_AGENTS`; a part of a
        #: board, ``aids`` given, keeps the whole board's)
        self.aids = self.k >= AIDS_MIN_AGENTS if aids is None else aids
        #: the cost-to-go tables of pairs of agents (a merged group's heuristic, ``pairs._pair_table``)
        self.pairs_memo: dict[tuple[int, int], Any] = {}
        #: the least delay of every pair of agents, once computed (``delays._pair_delays``; its answer boxed,
        #: since ``None`` is one: a pair that can never finish)
        self.delays_memo: tuple[dict[tuple[int, int], int] | None] | None = None
        #: the largest lower bound of the optimal sum of costs that the SoC search has proven (CBS's best
        #: node), where satisfiability takes over from it (:mod:`~envengineer.mapf.solver.sat`)
        self.soc_floor = 0

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

#: What a search that proved a board plan-less says.
NO_PLAN = (
    "no conflict-free plan exists: the agents block each other for good (e.g. they must pass each other in a "
    "dead-end corridor); change the starts, goals or holes"
)


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
    are broken by the number of conflicts with ``others``. ``None`` when no path exists within ``horizon``;
    the constraint sets of such answers are remembered per agent, and one at least as strict (see
    :func:`_stricter`) is answered at once: a target conflict's branch that bars a cell for good is tried
    again and again at other nodes with other constraints beside it. Its states are charged when it ends,
    and, with the aids of the slow boards, it stops where it runs past what the budget has left.
    """
    vset, eset, tcons, goal_min, max_len, blk = cons
    horizon = min(horizon, max_len)
    nc, nbrs, h, s, g = prob.nc, prob.nbrs, prob.h[i], prob.starts[i], prob.goals[i]
    occ, emov, final, tcat, (gvis,) = _cat(others, (g,), nc)
    tstat = tcat if tcat > tcons + 1 else tcons + 1
    use_cat = bool(others)
    closed: dict[int, int] = {}
    # the path ends on the goal no earlier than goal_min: a bound as exact as the distance, and without
    # it a constraint that keeps the agent off its goal until late has A* visit every cell at every time
    # before then
    dead = prob.dead[i] if prob.aids else None
    if dead and any(horizon <= d_horizon and _stricter(cons, d_cons) for d_cons, d_horizon in dead):
        return None
    stop = budget.left + budget.reserve if prob.aids else _INF  # the states it may visit
    f0 = h[s]
    heap: list[tuple[int, int, int, int, int]] = [(0, f0, 0, s, -1) if conflict_first else (f0, 0, 0, s, -1)]
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
        if len(closed) > stop:
            budget.left -= len(closed)
            raise _OutOfBudget
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
    if dead is not None and len(dead) < 16:
        dead.append((cons, horizon))
    return None


def _stricter(cons: _Cons, than: _Cons) -> bool:
    """Whether ``cons`` rules out every path that ``than`` rules out (so no path keeps ``cons`` when none
    keeps ``than``): a superset of its vertex and edge constraints, a goal no earlier and a length limit
    no later, and every barred cell barred no later."""
    vset, eset, _, goal_min, max_len, blk = cons
    v2, e2, _, g2, m2, b2 = than
    return (
        goal_min >= g2
        and max_len <= m2
        and v2 <= vset
        and e2 <= eset
        and all(blk.get(c, _INF) <= t for c, t in b2.items())
    )


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
