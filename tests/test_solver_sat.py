"""Satisfiability, the fallback of the crowded boards CBS does not settle within its share of the budget:
exact by hand and against the brute-force oracle, counted in the budget's units, and never past the
budget; and the check for a plan at all that comes before it on small boards (satisfiability cannot
prove that there is none)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from pysat.solvers import Solver

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.solver import AIDS_MIN_AGENTS, DEFAULT_NODE_BUDGET, last_units, path_cost, solve
from envengineer.mapf.solver.delays import _delay_floors
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.problem import _Budget, _OutOfBudget
from envengineer.mapf.solver.reach import _has_plan, plan_exists
from envengineer.mapf.solver.sat import (
    SAT_SOLVER,
    _add_clauses,
    _Formula,
    _least_bound,
    _makespan_by_sat,
    _plan_by_sat,
    _Sum,
)
from test_solver import OPEN3, _all_reach, _problem, check_plan, oracle_makespan, oracle_soc, random_board


def _soc(paths, goals) -> int:
    return sum(path_cost(p, g) for p, g in zip(paths, goals, strict=True))


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
    board that has a plan, with the oracle's optima and a valid plan, and the check before it finds every
    board that has none."""
    monkeypatch.setattr(solver_module, "CBS_UNITS_BEFORE_SAT", 0)
    monkeypatch.setattr(solver_module, "HORIZON_UNITS_BEFORE_SAT", 0)
    monkeypatch.setattr(solver_module, "REACH_SPACE", 10**9)
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
            with pytest.raises(UnsolvableInstance):
                solve(grid, starts, goals, node_budget=1_000_000)
            continue
        sol = solve(grid, starts, goals, node_budget=1_000_000)
        assert (sol.soc, sol.makespan) == (want, oracle_makespan(grid, starts, goals)), (grid, starts, goals)
        check_plan(grid, starts, goals, sol)
        solved += 1
    assert solved >= 10, solved


def _answers(prob, bounds, *, soc: bool, others=None, grown_to: int | None = None) -> list[bool]:
    """Whether the formula has a model at each of ``bounds``, one formula grown through them all (or, with
    ``grown_to``, grown to that bound at once and asked each of them by assumptions)."""
    formula = _Formula(prob, _Budget(10**7), soc=soc, others=others)
    if grown_to is not None:
        formula.grow(grown_to)
    try:
        answers = []
        for bound in bounds:
            if grown_to is None:
                formula.grow(bound)
            paths = formula.solve(bound)
            answers.append(paths is not None)
            if paths is not None and soc:  # a model is a plan that keeps the bound
                assert _soc(paths, prob.goals) <= sum(formula.shortest) + bound
            elif paths is not None:  # every agent on its goal at the makespan asked
                assert [p[bound] for p in paths] == prob.goals and all(len(p) == bound + 1 for p in paths)
        return answers
    finally:
        formula.close()


@pytest.mark.parametrize("seed", range(2))
def test_the_formula_grown_bound_by_bound_answers_as_one_written_for_each_bound(seed):
    """The formula grows with its bound and drops the last bound's assumptions; at every bound it has a model
    exactly when the oracle's optimum keeps the bound, as does a formula written at once for that
    bound, one grown in jumps of two, and one written at once for the largest bound and asked each.
    Both objectives; every bound from 0 (for the makespan, bounds below an agent's shortest path too,
    which have no model); for the sum of costs also with the cells that the pairs' delays rule out
    left out, from the least delay they prove."""
    rng = np.random.default_rng(np.random.SeedSequence((2029, seed)))
    checked = 0
    while checked < 8:
        grid, starts, goals = random_board(rng, int(rng.integers(3, 5)), int(rng.integers(2, 5)))
        soc, makespan = oracle_soc(grid, starts, goals), oracle_makespan(grid, starts, goals)
        if soc is None:
            continue
        prob = _problem(grid, starts, goals)
        extra = soc - sum(prob.h[i][s] for i, s in enumerate(prob.starts))
        for want, bounds, is_soc in ((extra, range(extra + 3), True), (makespan, range(makespan + 3), False)):
            grown = _answers(prob, bounds, soc=is_soc)
            assert grown == [b >= want for b in bounds], (grid, starts, goals, is_soc)
            assert [_answers(prob, [b], soc=is_soc)[0] for b in bounds] == grown
            assert _answers(prob, bounds[1::2], soc=is_soc) == grown[1::2]
            assert _answers(prob, bounds, soc=is_soc, grown_to=bounds[-1]) == grown
        others, least = _delay_floors(prob, _Budget(10**7))
        assert least <= extra
        bounds = range(max(least, max(others)), extra + 3)
        assert _answers(prob, bounds, soc=True, others=others) == [b >= extra for b in bounds]
        assert _answers(prob, bounds, soc=True, others=others, grown_to=bounds[-1]) == [
            b >= extra for b in bounds
        ]
        checked += 1


