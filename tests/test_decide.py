"""How benchmark v2 decides a draw the default budget does not settle: the wait-free check, the proof that no
plan exists, the joint search, the dense table search, the integer program and ``decide_draw`` that
chains them, each on boards small
enough to check by hand and against the brute-force oracle of ``test_solver``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from envengineer.errors import InstanceFormatError, SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.generator import decide_draw
from envengineer.mapf.solver import Solution, shortest_path_lengths, solve_joint
from envengineer.mapf.solver.dense import dense_space, solve_dense
from envengineer.mapf.solver.ilp import solve_ilp
from envengineer.mapf.solver.reach import plan_exists
from envengineer.mapf.solver.waitfree import wait_free_paths
from test_solver import check_plan, oracle_makespan, oracle_soc

OPEN3 = ("...", "...", "...")
FULL2 = ("..", "..")
#: The 2x2 board's cells in clockwise order: a full board can only turn its agents round this cycle.
RING = ((0, 0), (0, 1), (1, 1), (1, 0))


@pytest.fixture(autouse=True)
def _fresh_memo():
    solver_module.MEMO.clear()


def _as_solution(grid, starts, goals, paths) -> Solution:
    d = shortest_path_lengths(grid, starts, goals)
    return Solution(soc=sum(d), makespan=max(d), shortest_sum=sum(d), paths=paths)


# -- by hand ----------------------------------------------------------------------------------------------
def test_wait_free_paths_by_hand():
    # crossing at the centre: each agent has a single shortest path and both reach (1,1) at t = 1
    assert wait_free_paths(OPEN3, [(1, 0), (0, 1)], [(1, 2), (2, 1)], node_budget=100) is None
    # an agent with one step to its goal blocks the only corridor cell the other must cross at t = 1
    corridor = ("...", "H.H", "H.H")
    assert wait_free_paths(corridor, [(0, 1), (2, 1)], [(1, 1), (0, 0)], node_budget=100) is None
    # opposite corners crossing: one goes down then right, the other left then down, never meeting
    starts, goals = [(0, 0), (0, 2)], [(2, 2), (2, 0)]
    paths = wait_free_paths(OPEN3, starts, goals, node_budget=1000)
    assert paths is not None and all(len(p) == 5 for p in paths)
    check_plan(OPEN3, starts, goals, _as_solution(OPEN3, starts, goals, paths))
    # an agent already on its goal stays there; the other's shortest path avoids it
    assert wait_free_paths(OPEN3, [(1, 1), (0, 0)], [(1, 1), (0, 2)], node_budget=100) == (
        ((1, 1), (1, 1), (1, 1)),
        ((0, 0), (0, 1), (0, 2)),
    )


def test_wait_free_paths_follows_a_long_serpentine_without_recursion():
    """A path of hundreds of steps: the search goes over time with a stack, not a call per step."""
    n = 41
    grid = tuple(
        "." * n if r % 2 == 0 else ("H" * (n - 1) + "." if r % 4 == 1 else "." + "H" * (n - 1))
        for r in range(n)
    )
    # agent 0 follows agent 1 the whole way, one cell behind
    starts, goals = [(0, 0), (0, 1)], [(n - 1, n - 2), (n - 1, n - 1)]
    paths = wait_free_paths(grid, starts, goals, node_budget=10**5)
    d = shortest_path_lengths(grid, starts, goals)
    assert d == [879, 879] and paths is not None and len(paths[0]) == 880
    check_plan(grid, starts, goals, _as_solution(grid, starts, goals, paths))
    # agent 1 walks right ahead of agent 0 and stops on (0, 2), which agent 0 must cross: no wait-free plan
    assert wait_free_paths(grid, [(0, 1), (0, 0)], [(0, 2), (n - 1, n - 1)], node_budget=10**5) is None


def test_plan_exists_turns_a_full_board_round_its_cycle_only():
    """Four agents on a full 2x2 board cannot step anywhere alone: only the rotation of all four moves them,
    so exactly the four turns of the ring are reachable, and a swap of two agents is not."""
    for turn in range(4):
        goals = RING[turn:] + RING[:turn]
        assert plan_exists(FULL2, RING, goals, node_budget=100)
        assert oracle_makespan(FULL2, RING, goals) == min(turn, 4 - turn)
    swapped = (RING[1], RING[0], RING[2], RING[3])
    assert not plan_exists(FULL2, RING, swapped, node_budget=100)
    assert oracle_makespan(FULL2, RING, swapped) is None


def test_plan_exists_by_hand():
    # the agent that rests on the corridor cell can step aside into the top row and come back
    assert plan_exists(("...", "H.H", "H.H"), [(0, 1), (2, 1)], [(1, 1), (0, 0)], node_budget=1000)
    # two agents that must pass each other in a dead-end corridor never can
    corridor = ("....", "HHHH", "HHHH", "HHHH")
    assert not plan_exists(corridor, [(0, 0), (0, 3)], [(0, 3), (0, 0)], node_budget=1000)
    assert not plan_exists(("..H", ".H.", "H.."), [(0, 0), (2, 2)], [(1, 0), (0, 0)], node_budget=10)


def test_plan_exists_and_wait_free_paths_refuse_bad_input_and_a_small_budget():
    for fn in (plan_exists, wait_free_paths):
        with pytest.raises(InstanceFormatError, match="distinct"):
            fn(OPEN3, [(0, 0), (0, 0)], [(1, 1), (2, 2)], node_budget=100)
        with pytest.raises(InstanceFormatError, match="hole"):
            fn(("H..", "...", "..."), [(0, 0)], [(1, 1)], node_budget=100)
    with pytest.raises(SolverBudgetExceeded, match="node_budget=2"):
        plan_exists(("....",) * 4, [(0, 0), (3, 3)], [(3, 3), (0, 0)], node_budget=2)
    with pytest.raises(SolverBudgetExceeded, match="node_budget=2"):
        wait_free_paths(("....",) * 4, [(0, 0), (3, 3)], [(3, 3), (0, 0)], node_budget=2)
    with pytest.raises(UnsolvableInstance, match="agent 1"):
        wait_free_paths(("..H", ".H.", "H.."), [(0, 0), (2, 2)], [(1, 0), (0, 0)], node_budget=10)


def test_decide_draw_by_hand():
    corridor = ("...", "H.H", "H.H")
    starts, goals = [(0, 1), (2, 1)], [(1, 1), (0, 0)]
    assert decide_draw(corridor, starts, goals, needs_wait=False) is None  # it needs a wait
    sol = decide_draw(corridor, starts, goals, needs_wait=True)
    assert sol is not None and sol.soc == oracle_soc(corridor, starts, goals) and sol.soc > sol.shortest_sum
    check_plan(corridor, starts, goals, sol)
    # a board without a wait is settled as such whatever the target
    for needs_wait in (False, True):
        sol = decide_draw(OPEN3, [(1, 0), (1, 1)], [(1, 1), (1, 2)], needs_wait=needs_wait)
        assert (sol.soc, sol.makespan, sol.shortest_sum) == (2, 1, 2)
    # no plan at all: rejected for both targets
    corridor = ("....", "HHHH", "HHHH", "HHHH")
    for needs_wait in (False, True):
        assert decide_draw(corridor, [(0, 0), (0, 3)], [(0, 3), (0, 0)], needs_wait=needs_wait) is None
    with pytest.raises(SolverBudgetExceeded):
        decide_draw(("....",) * 4, [(0, 0), (3, 3)], [(3, 3), (0, 0)], needs_wait=False, node_budget=2)


# -- against the brute-force oracle ---------------------------------------------------------------------
def _tiny_boards(seed: int, count: int):
    """Boards of side 2 to 4 with 2 to 4 agents, the larger agent counts on boards with few free cells (so
    that the oracle stays fast); starts and goals distinct, no agent on its goal."""
    rng = np.random.default_rng(np.random.SeedSequence((2027, seed)))
    made = 0
    while made < count:
        n = int(rng.integers(2, 5))
        k = int(rng.integers(2, 5))
        cells = [(r, c) for r in range(n) for c in range(n)]
        free_count = min(len(cells), int(rng.integers(k + 1, 7)) if k >= 3 else len(cells))
        if n == 2 and k == 4:
            free_count = 4
        if free_count < k or (n == 4 and k >= 3):
            continue
        free = [cells[i] for i in sorted(rng.permutation(len(cells))[:free_count])]
        grid = tuple("".join("." if (r, c) in free else "H" for c in range(n)) for r in range(n))
        starts = [free[i] for i in rng.permutation(len(free))[:k]]
        goals = [free[i] for i in rng.permutation(len(free))[:k]]
        if any(s == g for s, g in zip(starts, goals, strict=True)):
            continue
        made += 1
        yield grid, starts, goals


@pytest.mark.parametrize("seed", range(2))
def test_every_step_matches_brute_force_on_tiny_boards(seed):
    kinds = {"no plan": 0, "unreachable": 0, "wait-free": 0, "needs a wait": 0}
    for grid, starts, goals in _tiny_boards(seed, 60):
        d = shortest_path_lengths(grid, starts, goals)
        soc = oracle_soc(grid, starts, goals)
        makespan = None if soc is None else oracle_makespan(grid, starts, goals)
        where = (grid, starts, goals)
        if any(x is None for x in d):
            kinds["unreachable"] += 1
            assert not plan_exists(grid, starts, goals, node_budget=10**6)
            with pytest.raises(UnsolvableInstance):
                wait_free_paths(grid, starts, goals, node_budget=10**6)
            for needs_wait in (False, True):
                assert decide_draw(grid, starts, goals, needs_wait=needs_wait) is None
            continue
        assert plan_exists(grid, starts, goals, node_budget=10**6) == (soc is not None), where
        paths = wait_free_paths(grid, starts, goals, node_budget=10**6)
        assert (paths is not None) == (soc == sum(d)), where
        if paths is not None:
            check_plan(grid, starts, goals, _as_solution(grid, starts, goals, paths))
            assert makespan == max(d)
        for needs_wait in (False, True):
            sol = decide_draw(grid, starts, goals, needs_wait=needs_wait)
            keeps = soc is not None and (needs_wait or soc == sum(d))
            assert (sol is not None) == keeps, (where, needs_wait)
            if sol is not None:
                assert (sol.soc, sol.makespan, sol.shortest_sum) == (soc, makespan, sum(d)), where
                check_plan(grid, starts, goals, sol)
        if soc is None:
            kinds["no plan"] += 1
            with pytest.raises(UnsolvableInstance):  # the joint search is finite: it proves it
                solve_joint(grid, starts, goals, node_budget=10**6)
            with pytest.raises(UnsolvableInstance):  # so is the table's
                solve_dense(grid, starts, goals)
            with pytest.raises(SolverBudgetExceeded):  # the integer program finds none, proves nothing
                solve_ilp(grid, starts, goals, max_horizon=max(d) + 2)
            continue
        kinds["wait-free" if soc == sum(d) else "needs a wait"] += 1
        for sol in (
            solve_joint(grid, starts, goals, node_budget=10**6),
            solve_dense(grid, starts, goals),
            solve_ilp(grid, starts, goals),
        ):
            assert (sol.soc, sol.makespan, sol.shortest_sum) == (soc, makespan, sum(d)), where
            check_plan(grid, starts, goals, sol)
    assert kinds["no plan"] and kinds["wait-free"] and kinds["needs a wait"], kinds


def test_decide_draw_hands_what_the_search_cannot_settle_to_the_integer_program(monkeypatch):
    """With no joint search and no search budget, every draw that needs a wait goes to the integer program;
    its verdicts are the brute force's."""
    import envengineer.mapf.generator as generator

    monkeypatch.setattr(generator, "DECIDE_JOINT_SPACE", 0)
    monkeypatch.setattr(generator, "DECIDE_SEARCH_BUDGET", 1)
    monkeypatch.setattr(generator, "DENSE_SPACE", 0)
    calls = []
    monkeypatch.setattr(generator, "solve_ilp", lambda *a: calls.append(a) or solve_ilp(*a))
    checked = 0
    for grid, starts, goals in _tiny_boards(7, 40):
        soc = oracle_soc(grid, starts, goals)
        if soc is None or soc == sum(x or 0 for x in shortest_path_lengths(grid, starts, goals)):
            continue  # no plan (the integer program proves none) or wait-free (settled before it)
        sol = decide_draw(grid, starts, goals, needs_wait=True)
        assert sol is not None and (sol.soc, sol.makespan) == (soc, oracle_makespan(grid, starts, goals))
        check_plan(grid, starts, goals, sol)
        checked += 1
    assert checked >= 5 and len(calls) == checked, (checked, len(calls))


