"""Joint search over a coupled group of agents: A* with operator decomposition for a merged group
(:func:`_plan_group`, guided by each member's exact cost-to-go and its pairs' tables, :mod:`.pairs`) and
for the optimal makespan of a small board (:func:`_joint_makespan`)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.pairs import _pair_table
from envengineer.mapf.solver.problem import _Budget, _cat, _Cons, _OutOfBudget, _Problem

#: Budget units a state of a joint search costs (a state of the single-agent A* costs 1); a measured
#: ratio.
JOINT_STATE_COST = 2
#: Groups of at most this many members are guided by their pairs' cost-to-go tables as well
#: (:mod:`~envengineer.mapf.solver.pairs`); a larger group by its members' own cost-to-go alone.
PAIR_GROUP_MAX = 3


def _plan_group(
    prob: _Problem,
    members: Sequence[int],
    cons: Sequence[_Cons],
    others: Sequence[Sequence[int]],
    horizon: int,
    conflict_first: bool,
    budget: _Budget,
    pairs: bool = False,
) -> list[tuple[int, ...]] | None:
    """Optimal joint paths of a merged group of agents: A* with operator decomposition.

    The state is (member to move next, time, positions, positions at the step's start, finished flags).
    Members move one at a time within a step and an unfinished member pays 1 per step. A member on its
    goal may declare itself finished (free) once no constraint of its own needs it off the goal again;
    it then never moves and blocks its cell. Time is folded once every constraint and every path in
    ``others`` lies in the past, so the search is finite and ``None`` proves there is no plan. A state's
    bound is its members' own cost-to-go summed or, with ``pairs`` (CBS's merged groups) and at most
    ``PAIR_GROUP_MAX`` members, the larger of that and :func:`_pairs_bound`. Either way the optimum is the
    same; the plan found among several optimal ones may differ.
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
    # the pairs' own cost-to-go (the others ignored), where a group is small enough for a table per pair
    tables = (
        [(x, y, _pair_table(prob, members[x], members[y], budget)) for x in range(m) for y in range(x + 1, m)]
        if pairs and 2 <= m <= PAIR_GROUP_MAX
        else []
    )
    occ, emov, final, tcat, gvis = _cat(others, goals, nc)
    tstat = tcat if tcat > tcons + 1 else tcons + 1
    use_cat = bool(others)
    full = (1 << m) - 1
    start = tuple(prob.starts[a] for a in members)
    hr0 = sum(rows[x][0][start[x]] for x in range(m))
    skey = (0, 0, start, None, 0)
    h0 = hr0
    if tables:
        h0 = max(h0, _pairs_bound(tables, rows, last, goals, nbrs, nc, start, None, 0, m, 0, 0, hr0))
    # entries: (3 ordering keys, counter, t, g, conflicts, the members' own cost-to-go summed, state,
    # parent state). With conflict_first: fewest conflicts, then f; otherwise f, then the deepest state (a
    # dive), then fewest conflicts.
    heap: list = [
        (0, h0, 0, 0, 0, 0, 0, hr0, skey, None) if conflict_first else (h0, 0, 0, 0, 0, 0, 0, hr0, skey, None)
    ]
    parent: dict = {}
    counter = 0
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        t, g, c, hr, state, par = pop(heap)[4:]
        if state in parent:
            continue
        parent[state] = par
        kk, _, cur, old, mask = state
        if old is None:
            if mask == full:
                return _group_paths(parent, state, m)
            old = cur
        budget.left -= JOINT_STATE_COST
        if budget.left < 0 and budget.exhausted():
            raise _OutOfBudget
        a = kk
        pa = cur[a]
        moved = cur[:a]
        olds = old[:a]
        t1 = t + 1
        ra, la = rows[a], last[a]
        hrest = hr - ra[t if t < la else la][pa]
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
            hr2 = hrest + (ha[w] if cost else 0)
            f2 = g2 + hr2
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
            if tables:  # a step's first state: everyone at t + 1; within a step: the members before nk
                mid = nstate[3] is not None
                hp = _pairs_bound(
                    tables,
                    rows,
                    last,
                    goals,
                    nbrs,
                    nc,
                    ncur,
                    nstate[3],
                    m2,
                    m,
                    nk if mid else 0,
                    t if mid else t1,
                    hr2,
                )
                if g2 + hp > f2:
                    f2 = g2 + hp
            counter += 1
            push(
                heap,
                (c1, f2, -g2, counter, t2, g2, c1, hr2, nstate, state)
                if conflict_first
                else (f2, -g2, c1, counter, t2, g2, c1, hr2, nstate, state),
            )
    return None


