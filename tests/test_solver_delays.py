"""The pairs' delays that bound satisfiability's formula: by hand, a pair with a conflict-free pair of
shortest paths is never delayed and every other pair is (against the tables), small delays read from the
decision diagrams equal the tables', the heaviest matching, and a pair that can never pass proves the
board plan-less."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

import envengineer.mapf.solver as solver_module
from envengineer.errors import UnsolvableInstance
from envengineer.mapf.solver import delays as delays_module
from envengineer.mapf.solver.cbs import _mdds_compatible
from envengineer.mapf.solver.delays import _delay_floors, _heaviest_matching, _pair_delays
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.joint import _pair_makespan
from envengineer.mapf.solver.pairs import _pair_table
from envengineer.mapf.solver.problem import _NO_CONS, _Budget, _mdd, _OutOfBudget
from envengineer.mapf.solver.sat import _plan_by_sat
from test_solver import OPEN3, _all_reach, _problem, random_board


def _delays(grid, starts, goals):
    return _pair_delays(_problem(grid, starts, goals), _Budget(10**6))


def _reachable_boards(rng: np.random.Generator, draws: int, sides: tuple[int, int], agents: int):
    """Of ``draws`` random boards (sides drawn in ``sides``, upper end excluded), those whose agents all
    reach their goals (the solver turns the others away before any search): each as (grid, starts, goals)
    and its problem."""
    for _ in range(draws):
        board = random_board(rng, int(rng.integers(*sides)), agents)
        prob = _problem(*board)
        if _all_reach(prob):
            yield board, prob


def test_spec_swap_by_hand():
    # SPEC's swap on an open 3x3 board: one of the two steps aside, 2 steps above their shortest paths
    prob = _problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert _pair_delays(prob, _Budget(10**6)) == {(0, 1): 2, (1, 0): 2}
    # the pair's least delay is a lower bound on the total, and each agent's others are delayed by none
    assert _delay_floors(prob, _Budget(10**6)) == ([0, 0], 2)


def test_a_pair_whose_shortest_paths_never_meet_takes_no_table():
    # agent 0 on the top row, agent 1 on the bottom row, both left to right: never in one cell or a swap
    prob = _problem(OPEN3, [(0, 0), (2, 0)], [(0, 2), (2, 2)])
    budget = _Budget(10**6)
    assert _pair_delays(prob, budget) == {(0, 1): 0, (1, 0): 0}
    assert prob.pairs_memo == {}
    assert budget.used < 10  # the two decision diagrams (2 agents x 9 cells, 16 a unit) and a few pairs
    # a corridor with one pocket: agent 1 reaches its goal (0, 1) from the pocket at time 1, and agent 0
    # comes along the corridor at time 2 (no shared cell at one time): agent 1 waits in the pocket until 0
    # has passed, arriving at time 3
    pocket = (".....", "H.HHH", "HHHHH", "HHHHH", "HHHHH")
    assert _delays(pocket, [(0, 3), (1, 1)], [(0, 0), (0, 1)])[0, 1] == 2


def test_a_pair_with_conflict_free_shortest_paths_is_never_delayed_against_its_table():
    rng = np.random.default_rng(2030)
    apart = 0
    for (grid, starts, goals), prob in _reachable_boards(rng, 60, (3, 6), 3):
        mdds = [_mdd(prob, i, _NO_CONS, prob.h[i][prob.starts[i]]) for i in range(prob.k)]
        for i, j in combinations(range(prob.k), 2):
            table = _pair_table(prob, i, j, _Budget(10**7))
            cost = table.both[prob.starts[i] * prob.nc + prob.starts[j]]
            alone = prob.h[i][prob.starts[i]] + prob.h[j][prob.starts[j]]
            if _mdds_compatible(prob, (i, j), mdds[i], mdds[j], _Budget(10**7)):
                assert cost == alone, (grid, starts, goals, i, j)
                apart += 1
            else:
                assert cost > alone, (grid, starts, goals, i, j)  # the table agrees: the pair is delayed
    assert apart >= 30, apart


def test_small_delays_are_found_in_the_diagrams_and_equal_the_tables(monkeypatch):
    # a delay up to DIAGRAM_DELAYS is read from the diagrams one step longer at a time, with no sweep; a
    # larger one is swept; either way it is the pair's table's (the pair's own optimum, oracle-checked)
    swept = []
    sweep = delays_module._pair_cost
    monkeypatch.setattr(delays_module, "_pair_cost", lambda *a: swept.append(a[1:3]) or sweep(*a))
    rng = np.random.default_rng(2034)
    found: dict[int, int] = {}
    for (grid, starts, goals), prob in _reachable_boards(rng, 120, (3, 6), 3):
        swept.clear()
        delays = _pair_delays(prob, _Budget(10**7))
        pairs = list(combinations(range(prob.k), 2))
        costs = [
            _pair_table(prob, i, j, _Budget(10**7)).both[prob.starts[i] * prob.nc + prob.starts[j]]
            for i, j in pairs
        ]
        if max(costs) >= _INF:
            assert delays is None  # a pair that can never both finish
            continue
        assert delays is not None
        for (i, j), cost in zip(pairs, costs, strict=True):
            assert delays[i, j] == cost - prob.h[i][prob.starts[i]] - prob.h[j][prob.starts[j]]
            assert ((i, j) in swept) == (delays[i, j] > delays_module.DIAGRAM_DELAYS), (grid, starts, goals)
            found[delays[i, j]] = found.get(delays[i, j], 0) + 1
    assert found.get(1, 0) >= 5 and found.get(2, 0) >= 5 and sum(n for d, n in found.items() if d > 2) >= 5


def test_the_heaviest_matching_by_hand(monkeypatch):
    delays = {(0, 1): 5, (2, 3): 1, (0, 2): 4, (1, 3): 3, (0, 3): 0, (1, 2): 0}
    delays |= {(b, a): d for (a, b), d in list(delays.items())}
    assert _heaviest_matching((0, 1, 2, 3), delays) == 7  # (0, 2) and (1, 3), not the heaviest pair first
    assert _heaviest_matching((1, 2, 3), delays) == 3
    assert _heaviest_matching((3,), delays) == 0
    # beyond EXACT_MATCHING agents the matching is greedy: still a lower bound, here a lower one
    monkeypatch.setattr(delays_module, "EXACT_MATCHING", 3)
    assert _heaviest_matching((0, 1, 2, 3), delays) == 6


def test_a_pair_that_can_never_pass_proves_the_board_plan_less():
    # two agents that must swap in a corridor: the pair's table never reaches its goals
    corridor = ("....", "HHHH", "HHHH", "HHHH")
    prob = _problem(corridor, [(0, 0), (0, 3)], [(0, 3), (0, 0)])
    assert _delay_floors(prob, _Budget(10**6)) is None
    with pytest.raises(UnsolvableInstance):
        _plan_by_sat(prob, _Budget(10**6), 0)
    with pytest.raises(_OutOfBudget):  # the look and the table are charged like any search
        _pair_delays(_problem(corridor, [(0, 0), (0, 3)], [(0, 3), (0, 0)]), _Budget(5))


def test_a_pair_that_is_not_delayed_is_home_by_its_longer_shortest_path():
    # the premise of the makespan's skip: conflict-free shortest paths bring both home by the longer one
    rng = np.random.default_rng(2041)
    undelayed = 0
    for (grid, starts, goals), prob in _reachable_boards(rng, 40, (3, 6), 4):
        delays = _pair_delays(prob, _Budget(10**7))
        for a, b in combinations(range(prob.k), 2):
            if delays is not None and delays[a, b] == 0:
                longer = max(prob.h[a][prob.starts[a]], prob.h[b][prob.starts[b]])
                assert _pair_makespan(prob, a, b, _Budget(10**7), 100) == longer, (grid, starts, goals, a, b)
                undelayed += 1
    assert undelayed >= 50, undelayed


def test_the_makespan_searches_only_the_delayed_pairs_once_their_delays_are_known(monkeypatch):
    searched: list[tuple[int, int]] = []
    search = solver_module._pair_makespan

    def counted(prob, a, b, *rest):
        searched.append((a, b))
        return search(prob, a, b, *rest)

    monkeypatch.setattr(solver_module, "_pair_makespan", counted)
    rng = np.random.default_rng(2042)
    both_kinds = 0
    # four agents: the slow boards' aids, the pairs' makespans
    for (grid, starts, goals), prob in _reachable_boards(rng, 30, (5, 7), 4):
        shortest = [prob.h[i][s] for i, s in enumerate(prob.starts)]
        singles = [(i,) for i in range(prob.k)]
        searched.clear()  # without the pairs' delays every pair is searched: the answer to match
        expected = solver_module._solve_makespan(prob, _Budget(10**7), max(shortest), 100, singles)
        assert len(searched) == 6
        delays = _pair_delays(prob, _Budget(10**7))
        if delays is None:
            continue
        searched.clear()
        fresh = _problem(grid, starts, goals)
        fresh.delays_memo = (delays,)  # as CBS leaves it when it hands the board on
        assert solver_module._solve_makespan(fresh, _Budget(10**7), max(shortest), 100, singles) == expected
        delayed = [p for p in combinations(range(prob.k), 2) if delays[p] > 0]
        assert sorted(searched) == delayed, (grid, starts, goals)
        both_kinds += 0 < len(delayed) < 6
    assert both_kinds >= 5, both_kinds