def test_the_private_glucose_binding_the_clauses_go_through_is_there():
    """``sat._add_clauses`` reaches ``pysolvers.glucose41_add_cl`` and ``Glucose4.glucose``, which are not
    PySAT's public interface (hence the pre-release pin of python-sat in pyproject.toml): an upgrade that
    renames either fails here by name, not deep inside a solve."""
    import pysolvers
    from pysat.solvers import Glucose4

    assert callable(getattr(pysolvers, "glucose41_add_cl", None)), (
        "python-sat no longer has pysolvers.glucose41_add_cl, which sat._add_clauses calls: keep the pin in "
        "pyproject.toml or change sat._add_clauses to append_formula"
    )
    solver = Solver(name=SAT_SOLVER)
    try:
        assert type(solver.solver) is Glucose4 and solver.solver.glucose, (
            f"{SAT_SOLVER!r} is no longer a Glucose4 holding its handle in .glucose: sat._add_clauses would "
            "fall back to append_formula (slower, not wrong)"
        )
    finally:
        solver.delete()


@pytest.mark.parametrize(
    ("clauses", "satisfiable"),
    [
        ([[1, 2], [-1], [-2, 3]], True),
        ([[1], [-1]], False),  # refuted as the clauses are added: Glucose must remember it
        ([[1, 2], [-1, 2], [1, -2], [-1, -2]], False),  # refuted only by search
    ],
)
def test_clauses_handed_to_glucose_directly_are_solved_as_pysat_would(clauses, satisfiable):
    direct, usual = Solver(name=SAT_SOLVER), Solver(name=SAT_SOLVER)

    def the_slow_way(_clauses):
        raise AssertionError("the clauses went through PySAT's append_formula, not the C binding")

    direct.append_formula = the_slow_way
    try:
        _add_clauses(direct, clauses)
        usual.append_formula(clauses)
        assert direct.solve() is usual.solve() is satisfiable
        if satisfiable:
            true = set(direct.get_model())
            assert all(any(x in true for x in c) for c in clauses)
    finally:
        direct.delete()
        usual.delete()


class _Recorder:
    """A SAT solver stand-in that keeps every clause handed to it (and passes them on)."""

    def __init__(self, solver) -> None:
        self.solver, self.clauses = solver, []

    def append_formula(self, clauses) -> None:
        self.clauses += [list(c) for c in clauses]
        self.solver.append_formula(clauses)

    def __getattr__(self, name):
        return getattr(self.solver, name)


def _expected_conflicts(formula: _Formula) -> set[frozenset[int]]:
    """Every shared cell and every swap of two agents over the formula's cells, by brute force."""
    nbrs, want = formula.prob.nbrs, set()
    cells = [[{v: x for v, x in enumerate(row) if x} for row in agent] for agent in formula.var.tolist()]
    for i, j in itertools.combinations(range(formula.prob.k), 2):
        for t in range(formula.horizon + 1):
            want |= {frozenset((-x, -cells[j][t][v])) for v, x in cells[i][t].items() if v in cells[j][t]}
            if t == formula.horizon:
                continue
            for u, x in cells[i][t].items():
                for v in nbrs[u]:
                    if v != u and v in cells[i][t + 1] and v in cells[j][t] and u in cells[j][t + 1]:
                        want.add(frozenset((-x, -cells[i][t + 1][v], -cells[j][t][v], -cells[j][t + 1][u])))
    return want


