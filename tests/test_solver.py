"""The exact solver against hand-checked boards and an independent brute-force joint search."""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.errors import InstanceFormatError, SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.instance import MOVES, Cell, Instance
from envengineer.mapf.solver import (
    Solution,
    distance_map,
    paths_to_actions,
    shortest_path_lengths,
    solve,
    solve_instance,
)
from envengineer.mapf.solver import cbs as solver_cbs
from envengineer.mapf.solver.cbs import _mdds_compatible
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.joint import _pair_makespan
from envengineer.mapf.solver.problem import (
    _NO_CONS,
    _Budget,
    _mdd,
    _OutOfBudget,
    _plan,
    _Problem,
)

OPEN3 = ("...", "...", "...")


@pytest.fixture(autouse=True)
def _fresh_memo():
    """Each test (and each strategy below, which clears it again) searches instead of reading the memo."""
    solver_module.MEMO.clear()


# -- an independent oracle: brute force over joint positions ---------------------------------------------
def _free(grid: Sequence[str], cell: Cell) -> bool:
    r, c = cell
    return 0 <= r < len(grid) and 0 <= c < len(grid) and grid[r][c] == "."


def _joint_steps(grid: Sequence[str], pos: tuple[Cell, ...], movable: set[int]) -> Iterator[tuple[Cell, ...]]:
    """Every joint step from ``pos`` (agents outside ``movable`` stay) without vertex or swap conflicts."""
    options = []
    for a, (r, c) in enumerate(pos):
        if a in movable:
            options.append([(r + dr, c + dc) for dr, dc in MOVES.values() if _free(grid, (r + dr, c + dc))])
        else:
            options.append([(r, c)])
    for new in itertools.product(*options):
        if len(set(new)) < len(new):
            continue
        if any(new[a] == pos[b] and new[b] == pos[a] and new[a] != pos[a]
               for a in range(len(pos)) for b in range(a + 1, len(pos))):  # fmt: skip
            continue
        yield new


def oracle_soc(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], horizon: int = 10**9
) -> int | None:
    """Dijkstra over (positions, finished agents, time): an agent on its goal may finish at no cost and
    then stays there for good; every unfinished agent pays 1 per step. Time is tracked only under a
    ``horizon``; ``None`` when no plan ends within it."""
    k = len(starts)
    start = (tuple(starts), frozenset(), 0)
    best = {start: 0}
    heap = [(0, 0, start)]
    tick = 0
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > best[state]:
            continue
        pos, done, t = state
        if len(done) == k:
            return d
        successors = [((pos, done | {a}, t), d) for a in range(k) if a not in done and pos[a] == goals[a]]
        if t < horizon:
            movable = set(range(k)) - done
            t1 = t + 1 if horizon < 10**9 else 0
            successors += [((new, done, t1), d + len(movable)) for new in _joint_steps(grid, pos, movable)]
        for nxt, nd in successors:
            if nd < best.get(nxt, 10**9):
                best[nxt] = nd
                tick += 1
                heapq.heappush(heap, (nd, tick, nxt))
    return None


def oracle_makespan(grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]) -> int | None:
    """BFS over joint positions: the fewest steps after which every agent is on its goal."""
    start, target = tuple(starts), tuple(goals)
    seen = {start: 0}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        if pos == target:
            return seen[pos]
        for new in _joint_steps(grid, pos, set(range(len(pos)))):
            if new not in seen:
                seen[new] = seen[pos] + 1
                if new == target:
                    return seen[new]
                queue.append(new)
    return None


def random_board(rng: np.random.Generator, n: int, k: int) -> tuple[list[str], list[Cell], list[Cell]]:
    while True:
        holes = rng.random((n, n)) < rng.uniform(0.0, 0.5)
        grid = ["".join("H" if holes[r, c] else "." for c in range(n)) for r in range(n)]
        free = [(r, c) for r in range(n) for c in range(n) if not holes[r, c]]
        if len(free) < k + 1:
            continue
        starts = [free[i] for i in rng.permutation(len(free))[:k]]
        goals = [free[i] for i in rng.permutation(len(free))[:k]]
        if all(s != g for s, g in zip(starts, goals, strict=True)):
            return grid, starts, goals


