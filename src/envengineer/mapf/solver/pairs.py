"""The exact cost-to-go of two agents planned together, the other agents ignored: the heuristic that makes
the joint search of a merged group cheap.

A merged group is replanned at every CBS node that constrains it, each time by A* over its joint
states. With the members' own cost-to-go as heuristic, that search visits every joint state whose
members' detours together stay below the group's true extra cost, and two agents that must let each
other pass on a crowded board pay several steps more than their shortest paths: hundreds of states a
replan. The pair's own cost-to-go, computed once for all nodes, already holds those detours, so a replan
explores mostly what the other agents' constraints add.

:func:`_pair_table` computes it over the pair's cells by value iteration on the joint search's own moves
(each agent moves or waits, the first then the second; no vertex or swap conflict; 1 per unfinished agent
per step; an agent on its goal may finish and then blocks its goal while the other walks on alone).
Starting from "unreachable" everywhere, sweep ``k`` settles every state that can finish within ``k``
steps, so the table is exact once a sweep changes nothing, and the states from which the pair can never
finish (two agents that cannot pass each other) stay unreachable. Being exact for a relaxation of the
group's search (the others ignored), it never overestimates and falls by at most a move's cost: the
search may take it with its members' own cost-to-go, the larger of the two, and still settle every
state once.
"""

from __future__ import annotations

import numpy as np

from envengineer.mapf.solver.grid import _INF, _bfs
from envengineer.mapf.solver.problem import _Budget, _OutOfBudget, _Problem

#: Budget units of one sweep over a pair whose agents reach ``r`` cells: ``PAIR_SWEEP_COST + r * r //
#: PAIR_ENTRIES_PER_UNIT`` (the fixed cost of its twenty numpy calls, and the reads of its ``r * r`` pairs
#: of cells, ten each), measured against the time of a unit of the searches.
PAIR_SWEEP_COST = 16
PAIR_ENTRIES_PER_UNIT = 150

_BIG = 1 << 20  # "unreachable" inside the numpy arrays (int32, and 2 + _BIG does not overflow)


class _PairTable:
    """``both[u * nc + v]``: the pair's cost-to-go with the first agent on ``u`` and the second on ``v``,
    neither finished; ``first_done[v]``: the second agent's once the first is finished on its goal (it
    walks around that cell); ``second_done[u]``: the first agent's once the second is finished."""

    __slots__ = ("both", "first_done", "second_done")

    def __init__(self, both: list[int], first_done: list[int], second_done: list[int]) -> None:
        self.both = both
        self.first_done = first_done
        self.second_done = second_done


def _blocked(nbrs: list[tuple[int, ...]], cell: int) -> list[tuple[int, ...]]:
    """The neighbour lists with ``cell`` never stepped into (a finished agent stands there)."""
    return [tuple(w for w in x if w != cell) if cell in x and v != cell else x for v, x in enumerate(nbrs)]


def _pair_table(prob: _Problem, i: int, j: int, budget: _Budget) -> _PairTable:
    """The cost-to-go table of agents ``i < j`` (see the module docstring), remembered per problem."""
    key = (i, j)
    known = prob.pairs_memo.get(key)
    if known is None:
        known = _sweep(prob, i, j, budget, None)
        assert isinstance(known, _PairTable)
        prob.pairs_memo[key] = known
    return known


def _pair_cost(prob: _Problem, i: int, j: int, budget: _Budget) -> int:
    """The pair's own optimum from their starts (``_INF`` if they can never both finish): the table's
    entry, with the sweeps stopped as soon as that entry is proven (see :func:`_sweep`)."""
    known = prob.pairs_memo.get((i, j))
    if known is not None:
        return known.both[prob.starts[i] * prob.nc + prob.starts[j]]
    if max(prob.h[i][prob.starts[i]], prob.h[j][prob.starts[j]]) >= _INF:
        return _INF  # one of them never reaches its goal
    if prob.h[j][prob.starts[j]] < prob.h[i][prob.starts[i]]:
        i, j = j, i  # the pair's optimum is the same either way; the nearer agent first needs fewer sweeps
    return _sweep(prob, i, j, budget, (prob.starts[i], prob.starts[j]))