@pytest.mark.parametrize("soc", [True, False])
def test_the_conflict_clauses_are_every_shared_cell_and_swap_once(soc):
    # the clauses with only negative literals are the conflicts (the others each hold a positive one):
    # grown in jumps, they are exactly the brute-force set over the final cells, none written twice
    rng = np.random.default_rng(2035)
    counts = {2: 0, 4: 0}
    for _ in range(12):
        grid, starts, goals = random_board(rng, int(rng.integers(3, 6)), int(rng.integers(2, 5)))
        prob = _problem(grid, starts, goals)
        if not _all_reach(prob):
            continue
        formula = _Formula(prob, _Budget(10**7), soc=soc)
        formula.solver = recorder = _Recorder(formula.solver)
        try:
            for bound in (2, 3, 6, 7) if soc else (5, 6, 9):
                formula.grow(bound)
            written = [frozenset(c) for c in recorder.clauses if all(x < 0 for x in c) and len(c) in (2, 4)]
            assert len(written) == len(set(written))
            assert set(written) == _expected_conflicts(formula), (grid, starts, goals)
            for c in written:
                counts[len(c)] += 1
        finally:
            formula.close()
    assert counts[2] > 100 and counts[4] > 20, counts  # shared cells and swaps both took part


def _boards_with_floors(rng: np.random.Generator, sides: tuple[int, int], count: int):
    """``count`` random boards of 2-4 agents (sides drawn in ``sides``, upper end excluded) whose agents all
    reach their goals and whose pairs can all finish: each as (grid, starts, goals), its problem, and
    each agent's floor of the other agents' delays."""
    found = 0
    while found < count:
        board = random_board(rng, int(rng.integers(*sides)), int(rng.integers(2, 5)))
        prob = _problem(*board)
        if not _all_reach(prob):
            continue
        floors = _delay_floors(prob, _Budget(10**7))
        if floors is None:
            continue
        yield board, prob, floors[0]
        found += 1


def _need(prob, formula: _Formula, i: int, t: int, v: int) -> int:
    """The bound that cell ``v`` of agent ``i`` at time ``t`` needs, by its definition (``_Formula``)."""
    if formula.soc and v == prob.goals[i]:
        return formula.others[i] if t >= formula.off[i] else _INF
    if prob.dist_from(prob.starts[i])[v] > t or prob.h[i][v] >= _INF:
        return _INF
    return t + prob.h[i][v] - formula.off[i] + formula.others[i]


@pytest.mark.parametrize("soc", [True, False])
def test_the_cells_are_those_whose_need_fits_the_bound(soc):
    # grown in jumps (the cells of each bound found per agent and cell from the last), the formula's layers
    # hold exactly the cells whose need is within the bound, each with a variable of its own
    for board, prob, others in _boards_with_floors(np.random.default_rng(2036), (3, 6), 10):
        formula = _Formula(prob, _Budget(10**7), soc=soc, others=others if soc else None)
        low = max(formula.others) if soc else max(formula.shortest)
        try:
            for bound in (low, low + 1, low + 4, low + 5):
                formula.grow(bound)
                have = formula.var[:, :, : prob.nc]
                assert len(np.unique(have[have > 0])) == np.count_nonzero(have)
                want = [
                    [
                        [_need(prob, formula, i, t, v) <= bound for v in range(prob.nc)]
                        for t in range(have.shape[1])
                    ]
                    for i in range(prob.k)
                ]
                assert (have > 0).tolist() == want, (board, bound)
        finally:
            formula.close()