def check_plan(grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], sol: Solution) -> None:
    """The plan is legal, conflict-free, goes from the starts to the goals and costs ``sol.soc``."""
    paths = sol.paths
    horizon = len(paths[0]) - 1
    assert all(len(p) == horizon + 1 for p in paths)
    for a, path in enumerate(paths):
        assert path[0] == tuple(starts[a]) and path[-1] == tuple(goals[a])
        for t in range(horizon):
            assert abs(path[t][0] - path[t + 1][0]) + abs(path[t][1] - path[t + 1][1]) <= 1
            assert _free(grid, path[t + 1])
    for t in range(horizon + 1):
        assert len({p[t] for p in paths}) == len(paths), f"vertex conflict at t={t}"
    for t in range(horizon):
        for a, b in itertools.combinations(range(len(paths)), 2):
            pa, pb = paths[a], paths[b]
            assert not (pa[t] != pa[t + 1] and pa[t] == pb[t + 1] and pa[t + 1] == pb[t]), f"swap at t={t}"
    soc = 0
    for a, path in enumerate(paths):
        t = horizon
        while t > 0 and path[t - 1] == tuple(goals[a]):
            t -= 1
        soc += t
    assert soc == sol.soc
    assert max(0, horizon) >= sol.makespan
    shortest = shortest_path_lengths(grid, starts, goals)
    assert sol.shortest_sum == sum(shortest)  # type: ignore[arg-type]
    assert sol.soc >= sol.shortest_sum and sol.makespan >= max(shortest)  # type: ignore[type-var]


# -- SPEC §2.3 ----------------------------------------------------------------------------------------
def test_spec_swap_example():
    sol = solve(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (6, 4, 4)
    assert sol.needs_wait
    check_plan(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)], sol)


def test_spec_following_example():
    sol = solve(OPEN3, [(1, 0), (1, 1)], [(1, 1), (1, 2)])
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (2, 1, 2)
    assert not sol.needs_wait
    assert paths_to_actions(sol.paths) == [["RIGHT"], ["RIGHT"]]


def test_solve_instance_matches_solve():
    inst = Instance("x", OPEN3, ((0, 0), (0, 2)), ((0, 2), (0, 0)))
    assert solve_instance(inst) == solve(inst.grid, inst.starts, inst.goals)


def test_a_board_solved_again_is_read_from_the_memo():
    grid, starts, goals = ("....", ".H..", "....", "..H."), [(0, 0), (0, 3)], [(0, 3), (0, 0)]
    first = solve(grid, starts, goals)
    again = solve(list(grid), [list(c) for c in starts], goals)  # same board, other sequence types
    assert again == first and solver_module.MEMO.hits == 1
    assert solve(grid, starts, goals, time_limit=5.0) == first  # a timed call searches: same answer
    assert solver_module.MEMO.hits == 1


def test_the_memo_keeps_its_most_recent_answers(monkeypatch):
    monkeypatch.setattr(solver_module.MEMO, "size", 2)
    boards = [(OPEN3, [(0, c)], [(2, c)]) for c in range(3)]
    for board in boards:
        solve(*board)
    assert len(solver_module.MEMO) == 2
    solve(*boards[0])  # pushed out by the third board
    assert solver_module.MEMO.hits == 0
    solve(*boards[2])
    assert solver_module.MEMO.hits == 1


def test_a_remembered_solution_is_what_solve_returns():
    inst = Instance("x", ("....", ".H..", "....", "..H."), ((0, 0), (0, 3)), ((0, 3), (0, 0)))
    sol = solve_instance(inst)
    solver_module.MEMO.clear()
    solver_module.remember(inst, sol)
    assert solve_instance(inst) == sol and solver_module.MEMO.hits == 1


# -- against the oracle -------------------------------------------------------------------------------
# Tiny boards go to the joint search by default; "cbs" forces CBS (with merging and symmetry reasoning)
# and the horizon searches for the makespan, "cbs-alone" forbids merging as well.
STRATEGIES = {
    "default": {},
    "cbs": {"JOINT_SPACE": 0, "JOINT_SPACE_SOC": 0},
    "cbs-alone": {"JOINT_SPACE": 0, "JOINT_SPACE_SOC": 0, "MERGE_SPACE": 0},
}