def test_decide_draw_hands_a_small_table_to_the_dense_search(monkeypatch):
    """With no joint search and no search budget, a draw that needs a wait and whose table fits goes to the
    dense search, not to the integer program; its verdicts are the brute force's."""
    import envengineer.mapf.generator as generator

    monkeypatch.setattr(generator, "DECIDE_JOINT_SPACE", 0)
    monkeypatch.setattr(generator, "DECIDE_SEARCH_BUDGET", 1)
    calls = []
    monkeypatch.setattr(generator, "solve_dense", lambda *a: calls.append(a) or solve_dense(*a))
    monkeypatch.setattr(generator, "solve_ilp", lambda *a: pytest.fail("the table fits: no integer program"))
    checked = 0
    for grid, starts, goals in _tiny_boards(7, 40):
        soc = oracle_soc(grid, starts, goals)
        if soc is None or soc == sum(x or 0 for x in shortest_path_lengths(grid, starts, goals)):
            continue
        sol = decide_draw(grid, starts, goals, needs_wait=True)
        assert sol is not None and (sol.soc, sol.makespan) == (soc, oracle_makespan(grid, starts, goals))
        check_plan(grid, starts, goals, sol)
        checked += 1
    assert checked >= 5 and len(calls) == checked, (checked, len(calls))


