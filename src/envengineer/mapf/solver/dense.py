"""The exact optima of a small crowded board by searches over a dense table of all its joint states, a
block of states at a time (numpy), for the boards where both the conflict search and the integer program
are slow: few free cells, several agents that must step aside for one another many times.

A joint state is every agent's cell and which agents have *finished*. It is one entry of a table indexed
by the agents' cells (each agent counted within the cells it can reach) and the finished flags, so a
board whose agents reach ``r_0, ..., r_(k-1)`` cells has ``r_0 * ... * r_(k-1) * 2 ** k`` entries, one
byte each (:func:`dense_space`). One joint step moves every unfinished agent to a neighbouring cell or
keeps it (``WAIT``), without two agents on one cell and without two agents swapping cells, as in SPEC §2
(following an agent into the cell it leaves, and rotations, stay allowed); a finished agent stays on its
goal for good. Moves are generated agent by agent for a whole block of states, each agent's choices
checked against the agents already moved, so conflicting partial steps are dropped early.

* **makespan**: a breadth-first search over the agents' cells (no flags): the first layer that holds
  every agent on its goal. An exhausted search proves that the board has no plan at all.
* **sum of costs** (SPEC §2.2): A* over the full states. An unfinished agent pays 1 a step; an agent on its
  goal may finish at no cost, and an agent's cost is then the time it finished, so every plan is a path
  of the same cost in this graph and the cheapest path is the optimum. The heuristic (the unfinished
  agents' distances to their goals, summed) never overestimates and falls by at most a step's cost, so
  states are settled in order of ``g + h`` without reopening. The plan is read back from the table: every
  cost written is the cost of a real path from the start, so a state's predecessor is a neighbouring
  state whose cost is its own less the step's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver import Solution
from envengineer.mapf.solver.grid import _INF, IndexedBoard

#: The largest table :func:`solve_dense` builds, in entries (two bytes each while it searches: a
#: cost and a settled flag).
DENSE_SPACE = 150_000_000

#: Partial joint steps generated at once: bounds the memory of a block to a few hundred MB.
BLOCK_ROWS = 1 << 21

_UNSEEN = 255  # costs are kept in one byte; a larger one is given up on (SolverBudgetExceeded)


def dense_space(grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]) -> int:
    """The entries of the table :func:`solve_dense` searches: the product of the numbers of cells each agent
    can reach, times ``2 ** agents`` for the finished flags.

    Raises:
        UnsolvableInstance: An agent cannot reach its goal at all.

    >>> dense_space(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    324
    """
    return _Table(IndexedBoard(grid, starts, goals)).space


def solve_dense(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    max_space: int = DENSE_SPACE,
) -> Solution:
    """The optimal sum of costs, the optimal makespan and an SoC-optimal plan of a board: the optima
    :func:`~envengineer.mapf.solver.solve` finds, the plan possibly another optimal one.

    Args:
        grid: The rows of the square grid (``.`` frozen, ``H`` hole).
        starts: Each agent's start cell; distinct, on frozen cells.
        goals: Each agent's goal cell; distinct, on frozen cells.
        max_space: The largest table searched (:func:`dense_space`).

    Raises:
        InstanceFormatError: Starts or goals not distinct, or not on frozen cells of the grid.
        UnsolvableInstance: The board has no conflict-free plan (an exhausted search proves it).
        SolverBudgetExceeded: The table would exceed ``max_space``, or a cost exceeds 254.

    >>> sol = solve_dense(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    >>> sol.soc, sol.makespan, sol.shortest_sum, len(sol.paths[0]) - 1
    (6, 4, 4, 4)
    """
    board = IndexedBoard(grid, starts, goals)
    table = _Table(board)
    if table.space > max_space:
        raise SolverBudgetExceeded(f"a table of {table.space} joint states exceeds max_space={max_space}")
    makespan = table.makespan()
    if makespan is None:
        raise UnsolvableInstance("no conflict-free plan takes every agent to its goal")
    soc, frames = table.cheapest()
    n = board.n
    paths = tuple(tuple((c // n, c % n) for c in cells) for cells in zip(*frames, strict=True))
    return Solution(soc=soc, makespan=makespan, shortest_sum=sum(board.shortest), paths=paths)


class _Table:
    """The board's joint states as table indices: ``flags * positions + sum(local_i * stride_i)``, where
    ``local_i`` numbers the cells agent ``i`` can reach."""

    def __init__(self, board: IndexedBoard) -> None:
        self.k = k = len(board.starts)
        self.cells: list[np.ndarray] = []  # per agent: its local cell -> the board's cell
        self.moves: list[np.ndarray] = []  # per agent: local cell -> the local cells one action reaches
        self.h: list[np.ndarray] = []  # per agent: local cell -> distance to its goal
        start, goal = [], []
        for i in range(k):
            region = [c for c, d in enumerate(board.from_start[i]) if d < _INF]
            local = {c: j for j, c in enumerate(region)}
            moves = np.full((len(region), 5), -1, np.int64)
            for j, c in enumerate(region):
                reach = [local[w] for w in board.nbrs[c]]
                moves[j, : len(reach)] = reach
            self.cells.append(np.array(region, np.int64))
            self.moves.append(moves)
            self.h.append(np.array([board.to_goal[i][c] for c in region], np.int64))
            start.append(local[board.starts[i]])
            goal.append(local[board.goals[i]])
        self.sizes = sizes = [len(c) for c in self.cells]
        self.strides = np.cumprod([1, *sizes[:-1]]).astype(np.int64)
        self.positions = int(np.prod(sizes, dtype=object))
        self.space = self.positions << k
        self.goal_local = np.array(goal, np.int64)
        self.start = int(np.dot(start, self.strides))
        self.goal = int(np.dot(goal, self.strides))

    def locals(self, pos: np.ndarray) -> np.ndarray:
        """Each agent's local cell in the positions ``pos`` (rows)."""
        return np.stack([(pos // s) % r for s, r in zip(self.strides, self.sizes, strict=True)], axis=1)

    def steps(self, locs: np.ndarray, flags: int) -> tuple[np.ndarray, np.ndarray]:
        """Every joint step from the positions ``locs`` (rows of local cells) with the finished agents
        ``flags`` kept in place: the row each step comes from and the positions it reaches."""
        oldc = np.stack([self.cells[i][locs[:, i]] for i in range(self.k)], axis=1)
        par = np.arange(len(locs))
        new = np.zeros((len(locs), 0), np.int64)
        newc = new
        for i in range(self.k):
            own = locs[par, i]
            opts = own[:, None] if flags >> i & 1 else self.moves[i][own]
            rep = np.repeat(np.arange(len(par)), opts.shape[1])
            w = opts.ravel()
            real = w >= 0
            rep, w = rep[real], w[real]
            wc = self.cells[i][w]
            p = par[rep]
            ok = np.ones(len(w), bool)
            for j in range(i):
                nj = newc[rep, j]
                ok &= nj != wc  # one cell, one agent
                ok &= ~((nj == oldc[p, i]) & (oldc[p, j] == wc))  # no swap
            rep, w, wc = rep[ok], w[ok], wc[ok]
            par = par[rep]
            new = np.column_stack([new[rep], w])
            newc = np.column_stack([newc[rep], wc])
        return par, new @ self.strides

    def _blocks(self, count: int, unfinished: int):
        rows = max(1, BLOCK_ROWS // 5**unfinished)
        return range(0, count, rows), rows

    def makespan(self) -> int | None:
        """The fewest steps that bring every agent to its goal at once; ``None`` when none do."""
        seen = np.zeros(self.positions, bool)
        seen[self.start] = True
        layer = np.array([self.start], np.int64)
        t = 0
        while len(layer):
            if seen[self.goal]:
                return t
            found = []
            locs = self.locals(layer)
            starts, rows = self._blocks(len(layer), self.k)
            for b in starts:
                _, pos = self.steps(locs[b : b + rows], 0)
                pos = np.unique(pos)
                pos = pos[~seen[pos]]
                seen[pos] = True
                found.append(pos)
            layer = np.concatenate(found)
            t += 1
        return None

    def _h(self, locs: np.ndarray, flags: np.ndarray) -> np.ndarray:
        """The unfinished agents' distances to their goals, summed (the A* heuristic)."""
        out = np.zeros(len(locs), np.int64)
        for i in range(self.k):
            out += np.where(flags >> i & 1, 0, self.h[i][locs[:, i]])
        return out

    def cheapest(self) -> tuple[int, list[tuple[int, ...]]]:
        """The optimal sum of costs and the joint cells of a plan that has it, at ``t = 0..T``."""
        k, n_pos = self.k, self.positions
        full = (1 << k) - 1
        cost = np.full(self.space, _UNSEEN, np.uint8)
        settled = np.zeros(self.space, bool)
        cost[self.start] = 0
        h0 = int(self._h(self.locals(np.array([self.start])), np.zeros(1, np.int64))[0])
        buckets: dict[int, list[np.ndarray]] = {h0: [np.array([self.start], np.int64)]}
        end = full * n_pos + self.goal
        while buckets and not settled[end]:
            f = min(buckets)
            idx = np.unique(np.concatenate(buckets.pop(f)))
            idx = idx[~settled[idx]]
            flags, locs = idx // n_pos, self.locals(idx % n_pos)
            idx = idx[cost[idx].astype(np.int64) + self._h(locs, flags) == f]
            batch = []
            while len(idx):  # settle, and finish the agents on their goals: no cost, the same f
                settled[idx] = True
                batch.append(idx)
                flags, locs = idx // n_pos, self.locals(idx % n_pos)
                done = []
                for i in range(k):
                    at = idx[(flags >> i & 1 == 0) & (locs[:, i] == self.goal_local[i])]
                    nxt = at + (n_pos << i)
                    better = (cost[at] < cost[nxt]) & ~settled[nxt]
                    cost[nxt[better]] = cost[at[better]]
                    done.append(nxt[better])
                idx = np.unique(np.concatenate(done))
            if settled[end]:
                break
            for fv, states in self._expand(np.concatenate(batch), cost, settled):
                buckets.setdefault(fv, []).append(states)
        if not settled[end]:
            raise UnsolvableInstance("no conflict-free plan takes every agent to its goal")
        return int(cost[end]), self._plan(cost, end)

    def _expand(self, idx: np.ndarray, cost: np.ndarray, settled: np.ndarray):
        """One joint step from each settled state ``idx``: the states it improves, grouped by f."""
        n_pos = self.positions
        all_flags = idx // n_pos
        for flags in np.unique(all_flags):
            mine = idx[all_flags == flags]
            unfinished = self.k - int(flags).bit_count()
            starts, rows = self._blocks(len(mine), unfinished)
            for b in starts:
                block = mine[b : b + rows]
                par, pos = self.steps(self.locals(block % n_pos), int(flags))
                nxt = flags * n_pos + pos
                g = cost[block][par].astype(np.int64) + unfinished
                if g.max() >= _UNSEEN:
                    raise SolverBudgetExceeded(f"a sum of costs above {_UNSEEN - 1}")
                keep = ~settled[nxt]
                nxt, g = nxt[keep], g[keep]
                if not len(nxt):
                    continue
                order = np.lexsort((g, nxt))
                nxt, g = nxt[order], g[order]
                first = np.r_[True, nxt[1:] != nxt[:-1]]
                nxt, g = nxt[first], g[first]
                better = g < cost[nxt]
                nxt, g = nxt[better], g[better]
                cost[nxt] = g
                f = g + self._h(self.locals(nxt % n_pos), np.full(len(nxt), flags))
                for fv in np.unique(f):
                    yield int(fv), nxt[f == fv]

    def _plan(self, cost: np.ndarray, end: int) -> list[tuple[int, ...]]:
        """The joint cells at ``t = 0..T`` of a plan of cost ``cost[end]``, read back from the table."""
        n_pos = self.positions
        state, frames = end, []
        while True:
            flags, pos = divmod(state, n_pos)
            locs = self.locals(np.array([pos]))
            if flags == 0 and pos == self.start:
                frames.append(locs[0])
                break
            g = int(cost[state])
            back = [
                state - (n_pos << i)
                for i in range(self.k)
                if flags >> i & 1 and locs[0, i] == self.goal_local[i]
            ]
            back = [s for s in back if cost[s] == g]
            if back:  # the agent finished here: the same cells, one flag fewer
                state = back[0]
                continue
            frames.append(locs[0])
            _, prev = self.steps(locs, flags)  # a step reversed is a step
            prev = flags * n_pos + prev
            prev = prev[cost[prev] == g - (self.k - flags.bit_count())]
            state = int(prev[0])
        frames.reverse()
        return [tuple(int(self.cells[i][loc[i]]) for i in range(self.k)) for loc in frames]