@pytest.mark.parametrize("seed", range(3))
def test_matches_brute_force_on_random_small_boards(seed, monkeypatch):
    rng = np.random.default_rng(np.random.SeedSequence((2026, seed)))
    kinds = {"solved": 0, "unsolvable": 0, "unproven": 0}
    for _ in range(70):
        n = int(rng.integers(3, 5))
        k = int(rng.integers(2, 4)) if n == 3 else int(rng.integers(2, 3 if rng.random() < 0.5 else 4))
        grid, starts, goals = random_board(rng, n, k)
        want = oracle_soc(grid, starts, goals)
        want_makespan = None if want is None else oracle_makespan(grid, starts, goals)
        for name, overrides in STRATEGIES.items():
            solver_module.MEMO.clear()
            with monkeypatch.context() as mp:
                for attr, value in overrides.items():  # each setting is read where it is defined
                    owner = solver_cbs if hasattr(solver_cbs, attr) else solver_module
                    mp.setattr(owner, attr, value)
                budget = 20_000 if name == "cbs-alone" else 1_000_000
                if want is None:
                    # without merging, CBS proves only unreachable goals; otherwise it must give up
                    expected = (
                        (UnsolvableInstance, SolverBudgetExceeded)
                        if name == "cbs-alone"
                        else UnsolvableInstance
                    )
                    with pytest.raises(expected):
                        solve(grid, starts, goals, node_budget=budget)
                    kinds["unsolvable"] += 1
                    continue
                try:
                    sol = solve(grid, starts, goals, node_budget=budget)
                except SolverBudgetExceeded:
                    assert name == "cbs-alone"
                    kinds["unproven"] += 1
                    continue
                assert (sol.soc, sol.makespan) == (want, want_makespan), (name, grid, starts, goals)
                check_plan(grid, starts, goals, sol)
                kinds["solved"] += 1
    assert kinds["solved"] > 100 and kinds["unsolvable"] > 0 and kinds["unproven"] < 10, kinds


@pytest.mark.parametrize(
    ("grid", "starts", "goals", "soc", "makespan"),
    [
        # every SoC-optimal plan takes 5 steps, but a plan costing 8 finishes in 4
        (("H..", "...", ".HH"), [(1, 2), (1, 0)], [(2, 0), (1, 2)], 7, 4),
        # here the solver's SoC-optimal plan takes 4 steps while another one takes 3
        (("HH.", "...", "..."), [(1, 2), (2, 2)], [(2, 2), (0, 2)], 5, 3),
        (("....", "....", "....", "...."), [(0, 3), (1, 0), (3, 3)], [(3, 2), (2, 3), (1, 3)], 11, 4),
        # an agent must step off its goal to let another pass, then come back
        (("...", "H.H", "H.H"), [(0, 1), (2, 1)], [(1, 1), (0, 0)], None, None),
    ],
)
def test_soc_and_makespan_from_different_plans(grid, starts, goals, soc, makespan):
    want_soc = oracle_soc(grid, starts, goals)
    want_makespan = oracle_makespan(grid, starts, goals)
    if soc is not None:
        assert (want_soc, want_makespan) == (soc, makespan)
    sol = solve(grid, starts, goals)
    assert (sol.soc, sol.makespan) == (want_soc, want_makespan)
    check_plan(grid, starts, goals, sol)


def test_first_case_really_needs_two_plans():
    grid, starts, goals = ("H..", "...", ".HH"), [(1, 2), (1, 0)], [(2, 0), (1, 2)]
    assert oracle_soc(grid, starts, goals, horizon=4) == 8  # within the optimal makespan SoC is worse
    sol = solve(grid, starts, goals)
    assert len(sol.paths[0]) - 1 > sol.makespan


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(4, 6), k=st.integers(2, 4))
def test_plans_are_valid_on_larger_boards(seed, n, k):
    grid, starts, goals = random_board(np.random.default_rng(seed), n, k)
    try:
        sol = solve(grid, starts, goals)
    except (UnsolvableInstance, SolverBudgetExceeded):
        return
    check_plan(grid, starts, goals, sol)
    assert solve(grid, starts, goals) == sol  # deterministic