def test_dense_search_by_hand():
    # the corridor with a pocket of the integer program's test: SoC 11 (4 + 2 and 4 + 1), makespan 6
    grid = (".....", "HH.HH", "HHHHH", "HHHHH", "HHHHH")
    sol = solve_dense(grid, [(0, 0), (0, 4)], [(0, 4), (0, 0)])
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (11, 6, 8)
    check_plan(grid, [(0, 0), (0, 4)], [(0, 4), (0, 0)], sol)
    # six reachable cells each, two flags: 6 * 6 * 4 entries; too many for a smaller limit
    assert dense_space(grid, [(0, 0), (0, 4)], [(0, 4), (0, 0)]) == 144
    with pytest.raises(SolverBudgetExceeded, match="max_space=143"):
        solve_dense(grid, [(0, 0), (0, 4)], [(0, 4), (0, 0)], max_space=143)
    # an agent already home may finish at once (cost 0) but must step aside if another needs its cell
    sol = solve_dense(OPEN3, [(1, 1), (0, 0)], [(1, 1), (0, 2)])
    assert (sol.soc, sol.makespan) == (2, 2) and sol.paths[0] == ((1, 1),) * 3
    # (it steps down as the other follows into its cell, and comes back behind it: 2 + 2, makespan 2)
    notch, starts, goals = ("...", "H.H", "HHH"), [(0, 1), (0, 0)], [(0, 1), (0, 2)]
    sol = solve_dense(notch, starts, goals)
    assert (sol.soc, sol.makespan, sol.shortest_sum) == (4, 2, 2) == (oracle_soc(notch, starts, goals), 2, 2)
    assert sol.paths[0] == ((0, 1), (1, 1), (0, 1))
    check_plan(notch, starts, goals, sol)
    # the full 2x2 board turns round its ring: a quarter turn in one step, all four agents paying 1
    sol = solve_dense(FULL2, RING, RING[1:] + RING[:1])
    assert (sol.soc, sol.makespan) == (4, 1)
    with pytest.raises(UnsolvableInstance, match="no conflict-free plan"):
        solve_dense(FULL2, RING, (RING[1], RING[0], RING[2], RING[3]))
    with pytest.raises(UnsolvableInstance, match="agent 1"):
        solve_dense(("..H", ".H.", "H.."), [(0, 0), (2, 2)], [(1, 0), (0, 0)])
    with pytest.raises(InstanceFormatError, match="distinct"):
        solve_dense(OPEN3, [(0, 0), (0, 0)], [(1, 1), (2, 2)])