def test_a_goal_held_to_a_wait_is_written_once_and_opened_once():
    """A goal at a time its arrival is not yet open has its clause written once under its guard ("the
    bound is below" the one that opens it) and once more, with every way in, when a bound opens it; every
    other cell's clause is written once. Grown bound by bound and in jumps, with the pairs' floors."""
    opened = 0
    for _, prob, others in _boards_with_floors(np.random.default_rng(2037), (4, 6), 10):
        formula = _Formula(prob, _Budget(10**7), soc=True, others=others)
        formula.solver = recorder = _Recorder(formula.solver)
        low = max(formula.others)
        try:
            for bound in (low, low + 1, low + 2, low + 5, low + 6):
                formula.grow(bound)
            rows: dict[int, list[list[int]]] = {}
            for c in recorder.clauses:
                if len(c) == 7:  # a cell's ways in: guard or filler, the cell, five ways or fillers
                    rows.setdefault(-c[1], []).append(c)
            goal_vars = {
                int(formula.var[i, t, g])
                for i, g in enumerate(prob.goals)
                for t in range(formula.horizon + 1)
            }
            for cell, written in rows.items():
                if len(written) == 1:
                    continue
                assert cell in goal_vars and len(written) == 2, (cell, written)
                (guard, _, *held), (filler, _, *opened_ways) = written
                assert guard < 0 and filler == 1  # the first under its guard, the second for good
                assert set(held) - {1} < set(opened_ways) - {1}  # the wait alone, then every way in
                opened += 1
        finally:
            formula.close()
    assert opened > 20, opened


class _Ladder:
    """A formula stand-in: a plan from bound ``least`` on, and the bounds below ``outright`` refuted by
    propagation alone; it records the bounds grown and asked."""

    def __init__(self, least: int, outright: int) -> None:
        self.least, self.outright, self.bound = least, outright, -1
        self.grown: list[int] = []
        self.asked: list[int] = []
        self.refuted_outright = False

    def grow(self, bound: int) -> None:
        assert bound > self.bound
        self.bound = bound
        self.grown.append(bound)

    def solve(self, bound: int | None = None):
        bound = self.bound if bound is None else bound
        assert bound <= self.bound
        self.asked.append(bound)
        self.refuted_outright = bound < min(self.outright, self.least)
        return [(bound,)] if bound >= self.least else None


def test_the_bounds_step_by_two_after_a_refutation_by_propagation_alone():
    # every refutation by propagation: 3, 5, 7 refuted, 9 has a plan, and 8, skipped, has none
    ladder = _Ladder(least=9, outright=99)
    assert _least_bound(ladder, 3) == (9, [(9,)])
    assert (ladder.grown, ladder.asked) == ([3, 5, 7, 9], [3, 5, 7, 9, 8])
    # 11 has a plan and so has 10, skipped: the least is returned
    ladder = _Ladder(least=10, outright=99)
    assert _least_bound(ladder, 3) == (10, [(10,)])
    assert (ladder.grown, ladder.asked) == ([3, 5, 7, 9, 11], [3, 5, 7, 9, 11, 10])
    # a refutation that needed search steps by one again
    ladder = _Ladder(least=10, outright=6)
    assert _least_bound(ladder, 3) == (10, [(10,)])
    assert ladder.grown == [3, 5, 7, 8, 9, 10]
    # below ``hi`` (the makespan's known plan) the formula never grows to ``hi``, and answers ``hi`` when
    # no bound below has a plan
    ladder = _Ladder(least=12, outright=99)
    assert _least_bound(ladder, 3, hi=10) == (10, None)
    assert ladder.grown == [3, 5, 7, 9]
    ladder = _Ladder(least=9, outright=99)
    assert _least_bound(ladder, 4, hi=10) == (9, [(9,)])
    assert (ladder.grown, ladder.asked) == ([4, 6, 8, 9], [4, 6, 8, 9])


def _sum_clauses(grow: list[tuple[int, int, int]]) -> set[tuple[int, ...]]:
    """The clauses of one sum widened through ``grow`` (the digits of a and b and the cap at each step)."""
    a: list[int] = []
    b: list[int] = []
    node, clauses, top = _Sum(a, b), [], iter(range(1000, 2000))
    for len_a, len_b, cap in grow:
        a.extend(range(len(a) + 1, len_a + 1))  # a's digits are 1, 2, ... and b's 101, 102, ...
        b.extend(range(101 + len(b), 101 + len_b))
        node.widen(cap, lambda: next(top), clauses.append)
    assert len(clauses) == len(set(map(tuple, clauses)))  # no clause written twice
    return set(map(tuple, clauses))


