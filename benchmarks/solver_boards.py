"""Random boards drawn the way the generator draws them, for ``bench_solver.py`` and ``bench_peer.py``: the
boards, the options that draw them, and the untimed warm-up before timing.

A library module (no ``__main__``): it imports no script.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver import DEFAULT_NODE_BUDGET, solve


def _components(free: np.ndarray) -> np.ndarray:
    n = free.shape[0]
    comp = np.full((n, n), -1, dtype=np.int64)
    label = 0
    for r0 in range(n):
        for c0 in range(n):
            if not free[r0, c0] or comp[r0, c0] >= 0:
                continue
            comp[r0, c0] = label
            stack = [(r0, c0)]
            while stack:
                r, c = stack.pop()
                for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                    if 0 <= rr < n and 0 <= cc < n and free[rr, cc] and comp[rr, cc] < 0:
                        comp[rr, cc] = label
                        stack.append((rr, cc))
            label += 1
    return comp


def sample_board(
    rng: np.random.Generator, size: int, agents: int, hole_ratio: float | None
) -> tuple[list[str], list[Cell], list[Cell]]:
    """One random board whose every goal lies in its start's connected region (redrawn until it does)."""
    cells = size * size
    while True:
        ratio = float(rng.uniform(0.0, 0.5)) if hole_ratio is None else hole_ratio
        holes = min(round(ratio * cells), cells - 2 * agents)
        free = np.ones(cells, dtype=bool)
        free[rng.choice(cells, size=holes, replace=False)] = False
        free = free.reshape(size, size)
        comp = _components(free)
        free_cells = [(int(r), int(c)) for r, c in zip(*np.nonzero(free), strict=True)]
        starts: list[Cell] = []
        goals: list[Cell] = []
        for _ in range(agents):
            choices = [x for x in free_cells if x not in starts]
            s = choices[int(rng.integers(len(choices)))]
            goal_choices = [x for x in free_cells if comp[x] == comp[s] and x != s and x not in goals]
            if not goal_choices:
                break
            starts.append(s)
            goals.append(goal_choices[int(rng.integers(len(goal_choices)))])
        if len(goals) == agents:
            grid = ["".join("." if free[r, c] else "H" for c in range(size)) for r in range(size)]
            return grid, starts, goals


def add_board_options(ap: argparse.ArgumentParser) -> None:
    """The options that draw the boards, budget their solving and warm up first (what :func:`warm_up`
    reads); ``bench_solver.py`` and ``bench_peer.py`` draw and time the same boards with them."""
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--size", type=int, default=10)
    ap.add_argument("-n", type=int, default=200, help="number of boards")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--holes", type=float, default=None, help="fixed hole ratio (default: uniform in [0, 0.5])"
    )
    ap.add_argument("--node-budget", type=int, default=DEFAULT_NODE_BUDGET)
    ap.add_argument(
        "--warmup", type=float, default=0.5, help="CPU seconds of untimed solving first (0: a cold start)"
    )


def warm_up(args: argparse.Namespace) -> None:
    """Solve boards of a stream the timed ones never draw (a fifth key) for ``args.warmup`` CPU seconds."""
    start, i = time.process_time(), 0
    while time.process_time() - start < args.warmup:
        rng = np.random.default_rng(np.random.SeedSequence((args.seed, args.agents, args.size, i, 1)))
        grid, starts, goals = sample_board(rng, args.size, args.agents, args.holes)
        try:
            solve(grid, starts, goals, node_budget=args.node_budget, memo=False)
        except (UnsolvableInstance, SolverBudgetExceeded):
            pass
        i += 1