def test_integer_program_by_hand():
    # two agents swap the ends of a corridor with a pocket in its middle: one steps into the pocket and out
    # again (4 + 2 steps), the other waits one step for it to get there (4 + 1): SoC 11, makespan 6
    grid = (".....", "HH.HH", "HHHHH", "HHHHH", "HHHHH")
    starts, goals = [(0, 0), (0, 4)], [(0, 4), (0, 0)]
    sol = solve_ilp(grid, starts, goals)
    assert (
        (sol.soc, sol.makespan, sol.shortest_sum)
        == (11, 6, 8)
        == (
            oracle_soc(grid, starts, goals),
            oracle_makespan(grid, starts, goals),
            8,
        )
    )
    check_plan(grid, starts, goals, sol)
    # an agent already home rests there; the plan is as long as the other's line
    sol = solve_ilp(OPEN3, [(1, 1), (0, 0)], [(1, 1), (0, 2)])
    assert (sol.soc, sol.makespan) == (2, 2) and sol.paths[0] == ((1, 1),) * 3
    assert solve_ilp(OPEN3, [(0, 0)], [(0, 0)]).paths == (((0, 0),),)
    with pytest.raises(UnsolvableInstance, match="agent 1"):
        solve_ilp(("..H", ".H.", "H.."), [(0, 0), (2, 2)], [(1, 0), (0, 0)])
    with pytest.raises(InstanceFormatError, match="distinct"):
        solve_ilp(OPEN3, [(0, 0), (0, 0)], [(1, 1), (2, 2)])
    # two agents that can never pass each other: no plan within any horizon tried, and no verdict
    with pytest.raises(SolverBudgetExceeded, match="undecided"):
        solve_ilp(("....", "HHHH", "HHHH", "HHHH"), [(0, 0), (0, 3)], [(0, 3), (0, 0)], max_horizon=8)


def test_plan_exists_matches_brute_force_on_every_full_2x2_goal_order():
    """All 24 orders of four agents on the full 2x2 board: reachable exactly when the oracle finds a plan
    (the four turns of the ring)."""
    reachable = 0
    for goals in itertools.permutations(RING):
        want = oracle_makespan(FULL2, RING, list(goals)) is not None
        assert plan_exists(FULL2, RING, goals, node_budget=100) == want, goals
        reachable += want
    assert reachable == 4