def test_a_sum_widened_step_by_step_writes_the_clauses_of_one_written_at_once():
    # out[m] (variables 1000, 1001, ...) when a + b exceeds m: a[x] alone, b[y] alone, or both
    assert _sum_clauses([(2, 1, 3)]) == {
        (-1, 1000), (-2, 1001), (-101, 1000), (-1, -101, 1001), (-2, -101, 1002)
    }  # fmt: skip
    rng = np.random.default_rng(7)
    for _ in range(50):
        steps, len_a, len_b, cap = [], 0, 0, 1
        for _ in range(int(rng.integers(1, 6))):
            len_a, len_b, cap = len_a + int(rng.integers(0, 3)), len_b + int(rng.integers(0, 3)), cap + 1
            steps.append((len_a, len_b, cap))
        assert _sum_clauses(steps) == _sum_clauses(steps[-1:]), steps


def test_satisfiability_stays_within_the_budget(monkeypatch):
    """A crowded board (seed 7's board 37 of ``bench_solver.py``: 5 agents, optimum 11 steps above the
    shortest paths) that CBS alone does not settle in 300,000 units: satisfiability from CBS's bound
    settles it within the default budget, and a small budget ends it with the budget's error, the
    overshoot of its last layer at most."""
    monkeypatch.setattr(solver_module, "CBS_UNITS_BEFORE_SAT", 0)
    grid = ["HH........", "...H..HHH.", "..H.HHH...", "H....H.H.H", "H.HH..HHH.",
            ".....HH...", "...HHH.H.H", "H..H..H...", "......HH.H", "....H...H."]  # fmt: skip
    starts, goals = [(4, 1), (0, 2), (0, 7), (2, 0), (7, 5)], [(1, 4), (1, 0), (9, 6), (6, 1), (3, 1)]
    with pytest.raises(SolverBudgetExceeded):
        solve(grid, starts, goals, node_budget=3_000, memo=False)
    assert 3_000 < last_units() < 3_000 + 1_000
    sol = solve(grid, starts, goals, memo=False)
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (57, 20, 46)
    check_plan(grid, starts, goals, sol)
    # with a deadline the solver runs a chunk of the budget at a time and reads the clock in between: seed
    # 9's board 28, which needs more than the default budget (the board above now settles within a chunk)
    grid = ["..........", "...H..HHH.", "H.....H...", "......H.HH", "....HHH...",
            "H...HH....", ".H...H...H", "H.H.HHH.H.", "...H......", "H..H...HH."]  # fmt: skip
    starts, goals = [(4, 3), (1, 9), (3, 0), (8, 7), (4, 7)], [(2, 1), (2, 9), (7, 7), (0, 9), (0, 8)]
    with pytest.raises(SolverBudgetExceeded):
        solve(grid, starts, goals, memo=False)
    start = time.perf_counter()
    with pytest.raises(SolverBudgetExceeded, match="time_limit"):
        solve(grid, starts, goals, node_budget=10**9, time_limit=0.005)
    assert time.perf_counter() - start < 1.0


# 4 agents on 7x7 (``bench_solver.py``'s draws of seed 1, boards 30 and 16): on the first, agents 2 and 3
# must be delayed 3 steps together; on the second no pair more than 2, and CBS settles it in 181 units
CROWDED = (
    ["..HH..H", ".H.H..H", "H.H..H.", "..HH.HH", ".....H.", ".HH.HH.", "..H.HH."],
    [(4, 0), (3, 1), (5, 0), (6, 3)],
    [(6, 0), (4, 4), (1, 5), (3, 4)],
)
LOOSE = (
    [".H..H..", "..H.HH.", "......H", "H..H.HH", "H.HHH.H", "H..HH..", "H....H."],
    [(0, 2), (6, 1), (6, 3), (5, 1)],
    [(3, 2), (0, 3), (5, 2), (2, 1)],
)