def test_five_agents_on_an_open_board():
    grid = ("......",) * 6
    starts = [(0, 0), (0, 5), (5, 0), (5, 5), (2, 2)]
    goals = [(5, 5), (5, 0), (0, 5), (0, 0), (3, 3)]
    sol = solve(grid, starts, goals)
    check_plan(grid, starts, goals, sol)
    assert sol.shortest_sum == 42 and sol.soc >= 42


# -- makespan: the pairs' bound and the horizon search's pruning ---------------------------------------
def _problem(grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell]) -> _Problem:
    n = len(grid)
    return _Problem(grid, [r * n + c for r, c in starts], [r * n + c for r, c in goals])


def _all_reach(prob: _Problem) -> bool:
    """Whether every agent can reach its goal (the solver turns a board where one cannot away before any
    search)."""
    return all(prob.h[i][s] < _INF for i, s in enumerate(prob.starts))


def test_a_pair_that_must_swap_bounds_the_makespan():
    # SPEC §2.3's swap: each agent alone needs 2 steps, the two together 4; the third agent is free
    prob = _problem(OPEN3, [(0, 0), (0, 2), (2, 0)], [(0, 2), (0, 0), (2, 1)])
    assert _pair_makespan(prob, 0, 1, _Budget(10_000), 100) == 4
    assert _pair_makespan(prob, 0, 2, _Budget(10_000), 100) == 2
    assert _pair_makespan(prob, 0, 1, _Budget(10_000), 3) == 3  # "3 or more"