def _pairs_bound(
    tables: list,
    rows: list[list[list[int]]],
    last: list[int],
    goals: list[int],
    nbrs: list[tuple[int, ...]],
    nc: int,
    cur: tuple[int, ...],
    old: tuple[int, ...] | None,
    mask: int,
    m: int,
    moved: int,
    t: int,
    hr: int,
) -> int:
    """The group's cost-to-go bound from its pairs' tables: for each pair, its table's value plus the
    other members' own cost-to-go (``hr`` less the pair's), the largest over the pairs.

    Members before ``moved`` have made this step's move (they stand at ``t + 1``), the others not (at
    ``t``); ``old`` holds the step's starting cells (``None``, and ``moved`` 0, at the start of a step).
    Between the two moves of a pair, the later member's cheapest move (as the joint search allows it
    against the earlier one) is taken, which keeps the bound consistent for the search's one-member
    moves."""
    best = 0
    t1 = t + 1
    for x, y, tab in tables:
        fx, fy = mask >> x & 1, mask >> y & 1
        u, v = cur[x], cur[y]
        if fx and fy:
            pv = 0
        elif fx:
            pv = tab.first_done[v]
        elif fy:
            pv = tab.second_done[u]
        elif x < moved <= y:  # x has moved this step, y not yet
            both = tab.both
            pv = tab.second_done[u] if v == goals[y] and u != v else _INF
            back = old[x] if u == v else -1  # type: ignore[index]
            base = u * nc
            for v2 in nbrs[v]:
                if v2 != u and v2 != back:
                    c = both[base + v2] + 1
                    if c < pv:
                        pv = c
        else:
            pv = tab.both[u * nc + v]
        if m > 2:
            own = 0
            for z in (x, y):
                if not mask >> z & 1:
                    tz = t1 if z < moved else t
                    own += rows[z][tz if tz < last[z] else last[z]][cur[z]]
            pv += hr - own
        if pv > best:
            best = pv
    return best


def _cost_to_go(prob: _Problem, a: int, cons: _Cons, budget: _Budget) -> list[list[int]]:
    """Rows ``t = 0..T`` of agent ``a``'s least remaining cost from each cell at time ``t`` under its
    constraints alone (row ``T``, past the last constraint, holds for every later time)."""
    vset, eset, tcons, goal_min, _max_len, blk = cons
    if tcons < 0 and not blk:
        return [prob.h[a]]
    # a merged group is replanned at many nodes under the same constraints of a member: computed once
    key = (a, vset, eset, tcons, goal_min, tuple(sorted(blk.items())) if blk else ())
    known = prob.rows_memo.get(key) if prob.aids else None
    if known is not None:
        return known
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
    if prob.aids:
        if len(prob.rows_memo) >= 2_048:  # a few tens of MB at most
            prob.rows_memo.clear()
        prob.rows_memo[key] = rows
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
    # the earliest time each state was expanded at: ties of f go to the deeper state (a dive), so a state
    # can first be reached late, and being somewhere earlier is never worse (everybody may wait there)
    seen: dict[tuple, int] = {}
    heap = [(max(lb, max(hs[a][start_pos[a]] for a in range(k))), 0, start)]
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        f, negt, state = pop(heap)
        if f >= ub:
            return ub
        if seen.get(state, _INF) <= -negt:
            continue
        seen[state] = -negt
        a, cur, old = state
        if a == 0 and cur == goals:
            return -negt
        budget.left -= JOINT_STATE_COST
        if budget.left < 0 and budget.exhausted():
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
            if seen.get(nstate, _INF) > t:
                push(heap, (max(t + hv, f), -t, nstate))
    return ub


def _pair_makespan(prob: _Problem, a: int, b: int, budget: _Budget, cap: int) -> int:
    """Fewest steps after which agents ``a`` and ``b`` both stand on their goals, the other agents
    ignored (a lower bound of the board's makespan), or ``cap`` when that takes ``cap`` steps or more:
    A* over the pair's positions with the larger of the two distances as heuristic."""
    nbrs = prob.nbrs
    ha, hb = prob.h[a], prob.h[b]
    ga, gb = prob.goals[a], prob.goals[b]
    sa, sb = prob.starts[a], prob.starts[b]
    seen: dict[tuple[int, int], int] = {(sa, sb): 0}
    heap = [(max(ha[sa], hb[sb]), 0, sa, sb)]
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        f, negt, u, v = pop(heap)
        if f >= cap:
            return cap
        t = -negt
        if u == ga and v == gb:
            return t
        if seen.get((u, v), _INF) < t:
            continue
        budget.left -= JOINT_STATE_COST
        if budget.left < 0 and budget.exhausted():
            raise _OutOfBudget
        t1 = t + 1
        for u2 in nbrs[u]:
            fu = t1 + ha[u2]
            if fu >= cap:
                continue
            for v2 in nbrs[v]:
                if v2 == u2 or (u2 == v and v2 == u):
                    continue
                if seen.get((u2, v2), _INF) <= t1:
                    continue
                hv = hb[v2]
                f2 = t1 + (hv if hv > ha[u2] else ha[u2])
                if f2 >= cap:
                    continue
                seen[(u2, v2)] = t1
                push(heap, (f2, -t1, u2, v2))
    return cap