def _sweep(
    prob: _Problem, i: int, j: int, budget: _Budget, start: tuple[int, int] | None
) -> _PairTable | int:
    """Value iteration to the fixed point: the whole table; or, given ``start``, the entry of that pair of
    cells only, once proven. After sweep ``k`` an entry holds the least cost of the plans in which the
    first agent moves fewer than ``k`` times before either finishes (or ``k`` times, the second finishing
    at the last). Any other plan has both unfinished for ``k`` steps at least: it costs the first agent
    ``k`` and the second ``k - 1`` and at least its distance to its goal, so an entry no larger than that
    is exact. That takes about the first agent's own part of the pair's makespan in sweeps rather than the
    farthest state's: half the work or less."""
    nc, nbrs = prob.nc, prob.nbrs
    hi, hj = prob.h[i], prob.h[j]
    gi, gj = prob.goals[i], prob.goals[j]
    first_done = _bfs(_blocked(nbrs, gi), gj)  # j alone, around i's goal
    second_done = _bfs(_blocked(nbrs, gj), gi)
    cells = [c for c in range(nc) if hi[c] < _INF or hj[c] < _INF]
    r = len(cells)
    pos = {c: x for x, c in enumerate(cells)}
    side = r + 1  # row and column r: the sentinel "no such move", unreachable
    nb = np.full((r, 5), r, dtype=np.int64)
    for x, c in enumerate(cells):
        for k, w in enumerate(nbrs[c]):  # the cell itself (a wait) first
            nb[x, k] = pos[w]

    def column(values: list[int]) -> np.ndarray:
        return np.minimum(np.array([values[c] for c in cells], dtype=np.int64), _BIG).astype(np.int32)

    rows = np.arange(r)
    # full[x, y]: i on x and j on y at the start of a step; row and column r stay unreachable. From
    # "unreachable" everywhere, sweep k settles the states that finish within k steps, and the states
    # that never finish (two agents that cannot pass each other) stay unreachable
    full = np.full((side, side), _BIG, dtype=np.int32)
    # i on its goal may finish; j then walks around it (both finish when j is on its goal too)
    finish_i = np.full((r, r), _BIG, dtype=np.int32)
    if gi in pos:
        finish_i[pos[gi], :] = column(first_done)
    finish_i[rows, rows] = _BIG
    # after i's move to x, j on its goal may finish, then i walks around it
    finish_j = np.full((side, r), _BIG, dtype=np.int32)
    if gj in pos:
        finish_j[:r, pos[gj]] = column(second_done)
        finish_j[pos[gj], pos[gj]] = _BIG
    # where i's move (direction a) enters j's cell y, j must leave but not into i's cell: the direction
    # of i's cell seen from y
    around = nb[np.minimum(nb[:, 1:], r - 1)]  # (r, 4, 5): the neighbours of each neighbour
    back = (around == rows[:, None, None]).argmax(axis=2) - 1  # (r, 4): that direction seen from there
    xs, dirs = np.nonzero(nb[:, 1:] < r)
    ys, dirs_back = nb[xs, dirs + 1], back[xs, dirs]
    dirs_of = np.arange(4)
    cost = PAIR_SWEEP_COST + r * r // PAIR_ENTRIES_PER_UNIT
    if start is not None:
        sx, sy, floor = pos[start[0]], pos[start[1]], hj[start[1]]
    sweeps = 0
    while True:
        budget.left -= cost
        if budget.left < 0 and budget.exhausted():
            raise _OutOfBudget
        # mid[x, y]: i has moved to x, j on y still to move (a vertex conflict is the unreachable diagonal)
        mid = np.minimum(full[:, nb].min(axis=2) + 1, finish_j)
        # when i has entered j's cell y from the neighbour in direction d, j leaves but not towards d
        leave = full[rows[:, None], nb[:, 1:]]  # (r, 4): j from y to each neighbour
        least = np.partition(leave, 1, axis=1)
        entered = np.where(leave.argmin(axis=1)[:, None] == dirs_of, least[:, 1:2], least[:, 0:1]) + 1
        step = mid[nb]  # (r, 5, r): i from x in each direction (a wait first), j on y
        step[xs, dirs + 1, ys] = entered[ys, dirs_back]
        new = np.minimum(step.min(axis=1) + 1, finish_i)
        new[rows, rows] = _BIG
        if np.array_equal(new, full[:r, :r]):
            break
        full[:r, :r] = new
        sweeps += 1
        if start is not None and new[sx, sy] <= sweeps + max(floor, sweeps - 1):
            return int(new[sx, sy])
    values = np.where(full[:r, :r] >= _BIG, _INF, full[:r, :r])
    if start is not None:
        return int(values[sx, sy])
    both = np.full((nc, nc), _INF, dtype=np.int64)
    both[np.ix_(cells, cells)] = values
    return _PairTable(both.ravel().tolist(), first_done, second_done)
