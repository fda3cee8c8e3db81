"""Conflict-Based Search: pairwise conflicts, the CG heuristic (minimum vertex cover), the high-level
node and its constraint helpers, corridor and target symmetry reasoning, conflict classification, and
:func:`_cbs` itself, which plans merged groups with the joint search."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import combinations

from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.joint import _plan_group
from envengineer.mapf.solver.problem import (
    _NO_CONS,
    _Budget,
    _Cons,
    _mdd,
    _OutOfBudget,
    _plan,
    _Problem,
    _space,
)

#: Budget units a high-level CBS node costs (its conflict classification and decision diagrams), against
#: 1 for a state of the single-agent A*; a measured ratio.
CBS_NODE_COST = 20
#: Two groups of agents that have been split ``merge_after`` times (``MERGE_AFTER`` of the package) merge
#: only while their joint state space (see ``_space``, times 2 ** agents for the "finished" flags) stays
#: within ``MERGE_SPACE``: a joint search pays off on small, crowded regions, while on larger ones CBS
#: with symmetry reasoning does better.
MERGE_SPACE = 20_000


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
    prob: _Problem,
    budget: _Budget,
    horizon: int | None,
    groups: Sequence[Sequence[int]],
    merge_after: int,
    root_cons: Sequence[_Cons] | None = None,
) -> _Node | None:
    """CBS over groups of agents (merged groups plan jointly). Without ``horizon``: the SoC-optimal node.
    With it: a conflict-free node whose paths all end by ``horizon``, or ``None`` when there is none.
    Raises ``_Merge`` when two groups have been split on more than ``merge_after`` times.

    ``root_cons`` (one per agent) are constraints every plan must keep from the root on: the teacher's
    paths written before (:mod:`~envengineer.mapf.solver.teacher`). Every split stays complete under
    them, since each split holds for every conflict-free plan and a constrained plan is one of those."""
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
        ps = _plan_group(prob, members, cons, others, hz, feas, budget, pairs=prob.aids)
        if ps is None:
            return False
        for a, p in zip(members, ps, strict=True):
            paths[a] = p
        return True

    cons0 = list(root_cons) if root_cons is not None else [_NO_CONS] * k
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
            if not _classify(prob, node, horizon, groups, gof, budget):
                continue  # (feasibility) a conflict no pair of paths can avoid
            if not feas and open_ and node.f > open_[0][0]:
                counter += 1
                heapq.heappush(open_, (*key(node), counter, node))
                continue
        if not feas and root_cons is None and node.f > prob.soc_floor:
            prob.soc_floor = node.f  # the least f of the open nodes: no plan costs less
        budget.left -= CBS_NODE_COST
        if budget.left < 0 and budget.exhausted():
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


def _mdds_compatible(
    prob: _Problem, members: tuple[int, ...], mi: list[set[int]], mj: list[set[int]], budget: _Budget
) -> bool:
    """Whether the decision diagrams of two agents hold a pair of paths without a vertex or swap conflict
    (an agent stays on its goal after its diagram's last level): a depth-first search over pairs of
    diagram cells, each pair visited once. Edge constraints are not looked at, so a ``True`` may be
    wrong but a ``False`` never is: no pair of paths of these lengths avoids the other agent."""
    a, b = members
    nbrs = prob.nbrs
    di, dj = len(mi) - 1, len(mj) - 1
    depth = di if di > dj else dj
    gi, gj = prob.goals[a], prob.goals[b]
    lvi = [mi[t] if t <= di else {gi} for t in range(depth + 1)]
    lvj = [mj[t] if t <= dj else {gj} for t in range(depth + 1)]
    start = (0, prob.starts[a], prob.starts[b])
    if start[1] not in lvi[0] or start[2] not in lvj[0]:
        return False
    dead: set[tuple[int, int, int]] = set()
    todo = [start]
    seen = 0
    while todo:
        t, u, v = todo.pop()
        if t == depth:
            budget.left -= seen
            return True
        if (t, u, v) in dead:
            continue
        dead.add((t, u, v))
        seen += 1
        ni, nj = lvi[t + 1], lvj[t + 1]
        for u2 in nbrs[u]:
            if u2 not in ni:
                continue
            for v2 in nbrs[v]:
                if v2 == u2 or v2 not in nj or (u2 == v and v2 == u):
                    continue
                if (t + 1, u2, v2) not in dead:
                    todo.append((t + 1, u2, v2))
    budget.left -= seen
    return False


def _classify(
    prob: _Problem,
    node: _Node,
    horizon: int | None,
    groups: Sequence[Sequence[int]],
    gof: Sequence[int],
    budget: _Budget,
) -> bool:
    """Choose the conflict to split on (cardinal first, then semi-cardinal, then the earliest) and raise
    ``node.f`` by the CG heuristic. With a ``horizon``, return ``False`` when some conflict is cardinal
    for both agents' depth-``horizon`` diagrams, or (with the slow boards' aids, ``prob.aids``) when two
    conflicting agents' depth-``horizon`` diagrams hold no conflict-free pair of paths: then no plan
    within the horizon extends the node.
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
        elif mi is not None and mj is not None and horizon is not None and prob.aids:
            if not _mdds_compatible(prob, (i, j), mi, mj, budget):
                return False
    node.chosen = best
    node.h_done = True
    if horizon is None:
        hval = _min_vertex_cover(card_edges)
        if node.g + hval > node.f:
            node.f = node.g + hval
    return True
