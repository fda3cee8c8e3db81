"""Satisfiability, the fallback of the crowded boards CBS does not settle within its share of the budget:
exact by hand and against the brute-force oracle, counted in the budget's units, and never past the
budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

from envengineer.errors import SolverBudgetExceeded
from envengineer.mapf import solver as solver_module
from envengineer.mapf.solver import AIDS_MIN_AGENTS, _cost, last_units, solve
from envengineer.mapf.solver.problem import _Budget, _OutOfBudget
from envengineer.mapf.solver.sat import _makespan_by_sat, _plan_by_sat
from test_solver import OPEN3, _problem, check_plan, oracle_makespan, oracle_soc, random_board


def _soc(paths, goals) -> int:
    return sum(_cost(p, g) for p, g in zip(paths, goals, strict=True))


def test_spec_swap_by_hand():
    # SPEC §2.3: two agents swap ends of the top row of an open 3x3 board, one steps aside: 6, makespan 4
    prob = _problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    paths = _plan_by_sat(prob, _Budget(10**6), 0)
    assert _soc(paths, prob.goals) == 6
    assert [p[0] for p in paths] == prob.starts and [p[-1] for p in paths] == prob.goals
    assert _makespan_by_sat(prob, _Budget(10**6), 2, 6) == 4


def test_a_corridor_with_one_pocket_by_hand():
    # the first to pass waits in the pocket below the middle cell: 2 + 3 + 2 moves and a wait, 7 in all
    pocket = ("...", "H.H", "HHH")
    prob = _problem(pocket, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert _soc(_plan_by_sat(prob, _Budget(10**6), 0), prob.goals) == 7
    # a floor already at the optimum is kept; one above it would be a caller's error, so it is never given
    assert _soc(_plan_by_sat(prob, _Budget(10**6), 7), prob.goals) == 7


def test_capped_search_answers_within_its_share_or_gives_it_back():
    budget = _Budget(1_000)

    def spend(units: int):
        def search():
            budget.left -= units
            if budget.left < 0 and budget.exhausted():
                raise _OutOfBudget
            return "found"

        return search

    assert budget.within(100, spend(60)) == "found" and budget.used == 60
    assert budget.within(100, spend(150)) is None and budget.used == 210  # what it spent is counted
    assert budget.left == 790
    # a share larger than what is left is no cap at all: running out is the budget's end
    with pytest.raises(_OutOfBudget):
        budget.within(5_000, spend(900))


@pytest.mark.parametrize("seed", range(2))
def test_satisfiability_matches_brute_force(seed, monkeypatch):
    """CBS given no units at all, and no joint search on these small boards: satisfiability settles every
    board that has a plan, with the oracle's optima and a valid plan."""
    monkeypatch.setattr(solver_module, "SAT_AFTER", 0)
    monkeypatch.setattr(solver_module, "JOINT_SPACE_SOC", 0)
    monkeypatch.setattr(solver_module, "JOINT_SPACE", 0)
    rng = np.random.default_rng(np.random.SeedSequence((2028, seed)))
    solved = 0
    for _ in range(20):
        n = int(rng.integers(3, 5))  # the oracle's joint states of four agents stay few
        grid, starts, goals = random_board(rng, n, AIDS_MIN_AGENTS)
        want = oracle_soc(grid, starts, goals)
        solver_module.MEMO.clear()
        if want is None:
            # it cannot prove that no plan exists: it runs to the end of the budget, never past it
            with pytest.raises(Exception) as err:
                solve(grid, starts, goals, node_budget=20_000)
            assert err.type.__name__ in ("UnsolvableInstance", "SolverBudgetExceeded")
            continue
        sol = solve(grid, starts, goals, node_budget=1_000_000)
        assert (sol.soc, sol.makespan) == (want, oracle_makespan(grid, starts, goals)), (grid, starts, goals)
        check_plan(grid, starts, goals, sol)
        solved += 1
    assert solved >= 10, solved


def test_satisfiability_stays_within_the_budget(monkeypatch):
    """A crowded board (seed 7's board 37 of ``bench_solver.py``: 5 agents, optimum 11 steps above the
    shortest paths) that CBS alone does not settle in 300,000 units: satisfiability from CBS's bound
    settles it within the default budget, and a small budget ends it with the budget's error, the
    overshoot of its last layer at most."""
    monkeypatch.setattr(solver_module, "SAT_AFTER", 0)
    grid = ["HH........", "...H..HHH.", "..H.HHH...", "H....H.H.H", "H.HH..HHH.",
            ".....HH...", "...HHH.H.H", "H..H..H...", "......HH.H", "....H...H."]  # fmt: skip
    starts, goals = [(4, 1), (0, 2), (0, 7), (2, 0), (7, 5)], [(1, 4), (1, 0), (9, 6), (6, 1), (3, 1)]
    with pytest.raises(SolverBudgetExceeded):
        solve(grid, starts, goals, node_budget=3_000, memo=False)
    assert 3_000 < last_units() < 3_000 + 1_000
    sol = solve(grid, starts, goals, memo=False)
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (57, 20, 46)
    check_plan(grid, starts, goals, sol)
    # with a deadline the solver runs a chunk of the budget at a time and reads the clock in between
    start = time.perf_counter()
    with pytest.raises(SolverBudgetExceeded, match="time_limit"):
        solve(grid, starts, goals, node_budget=10**9, time_limit=0.005)
    assert time.perf_counter() - start < 1.0
