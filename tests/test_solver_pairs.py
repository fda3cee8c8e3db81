"""The pairs' cost-to-go tables that guide a merged group's joint search (exact against the brute-force
oracle and by hand, and never changing an optimum), and the single-agent search's memory of constraint
sets under which it found no path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver import joint as solver_joint_module
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.joint import _plan_group
from envengineer.mapf.solver.pairs import _pair_cost, _pair_table
from envengineer.mapf.solver.problem import _NO_CONS, _Budget, _Cons, _OutOfBudget, _plan, _Problem
from test_solver import OPEN3, _problem, oracle_soc, random_board


def _cell(grid, cell: Cell) -> int:
    return cell[0] * len(grid) + cell[1]


def _value(prob: _Problem, grid, u: Cell, v: Cell) -> int:
    return _pair_table(prob, 0, 1, _Budget(10**9)).both[_cell(grid, u) * prob.nc + _cell(grid, v)]


def test_pair_table_by_hand():
    # SPEC §2.3's swap on the open 3x3 board: one agent steps aside, 2 + 4 or 3 + 3 steps
    prob = _problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert _value(prob, OPEN3, (0, 0), (0, 2)) == 6
    assert _value(prob, OPEN3, (0, 2), (0, 0)) == 0  # both on their goals
    assert _value(prob, OPEN3, (0, 1), (0, 0)) == 1  # the first one step from its goal, the second home
    # a corridor with one pocket: the first to pass waits in the pocket (2 + 3 + 2 moves, one wait)
    pocket = ("...", "H.H", "HHH")
    prob = _problem(pocket, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert _value(prob, pocket, (0, 0), (0, 2)) == 7
    # a plain corridor: they never pass, from any pair of cells in the wrong order
    line = ("...", "HHH", "HHH")
    prob = _problem(line, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert _value(prob, line, (0, 0), (0, 2)) == _INF
    assert _value(prob, line, (0, 1), (0, 2)) == _INF
    table = _pair_table(prob, 0, 1, _Budget(10**9))
    # once the first agent has finished on (0, 2) the second walks around it: here it cannot reach (0, 0)
    # from (0, 2)'s far side, but from (0, 1) it is one step
    assert table.first_done[_cell(line, (0, 1))] == 1


@pytest.mark.parametrize("seed", range(2))
def test_pair_table_is_the_pairs_optimum_from_every_pair_of_cells(seed):
    rng = np.random.default_rng(np.random.SeedSequence((2031, seed)))
    checked = unsolvable = 0
    for _ in range(25):
        n = int(rng.integers(2, 5))
        grid, starts, goals = random_board(rng, n, 2)
        prob = _problem(grid, starts, goals)
        free = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "."]
        for u, v in itertools.permutations(free, 2):
            want = oracle_soc(grid, [u, v], goals)
            assert _value(prob, grid, u, v) == (_INF if want is None else want), (grid, u, v, goals)
            checked += 1
            unsolvable += want is None
    assert checked > 500 and unsolvable > 20


@pytest.mark.parametrize("seed", range(2))
def test_pair_cost_is_the_pairs_optimum_from_their_starts(seed):
    # the sweeps stop once the starts' entry is proven: against the oracle on small boards, in both orders
    rng = np.random.default_rng(np.random.SeedSequence((2032, seed)))
    unsolvable = 0
    for _ in range(150):
        n = int(rng.integers(2, 5))
        grid, starts, goals = random_board(rng, n, 2)
        want = oracle_soc(grid, starts, goals)
        for order in ((0, 1), (1, 0)):
            prob = _problem(grid, [starts[a] for a in order], [goals[a] for a in order])
            assert _pair_cost(prob, 0, 1, _Budget(10**9)) == (_INF if want is None else want), (grid, starts)
            assert not prob.pairs_memo  # no table is kept: it is not complete
        unsolvable += want is None
    assert unsolvable > 5


def test_pair_cost_is_the_tables_entry_in_fewer_sweeps():
    rng = np.random.default_rng(np.random.SeedSequence(2033))
    spent = {"cost": 0, "table": 0}
    for _ in range(40):
        grid, starts, goals = random_board(rng, 8, 4)
        prob = _problem(grid, starts, goals)
        for i, j in itertools.combinations(range(4), 2):
            budgets = _Budget(10**9), _Budget(10**9)
            cost = _pair_cost(prob, i, j, budgets[0])
            table = _pair_table(prob, i, j, budgets[1])
            assert cost == table.both[prob.starts[i] * prob.nc + prob.starts[j]], (grid, starts, goals, i, j)
            spent["cost"] += 10**9 - budgets[0].left
            spent["table"] += 10**9 - budgets[1].left
            again = _Budget(10**9)
            assert _pair_cost(prob, i, j, again) == cost and again.left == 10**9  # read from the kept table
    assert spent["cost"] < 0.7 * spent["table"]


def test_the_table_spends_the_budget_and_stops_when_it_runs_out():
    prob = _problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    budget = _Budget(10**9)
    _pair_table(prob, 0, 1, budget)
    assert 0 < 10**9 - budget.left < 2_000
    again = _Budget(10**9)
    _pair_table(prob, 0, 1, again)  # remembered per problem: free the second time
    assert again.left == 10**9
    with pytest.raises(_OutOfBudget):
        _pair_table(_problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)]), 0, 1, _Budget(10))


def _random_cons(rng: np.random.Generator, prob: _Problem, agent: int) -> _Cons:
    """A few vertex constraints off the start, and maybe a goal the agent may rest on only late."""
    cells = [v for v in range(prob.nc) if prob.nbrs[v] and v != prob.starts[agent]]
    vset = frozenset(
        int(rng.integers(1, 7)) * prob.nc + cells[int(rng.integers(len(cells)))] for _ in range(3)
    )
    goal_min = int(rng.integers(0, 6)) if rng.random() < 0.4 else 0
    return (vset, frozenset(), max(v // prob.nc for v in vset), goal_min, _INF, {})


@pytest.mark.parametrize("seed", range(3))
def test_the_group_search_finds_the_same_optimum_with_and_without_the_tables(seed):
    """The tables change the order in which the group's states are settled, never the cost found: under
    random constraints, two and three members, the optimum equals the search without them."""
    rng = np.random.default_rng(np.random.SeedSequence((2032, seed)))
    compared = 0
    for _ in range(50):
        n = int(rng.integers(3, 6))
        k = int(rng.integers(2, 4))
        grid, starts, goals = random_board(rng, n, k)
        prob = _problem(grid, starts, goals)
        if any(prob.h[a][prob.starts[a]] >= _INF for a in range(k)):
            continue
        cons = [_random_cons(rng, prob, a) for a in range(k)]
        members = tuple(range(k))
        costs = []
        for tables in (True, False):
            fresh = _problem(grid, starts, goals)
            paths = _plan_group(fresh, members, cons, (), _INF, False, _Budget(10**7), pairs=tables)
            assert bool(fresh.pairs_memo) is tables  # the tables were (not) built
            costs.append(None if paths is None else sum(len(p) - 1 for p in paths))
        assert costs[0] == costs[1], (grid, starts, goals, cons)
        compared += costs[0] is not None
    assert compared > 25, compared


def test_the_single_agent_search_keeps_a_late_goal():
    # one step from its goal, but its cost must exceed 4: the path ends on the goal at t = 5 (it may
    # wait there before: the low level's relaxation of "cost > t", cbs._finish_after)
    prob = _problem(OPEN3, [(1, 1)], [(1, 2)])
    cons = (frozenset(), frozenset(), 4, 5, _INF, {})
    path = _plan(prob, 0, cons, (), _INF, False, _Budget(10_000))
    assert path is not None and len(path) - 1 == 5 and path[-1] == 5
    plain = _plan(prob, 0, _NO_CONS, (), _INF, False, _Budget(10_000))
    assert plain == (4, 5)


def test_a_search_that_found_no_path_answers_a_stricter_one_at_once():
    # the right column is the only way to the goal; barring (0, 2) from t = 0 on leaves none
    grid = ("...", "HH.", "HH.")
    prob = _problem(grid, [(0, 0)], [(2, 2)])
    prob.aids = True  # the memory is one of the slow boards' aids (four agents or more)
    barred: _Cons = (frozenset(), frozenset(), 0, 0, _INF, {2: 0})
    budget = _Budget(10_000)
    assert _plan(prob, 0, barred, (), _INF, False, budget) is None
    spent = 10_000 - budget.left
    assert spent > 0
    # more constraints, a later goal, the same cell barred (from the same time): known to fail, for free
    stricter: _Cons = (frozenset({1 * prob.nc + 1}), frozenset(), 1, 3, _INF, {2: 0})
    assert _plan(prob, 0, stricter, (), _INF, False, budget) is None
    assert 10_000 - budget.left == spent
    # a cell barred only later is not stricter: the search runs, and finds the path through it in time
    later: _Cons = (frozenset(), frozenset(), 9, 0, _INF, {2: 9})
    path = _plan(prob, 0, later, (), _INF, False, budget)
    assert path == (0, 1, 2, 5, 8) and 10_000 - budget.left > spent


def test_boards_of_two_and_three_agents_are_searched_as_before(monkeypatch):
    """The slow boards' aids change which draws a budgeted round keeps and which optimal plan is found, so
    boards of two and three agents (every CPU experiment's rounds) never use them, even in CBS."""
    from envengineer.mapf import solver as solver_module
    from envengineer.mapf.solver import cbs as solver_cbs

    def forbidden(*args, **kwargs):
        raise AssertionError("an aid of the slow boards was used")

    for where, name in ((solver_cbs, "_mdds_compatible"), (solver_module, "_pair_makespan")):
        monkeypatch.setattr(where, name, forbidden)
    monkeypatch.setattr(solver_joint_module, "_pair_table", forbidden)
    monkeypatch.setattr(solver_module, "JOINT_SPACE", 0)  # CBS and the horizon searches, not the joint ones
    monkeypatch.setattr(solver_module, "JOINT_SPACE_SOC", 0)
    rng = np.random.default_rng(np.random.SeedSequence((2033, 0)))
    for _ in range(40):
        grid, starts, goals = random_board(rng, int(rng.integers(3, 6)), int(rng.integers(2, 4)))
        assert not _problem(grid, starts, goals).aids
        try:
            solver_module.solve(grid, starts, goals, memo=False, node_budget=200_000)
        except (UnsolvableInstance, SolverBudgetExceeded):
            pass
    assert _problem(OPEN3, [(0, 0), (0, 1), (0, 2), (1, 0)], [(2, 0), (2, 1), (2, 2), (1, 2)]).aids