def test_diagrams_that_hold_no_conflict_free_pair_of_paths():
    budget = _Budget(10_000)
    # a corridor of three cells: the two can never pass each other
    line = _problem(("...", "HHH", "HHH"), [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert not _mdds_compatible(line, (0, 1), _mdd(line, 0, _NO_CONS, 2), _mdd(line, 1, _NO_CONS, 2), budget)
    # on the open board the swap fits in 4 steps, not in 3 (the optimal makespan is 4)
    prob = _problem(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    for depth, fits in ((3, False), (4, True)):
        m0, m1 = _mdd(prob, 0, _NO_CONS, depth), _mdd(prob, 1, _NO_CONS, depth)
        assert _mdds_compatible(prob, (0, 1), m0, m1, budget) is fits


@pytest.mark.parametrize("seed", range(2))
def test_pair_makespan_against_brute_force(seed):
    """Two agents: the pair's makespan is the board's; three: every pair's is a lower bound of it."""
    rng = np.random.default_rng(np.random.SeedSequence((2027, seed)))
    checked = 0
    for _ in range(60):
        n = int(rng.integers(3, 5))
        k = int(rng.integers(2, 4))
        grid, starts, goals = random_board(rng, n, k)
        want = oracle_makespan(grid, starts, goals)
        if want is None:
            continue
        prob = _problem(grid, starts, goals)
        bounds = [
            _pair_makespan(prob, a, b, _Budget(10**6), 10**6) for a, b in itertools.combinations(range(k), 2)
        ]
        assert max(bounds) == want if k == 2 else max(bounds) <= want, (grid, starts, goals)
        checked += 1
    assert checked > 30


# -- failures -----------------------------------------------------------------------------------------
def test_the_single_agent_search_stops_with_the_budget_on_the_slow_boards_only():
    # an agent that must cross an open 10x10 board and may not stand on its goal before time 40: the
    # search visits hundreds of states, charged when it ends
    open10 = ["." * 10] * 10
    late = (frozenset(), frozenset(), 40, 40, _INF, {})  # on its goal no sooner than 40, timed till then
    for aids in (False, True):
        prob = _Problem(open10, [0], [99], aids=aids)
        budget = _Budget(10**6)
        path = _plan(prob, 0, late, (), _INF, False, budget)
        assert path is not None and len(path) == 41 and path[-1] == 99
        states = budget.used
        assert states > 500
        # given half of that: with the aids the search stops one state past the budget; without, it runs
        # to its end, and the budget learns it only then
        budget = _Budget(states // 2)
        if aids:
            with pytest.raises(_OutOfBudget):
                _plan(prob, 0, late, (), _INF, False, budget)
            assert budget.used == states // 2 + 1
        else:
            assert _plan(prob, 0, late, (), _INF, False, budget) == path
            assert budget.used == states
        # within a share of a larger budget, the same: the share is what the search has
        shared = _Budget(10**6)
        found = shared.within(states // 2, functools.partial(_plan, prob, 0, late, (), _INF, False, shared))
        assert (found, shared.used) == ((None, states // 2 + 1) if aids else (path, states))


def test_unreachable_goal_raises():
    with pytest.raises(UnsolvableInstance, match="agent 1"):
        solve(("..H", ".H.", "H.."), [(0, 0), (2, 2)], [(1, 0), (0, 0)])


@pytest.mark.parametrize("n", [3, 10])
def test_impossible_corridor_swap_terminates(n):
    grid = ["." * n] + ["H" * n] * (n - 1)
    with pytest.raises((UnsolvableInstance, SolverBudgetExceeded)):
        solve(grid, [(0, 0), (0, n - 1)], [(0, n - 1), (0, 0)])


def test_agents_that_must_pass_in_a_corridor_are_proven_unsolvable():
    grid = ("....", "HHH.", "HHH.", "HHHH")
    with pytest.raises(UnsolvableInstance):
        solve(grid, [(0, 0), (0, 2), (2, 3)], [(1, 3), (0, 1), (0, 3)])


def test_tiny_budget_raises():
    with pytest.raises(SolverBudgetExceeded, match="node_budget"):
        solve(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)], node_budget=1)


def test_last_units_counts_the_last_search_whatever_its_outcome():
    """What ``bench_solver.py --units`` reports: a budget that settles the board spends what the search
    needs (the same again with a larger budget), one that runs out reports more than it held, a memo hit
    leaves the figure, and a goal out of reach spends nothing."""
    board = (OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    solve(*board, memo=False)
    spent = solver_module.last_units()
    assert 0 < spent
    solve(*board, node_budget=10 * spent, memo=False)
    assert solver_module.last_units() == spent
    with pytest.raises(SolverBudgetExceeded):
        solve(*board, node_budget=spent // 2, memo=False)
    assert solver_module.last_units() > spent // 2
    solve(*board)
    solve(*board)  # from the memo: no search
    assert solver_module.last_units() == spent
    with pytest.raises(UnsolvableInstance):
        solve(("...", "HHH", "..."), [(0, 0)], [(2, 0)], memo=False)
    assert solver_module.last_units() == 0


@pytest.mark.parametrize(
    ("starts", "goals"),
    [([(0, 0)], [(0, 1), (1, 1)]), ([(0, 0), (0, 0)], [(1, 1), (2, 2)]), ([(0, 3)], [(0, 0)])],
)
def test_malformed_boards_raise_format_errors(starts, goals):
    with pytest.raises(InstanceFormatError):
        solve(OPEN3, starts, goals)


# -- helpers ------------------------------------------------------------------------------------------
def test_distance_map_and_shortest_paths():
    grid = ("...", ".H.", "...")
    dist = distance_map(grid, (0, 0))
    assert dist.tolist() == [[0, 1, 2], [1, -1, 3], [2, 3, 4]]
    assert shortest_path_lengths(("..H", "HH.", "..."), [(0, 0), (2, 0)], [(0, 1), (1, 2)]) == [1, 3]
    assert shortest_path_lengths(("..H", "HH.", "..."), [(0, 0)], [(2, 2)]) == [None]


def test_paths_to_actions_round_trip():
    sol = solve(OPEN3, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    plan = paths_to_actions(sol.paths)
    for a, actions in enumerate(plan):
        cell = sol.paths[a][0]
        for name in actions:
            cell = (cell[0] + MOVES[name][0], cell[1] + MOVES[name][1])
        assert cell == sol.paths[a][-1]
    assert sum(len(x) for x in plan) >= sol.soc
    with pytest.raises(ValueError, match="jumps"):
        paths_to_actions([[(0, 0), (1, 1)]])


def test_a_board_given_as_lists_of_characters_is_solved_and_memoized_as_its_strings():
    rows = [list("..."), list("..."), list("...")]
    sol = solve(rows, [(0, 0), (0, 2)], [(0, 2), (0, 0)])
    assert (sol.soc, sol.makespan) == (6, 4)
    hits = solver_module.MEMO.hits
    assert solve(["...", "...", "..."], [(0, 0), (0, 2)], [(0, 2), (0, 0)]) == sol
    assert solver_module.MEMO.hits == hits + 1
