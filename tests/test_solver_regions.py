"""Boards whose agents stand in several regions of frozen cells: each region is searched as a board of
its own (boards of ``AIDS_MIN_AGENTS`` agents or more), exact against the brute-force oracle, and a
region without a plan is found before the others are searched."""

from __future__ import annotations

import numpy as np
import pytest

from envengineer.errors import UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.solver import AIDS_MIN_AGENTS, last_units, solve
from envengineer.mapf.solver import _regions as regions
from test_solver import _problem, check_plan, oracle_makespan, oracle_soc

# two regions: a dead end of two cells at the top left, the rest of the board below the wall of holes
WALLED = (
    "..HH.",
    "HHH..",
    ".....",
    ".....",
    ".....",
)


def test_agents_are_grouped_by_their_region():
    prob = _problem(WALLED, [(0, 0), (2, 0), (0, 1), (4, 4)], [(0, 1), (4, 0), (0, 0), (0, 4)])
    assert regions(prob) == [(0, 2), (1, 3)]
    one = _problem(WALLED, [(2, 0), (4, 4), (3, 3), (1, 4)], [(4, 0), (0, 4), (2, 2), (4, 4)])
    assert regions(one) == [(0, 1, 2, 3)]


def test_a_region_without_a_plan_is_found_before_the_others_are_searched():
    # agents 0 and 2 must swap in the dead end: no plan, whatever the three agents below do; the dead end's
    # joint search proves it in a few units, the crowded region below is never searched
    starts = [(0, 0), (2, 0), (0, 1), (4, 4), (2, 4)]
    goals = [(0, 1), (4, 4), (0, 0), (2, 0), (4, 0)]
    assert len(starts) >= AIDS_MIN_AGENTS
    with pytest.raises(UnsolvableInstance):
        solve(WALLED, starts, goals, memo=False)
    assert last_units() < 20


def _board_with_regions(rng: np.random.Generator, n: int, k: int) -> tuple[list[str], list, list]:
    """A random board whose agents stand in at least two regions (each goal in its start's region)."""
    while True:
        holes = rng.random((n, n)) < rng.uniform(0.2, 0.5)
        grid = ["".join("H" if holes[r, c] else "." for c in range(n)) for r in range(n)]
        free = [(r, c) for r in range(n) for c in range(n) if not holes[r, c]]
        if len(free) < 2 * k:
            continue
        order = rng.permutation(len(free))
        starts = [free[i] for i in order[:k]]
        prob = _problem(grid, starts, starts)
        goals = []
        for a, s in enumerate(starts):
            same = [c for c in free if prob.h[a][c[0] * n + c[1]] < 10**9 and c != s and c not in goals]
            if not same:
                break
            goals.append(same[int(rng.integers(len(same)))])
        if len(goals) == k and len(regions(_problem(grid, starts, goals))) >= 2:
            return grid, starts, goals


@pytest.mark.parametrize("seed", range(2))
def test_boards_of_several_regions_match_brute_force(seed):
    rng = np.random.default_rng(np.random.SeedSequence((2027, seed)))
    kinds = {"solved": 0, "unsolvable": 0}
    for _ in range(25):
        n = int(rng.integers(4, 6))
        grid, starts, goals = _board_with_regions(rng, n, AIDS_MIN_AGENTS)
        want = oracle_soc(grid, starts, goals)
        solver_module.MEMO.clear()
        if want is None:
            with pytest.raises(UnsolvableInstance):
                solve(grid, starts, goals, node_budget=1_000_000)
            kinds["unsolvable"] += 1
            continue
        sol = solve(grid, starts, goals, node_budget=1_000_000)
        assert (sol.soc, sol.makespan) == (want, oracle_makespan(grid, starts, goals)), (grid, starts, goals)
        check_plan(grid, starts, goals, sol)
        kinds["solved"] += 1
    assert kinds["solved"] >= 15 and kinds["unsolvable"] >= 1, kinds