def _entries_to_satisfiability(monkeypatch) -> list[int]:
    """The units spent when each call of satisfiability began (recorded as the solver runs)."""
    entered: list[int] = []
    real = solver_module._plan_by_sat

    def recorded(prob, budget, soc_floor):
        entered.append(budget.used)
        return real(prob, budget, soc_floor)

    monkeypatch.setattr(solver_module, "_plan_by_sat", recorded)
    return entered


def test_a_board_with_a_pair_that_must_be_swept_goes_to_satisfiability_after_cbs_first_try(monkeypatch):
    entered = _entries_to_satisfiability(monkeypatch)
    sol = solve(*CROWDED, memo=False)
    assert len(entered) == 1 and entered[0] < solver_module.CBS_UNITS_BEFORE_SAT
    check_plan(*CROWDED, sol)
    # with a first try as long as the share, CBS spends the whole share before it; the same optima
    monkeypatch.setattr(solver_module, "SAT_SCOUT", solver_module.CBS_UNITS_BEFORE_SAT)
    entered.clear()
    again = solve(*CROWDED, memo=False)
    assert len(entered) == 1 and entered[0] >= solver_module.CBS_UNITS_BEFORE_SAT
    assert (
        (again.soc, again.makespan, again.shortest_sum)
        == (sol.soc, sol.makespan, sol.shortest_sum)
        == (27, 9, 19)
    )


def test_a_board_whose_pairs_are_delayed_a_step_or_two_stays_with_cbs(monkeypatch):
    entered = _entries_to_satisfiability(monkeypatch)
    sol = solve(*LOOSE, memo=False)
    assert entered == [] and last_units() > solver_module.SAT_SCOUT  # CBS searched again, and settled it
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (20, 8, 18)
    check_plan(*LOOSE, sol)


# seed 12's board 148 of ``bench_solver.py``: agents 0, 1 and 4 share a corridor from (7, 0) along the
# bottom rows to (8, 6), where it forks into two single cells, (7, 6) and (8, 7); agents 2 and 3 stand in
# regions of their own
FORK = [".HHH.HH..H", "..HH...H..", ".H.HHHH...", "......HHH.", "HH...H.HHH",
        "H.H.H.H...", "H.H.H.HH.H", ".H.HHH.H..", "..HHHH..H.", "H......H.."]  # fmt: skip
FORK_STARTS = [(7, 0), (8, 7), (2, 8), (5, 3), (8, 1)]
FORK_GOALS = [(9, 3), (9, 2), (0, 7), (1, 0), (9, 1)]


def test_a_board_without_a_plan_is_proven_so_before_satisfiability(monkeypatch):
    """Agent 0 stands at the corridor's closed end behind agent 4 and must end beyond 4's goal, agent 1
    between them: the two must pass each other, and only the fork lets agents pass, but with agent 1 there
    its three cells hold all three agents and none is left to step aside into. No plan; CBS splits for
    ever and satisfiability tries cost after cost. The check for a plan at all settles it within the
    default budget; without it the budget runs out."""
    with pytest.raises(UnsolvableInstance):
        solve(FORK, FORK_STARTS, FORK_GOALS, memo=False)
    assert last_units() < DEFAULT_NODE_BUDGET
    monkeypatch.setattr(solver_module, "REACH_SPACE", 0)
    with pytest.raises(SolverBudgetExceeded):
        solve(FORK, FORK_STARTS, FORK_GOALS, memo=False)


def test_the_check_charges_one_unit_a_position_and_stops_with_the_budget():
    # two agents that must swap in a corridor: no plan, and every position of each side is reached once
    corridor = ("....", "HHHH", "HHHH", "HHHH")
    starts, goals = [(0, 0), (0, 3)], [(0, 3), (0, 0)]
    budget = _Budget(10**6)
    assert not _has_plan(_problem(corridor, starts, goals), budget)
    # plan_exists counts the same positions against its own node budget
    assert not plan_exists(corridor, starts, goals, node_budget=budget.used)
    with pytest.raises(SolverBudgetExceeded):
        plan_exists(corridor, starts, goals, node_budget=budget.used - 1)
    with pytest.raises(_OutOfBudget):
        _has_plan(_problem(corridor, starts, goals), _Budget(budget.used - 1))
    assert _has_plan(_problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)]), _Budget(10**6))
