"""The validator: SPEC §2.3's worked examples, one hand-made board per failure category, the ordering and
reporting rules, and a comparison with a naive step-by-step reference on random plans."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envengineer.errors import InstanceFormatError
from envengineer.mapf import parser, prompt, rewards, validator
from envengineer.mapf.instance import MOVES, Instance
from envengineer.mapf.validator import FAILURE_CATEGORIES, Verdict, format_answer, validate, validate_plan


def board(grid, starts, goals, soc, makespan, shortest=None) -> Instance:
    return Instance(
        "t",
        tuple(grid),
        tuple(starts),
        tuple(goals),
        optimal_soc=soc,
        optimal_makespan=makespan,
        shortest_sum=shortest,
    )


def answer(*lines: str) -> str:
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


# SPEC §2.3: 3x3, no holes; A0 (0,0) -> (0,2), A1 (0,2) -> (0,0); optimal SoC 6, makespan 4.
SWAP = board(["..."] * 3, [(0, 0), (0, 2)], [(0, 2), (0, 0)], soc=6, makespan=4, shortest=4)
# SPEC §2.3: A0 (1,0) -> (1,1), A1 (1,1) -> (1,2): A0 follows A1.
FOLLOW = board(["..."] * 3, [(1, 0), (1, 1)], [(1, 1), (1, 2)], soc=2, makespan=1, shortest=2)


# -- SPEC §2.3, one test per row -------------------------------------------------------------------
def test_spec_vertex_conflict_at_t1():
    v = validate(SWAP, answer("A0: RIGHT RIGHT", "A1: LEFT LEFT"))
    assert (v.valid, v.failure, v.agent, v.step) == (False, "vertex_conflict", 0, 1)
    assert v.soc is None and v.makespan is None
    assert v.checks_passed == 5
    assert "(0,1)" in v.detail


def test_spec_optimal_detour():
    v = validate(SWAP, answer("A0: RIGHT RIGHT", "A1: DOWN LEFT LEFT UP"))
    assert (v.valid, v.optimal, v.makespan_optimal, v.failure) == (True, True, True, None)
    assert (v.soc, v.makespan) == (6, 4)
    assert (v.checks_passed, v.agents_on_goal, v.agent, v.step) == (8, 2, None, None)


def test_spec_trailing_waits_cost_nothing():
    v = validate(SWAP, answer("A0: RIGHT RIGHT WAIT WAIT", "A1: DOWN LEFT LEFT UP"))
    assert (v.valid, v.optimal, v.soc, v.makespan) == (True, True, 6, 4)


def test_spec_suboptimal_but_makespan_optimal():
    v = validate(SWAP, answer("A0: WAIT RIGHT RIGHT", "A1: DOWN LEFT LEFT UP"))
    assert (v.valid, v.optimal, v.failure) == (True, False, "suboptimal")
    assert (v.soc, v.makespan, v.makespan_optimal) == (7, 4, True)


def test_spec_out_of_bounds_beats_earlier_vertex_conflict():
    v = validate(SWAP, answer("A0: RIGHT RIGHT", "A1: LEFT LEFT UP"))
    assert (v.failure, v.agent, v.step) == ("out_of_bounds", 1, 3)
    assert v.checks_passed == 3


def test_spec_one_agent_alone_is_agent_mismatch():
    v = validate(SWAP, answer("A0: RIGHT RIGHT"))
    assert (v.failure, v.agent, v.checks_passed) == ("agent_mismatch", 1, 1)


def test_spec_lines_without_tags_are_parse_error():
    text = "<think>A1 detours below.</think>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP"
    v = validate(SWAP, text)
    assert (v.failure, v.checks_passed, v.agents_on_goal) == ("parse_error", 0, 0)


def test_spec_following_is_allowed():
    v = validate(FOLLOW, answer("A0: RIGHT", "A1: RIGHT"))
    assert (v.valid, v.optimal, v.soc, v.makespan) == (True, True, 2, 1)


# -- one hand-made board per category --------------------------------------------------------------
LINE = board(["...."] * 4, [(0, 0), (3, 3)], [(0, 3), (3, 0)], soc=6, makespan=3, shortest=6)


@pytest.mark.parametrize(
    ("text", "failure", "agent", "step", "checks"),
    [
        ("I would move right three times.", "parse_error", None, None, 0),
        (answer("A0: RIGHT RIGHT RIGHT", "A1: LEFT LEFT LEFT", "A2: UP"), "agent_mismatch", None, None, 1),
        (answer("A0: RIGHT RIGHT NORTH", "A1: LEFT LEFT LEFT"), "invalid_action", 0, 3, 2),
        (answer("A0: UP", "A1: LEFT LEFT LEFT"), "out_of_bounds", 0, 1, 3),
        (answer("A0: RIGHT RIGHT RIGHT", "A1: UP UP UP"), "vertex_conflict", 0, 3, 5),
        (answer("A0: RIGHT RIGHT", "A1: LEFT LEFT LEFT"), "goal_not_reached", 0, 3, 7),
        (answer("A0: RIGHT RIGHT RIGHT", "A1: LEFT LEFT LEFT"), None, None, None, 8),
    ],
)
def test_each_category_on_an_open_board(text, failure, agent, step, checks):
    v = validate(LINE, text)
    assert (v.failure, v.agent, v.step, v.checks_passed) == (failure, agent, step, checks)
    assert v.valid == (checks == 8)
    if failure is not None:
        assert v.detail


def test_hole():
    inst = board(["...", ".H.", "..."], [(0, 1), (2, 0)], [(2, 1), (2, 2)], soc=6, makespan=4)
    v = validate(inst, answer("A0: DOWN DOWN", "A1: RIGHT RIGHT"))
    assert (v.failure, v.agent, v.step, v.checks_passed) == ("hole", 0, 1, 4)
    assert "(1,1)" in v.detail
    # around the hole it is valid
    ok = validate(inst, answer("A0: LEFT DOWN DOWN RIGHT", "A1: WAIT RIGHT RIGHT"))
    assert ok.valid and ok.soc == 7 and not ok.optimal


def test_hole_is_checked_before_conflicts_and_after_bounds():
    inst = board(["...", ".H.", "..."], [(0, 0), (0, 2)], [(2, 2), (2, 0)], soc=8, makespan=4)
    # vertex conflict at t=1, hole at t=2: hole wins
    v = validate(inst, answer("A0: RIGHT DOWN", "A1: LEFT"))
    assert (v.failure, v.agent, v.step) == ("hole", 0, 2)
    # hole at t=2, out of bounds at t=3: out_of_bounds wins
    v = validate(inst, answer("A0: RIGHT DOWN", "A1: WAIT WAIT UP"))
    assert (v.failure, v.agent, v.step) == ("out_of_bounds", 1, 3)


def test_swap_is_refused():
    inst = board(["..."] * 3, [(0, 0), (0, 1)], [(0, 1), (0, 0)], soc=4, makespan=3)
    v = validate(inst, answer("A0: RIGHT", "A1: LEFT"))
    assert (v.failure, v.agent, v.step, v.checks_passed) == ("swap_conflict", 0, 1, 6)
    assert "swap" in v.detail
    # vertical swap, later in time
    inst = board(["..."] * 3, [(0, 0), (1, 0)], [(1, 0), (0, 0)], soc=4, makespan=3)
    v = validate(inst, answer("A0: WAIT DOWN", "A1: WAIT UP"))
    assert (v.failure, v.agent, v.step) == ("swap_conflict", 0, 2)


def test_following_a_chain_of_three_is_allowed():
    inst = board(["...."] * 4, [(0, 0), (0, 1), (0, 2)], [(0, 1), (0, 2), (0, 3)], soc=3, makespan=1)
    v = validate(inst, answer("A0: RIGHT", "A1: RIGHT", "A2: RIGHT"))
    assert v.valid and v.optimal and (v.soc, v.makespan) == (3, 1)


def test_following_in_a_cycle_of_four_is_allowed():
    # Four agents rotate around a 2x2 block: every one follows another, no two swap.
    inst = board(["..."] * 3, [(0, 0), (0, 1), (1, 1), (1, 0)], [(0, 1), (1, 1), (1, 0), (0, 0)], 4, 1)
    v = validate(inst, answer("A0: RIGHT", "A1: DOWN", "A2: LEFT", "A3: UP"))
    assert v.valid and v.optimal


def test_passing_over_the_goal_and_coming_back():
    inst = board(["...."] * 4, [(0, 0), (3, 3)], [(0, 1), (3, 2)], soc=2, makespan=1)
    v = validate(inst, answer("A0: RIGHT RIGHT LEFT", "A1: LEFT"))
    assert v.valid and not v.optimal
    assert (v.soc, v.makespan) == (3 + 1, 3)
    # reaching the goal, leaving it and returning: the cost counts from the final arrival
    v = validate(inst, answer("A0: RIGHT DOWN UP WAIT", "A1: LEFT"))
    assert (v.soc, v.makespan) == (3 + 1, 3)


def test_trailing_waits_and_padding():
    v = validate(LINE, answer("A0: RIGHT RIGHT RIGHT WAIT WAIT", "A1: LEFT LEFT LEFT"))
    assert v.valid and v.optimal and (v.soc, v.makespan) == (6, 3)
    # a shorter sequence is padded with WAIT: A0 stops at (0,2) and never reaches (0,3)
    v = validate(LINE, answer("A0: RIGHT RIGHT", "A1: LEFT LEFT LEFT WAIT"))
    assert (v.failure, v.agent, v.step, v.agents_on_goal) == ("goal_not_reached", 0, 4, 1)


def test_empty_sequence_means_waiting_in_place():
    inst = board(["..."] * 3, [(0, 0), (2, 2)], [(0, 2), (2, 0)], soc=4, makespan=2)
    v = validate(inst, answer("A0: RIGHT RIGHT", "A1:"))
    assert (v.failure, v.agent, v.step) == ("goal_not_reached", 1, 2)
    v = validate(inst, answer("A0:", "A1:"))
    assert (v.failure, v.agent, v.step, v.agents_on_goal) == ("goal_not_reached", 0, 0, 0)


# -- whole-plan ordering and where failures are reported -------------------------------------------
OPEN5 = board(["....."] * 5, [(0, 0), (0, 3)], [(4, 4), (4, 0)], soc=15, makespan=8)


def test_checks_apply_to_the_whole_plan_vertex_beats_earlier_swap():
    # swap between t=1 and t=2, vertex conflict at t=5 -> vertex_conflict (SPEC §2.1)
    plan = [["RIGHT", "RIGHT", "DOWN", "DOWN", "WAIT"], ["LEFT", "LEFT", "DOWN", "RIGHT", "DOWN"]]
    v = validate_plan(OPEN5, plan)
    assert (v.failure, v.agent, v.step) == ("vertex_conflict", 0, 5)
    # without the vertex conflict the swap is reported at t=2
    v = validate_plan(OPEN5, [plan[0], ["LEFT", "LEFT", "DOWN", "RIGHT"]])
    assert (v.failure, v.agent, v.step) == ("swap_conflict", 0, 2)


def test_earliest_step_wins_then_lowest_agent():
    four = board(["..."] * 3, [(0, 0), (2, 0), (0, 2), (2, 2)], [(1, 0), (1, 1), (1, 2), (2, 1)], 8, 3)
    # at t=1 agents 0&2 and 1&3 collide: report agent 0
    v = validate(four, answer("A0: RIGHT", "A1: RIGHT", "A2: LEFT", "A3: LEFT"))
    assert (v.failure, v.agent, v.step) == ("vertex_conflict", 0, 1)
    # 1&3 at t=1, 0&2 at t=2: report agent 1 at t=1
    v = validate(four, answer("A0: WAIT RIGHT", "A1: RIGHT", "A2: WAIT LEFT", "A3: LEFT"))
    assert (v.failure, v.agent, v.step) == ("vertex_conflict", 1, 1)
    # out of bounds: A1 leaves at t=1, A0 at t=2
    v = validate(four, answer("A0: RIGHT UP", "A1: DOWN", "A2: WAIT", "A3: WAIT"))
    assert (v.failure, v.agent, v.step) == ("out_of_bounds", 1, 1)
    # invalid actions: the earliest token in time, then the lowest agent
    v = validate(four, answer("A0: UP UP FLY", "A1: WAIT", "A2: JUMP", "A3: WAIT"))
    assert (v.failure, v.agent, v.step) == ("invalid_action", 2, 1)


def test_agent_leaving_and_reentering_the_grid_is_out_of_bounds():
    v = validate(SWAP, answer("A0: UP DOWN RIGHT RIGHT", "A1: DOWN LEFT LEFT UP"))
    assert (v.failure, v.agent, v.step) == ("out_of_bounds", 0, 1)


def test_wrapping_around_a_row_is_out_of_bounds():
    inst = board(["..."] * 3, [(0, 2), (2, 2)], [(1, 0), (2, 1)], soc=4, makespan=3)
    v = validate(inst, answer("A0: RIGHT", "A1: LEFT"))
    assert (v.failure, v.agent, v.step) == ("out_of_bounds", 0, 1)


def test_single_agent_instance():
    inst = board(["..", ".."], [(0, 0)], [(1, 1)], soc=2, makespan=2)
    assert validate(inst, answer("A0: DOWN RIGHT")).optimal
    assert validate(inst, answer("A0: DOWN")).failure == "goal_not_reached"


# -- API details -----------------------------------------------------------------------------------
def test_unsolved_instance_is_a_caller_error():
    unsolved = Instance("u", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)))
    with pytest.raises(InstanceFormatError, match="envengineer solve"):
        validate(unsolved, "whatever the model wrote")
    with pytest.raises(InstanceFormatError, match="envengineer solve"):
        validate_plan(unsolved, [["RIGHT"], ["LEFT"]])


def test_validate_plan_accepts_lists_and_any_case():
    v = validate_plan(SWAP, [["right", "Right"], ["down", "LEFT", "left", "up"]])
    assert v.optimal
    assert validate_plan(SWAP, [["RIGHT", "RIGHT"]]).failure == "agent_mismatch"
    assert validate_plan(SWAP, [["RIGHT"], ["LEFT"], []]).failure == "agent_mismatch"
    assert validate_plan(SWAP, "RIGHT RIGHT").failure == "parse_error"  # type: ignore[arg-type]
    assert validate_plan(SWAP, None).failure == "parse_error"  # type: ignore[arg-type]
    assert validate_plan(SWAP, [["RIGHT", 3], ["LEFT"]]).failure == "invalid_action"
    assert validate_plan(SWAP, [5, ["LEFT"]]).failure == "invalid_action"  # type: ignore[list-item]


def test_format_answer_round_trip():
    plan = [["RIGHT", "RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]]
    text = format_answer(plan)
    assert text == "<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>"
    assert validate(SWAP, text) == validate_plan(SWAP, plan)
    assert format_answer([[], ["UP"]]) == "<answer>\nA0:\nA1: UP\n</answer>"


def test_verdict_fields_and_to_dict():
    d = validate(SWAP, answer("A0: RIGHT RIGHT", "A1: LEFT LEFT")).to_dict()
    for key in ("valid", "optimal", "makespan_optimal", "failure", "soc", "makespan", "agent", "step",
                "checks_passed", "agents_on_goal"):  # fmt: skip
        assert key in d
    assert d["failure"] in FAILURE_CATEGORIES
    assert FAILURE_CATEGORIES == (
        "parse_error", "agent_mismatch", "invalid_action", "out_of_bounds", "hole",
        "vertex_conflict", "swap_conflict", "goal_not_reached",
    )  # fmt: skip
    with pytest.raises(AttributeError):
        Verdict(True, True, True, None, 1, 1, None, None, 8, 1).valid = False  # type: ignore[misc]


def test_a_plan_beating_the_recorded_optimum_is_logged(caplog):
    wrong = board(["..."] * 3, [(0, 0), (0, 2)], [(0, 2), (0, 0)], soc=8, makespan=5)
    with caplog.at_level("WARNING"):
        v = validate(wrong, answer("A0: RIGHT RIGHT", "A1: DOWN LEFT LEFT UP"))
    assert v.valid and not v.optimal and v.failure == "suboptimal"
    assert "envengineer solve" in caplog.text


def test_doctests_of_the_answer_modules():
    for module in (parser, validator, prompt, rewards):
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__


# -- against a naive step-by-step reference --------------------------------------------------------
def reference(inst: Instance, plan: list[list[str]]) -> tuple:
    """The rules of SPEC §2 written the slow, obvious way."""
    k, n = len(plan), inst.size
    horizon = max((len(s) for s in plan), default=0)
    pos = []
    for (r, c), seq in zip(inst.starts, plan, strict=True):
        p = [(r, c)]
        for a in [*seq, *["WAIT"] * (horizon - len(seq))]:
            r, c = r + MOVES[a][0], c + MOVES[a][1]
            p.append((r, c))
        pos.append(p)
    on_goal = sum(pos[i][horizon] == inst.goals[i] for i in range(k))
    found = [
        (t, i)
        for t in range(horizon + 1)
        for i in range(k)
        if not (0 <= pos[i][t][0] < n and 0 <= pos[i][t][1] < n)
    ]
    if found:
        return ("out_of_bounds", min(found)[1], min(found)[0], on_goal)
    found = [
        (t, i) for t in range(horizon + 1) for i in range(k) if inst.grid[pos[i][t][0]][pos[i][t][1]] == "H"
    ]
    if found:
        return ("hole", min(found)[1], min(found)[0], on_goal)
    found = [
        (t, i)
        for t in range(horizon + 1)
        for i in range(k)
        for j in range(i + 1, k)
        if pos[i][t] == pos[j][t]
    ]
    if found:
        return ("vertex_conflict", min(found)[1], min(found)[0], on_goal)
    found = [
        (t + 1, i)
        for t in range(horizon)
        for i in range(k)
        for j in range(i + 1, k)
        if pos[i][t] == pos[j][t + 1] and pos[j][t] == pos[i][t + 1]
    ]
    if found:
        return ("swap_conflict", min(found)[1], min(found)[0], on_goal)
    missing = [i for i in range(k) if pos[i][horizon] != inst.goals[i]]
    if missing:
        return ("goal_not_reached", missing[0], horizon, on_goal)
    costs = []
    for i in range(k):
        t = horizon
        while t > 0 and pos[i][t - 1] == inst.goals[i]:
            t -= 1
        costs.append(t)
    return ("valid", sum(costs), max(costs), on_goal)


def _closer(cell, goal):
    moves = [a for a, (dr, dc) in MOVES.items() if abs(cell[0] + dr - goal[0]) + abs(cell[1] + dc - goal[1])
             < abs(cell[0] - goal[0]) + abs(cell[1] - goal[1])]  # fmt: skip
    return moves or ["WAIT"]


@st.composite
def boards_and_plans(draw):
    """Small crowded boards; plans that mostly head for the goal, sometimes wander or leave the grid."""
    n = draw(st.integers(2, 5))
    k = draw(st.integers(1, min(4, n * n // 2)))
    cells = [(r, c) for r in range(n) for c in range(n)]
    chosen = draw(st.lists(st.sampled_from(cells), min_size=2 * k, max_size=2 * k, unique=True))
    starts, goals = chosen[:k], chosen[k:]
    holes = draw(st.sets(st.sampled_from(cells), max_size=n * n // 4)) - set(chosen)
    grid = ["".join("H" if (r, c) in holes else "." for c in range(n)) for r in range(n)]
    plan = []
    for (r, c), goal in zip(starts, goals, strict=True):
        seq = []
        for _ in range(draw(st.integers(0, 7))):
            mode = draw(st.integers(0, 9))
            if mode < 6:
                options = _closer((r, c), goal)
            elif mode < 9:
                options = [a for a, (dr, dc) in MOVES.items() if 0 <= r + dr < n and 0 <= c + dc < n]
            else:
                options = list(MOVES)
            action = draw(st.sampled_from(options or list(MOVES)))  # none in bounds once outside
            r, c = r + MOVES[action][0], c + MOVES[action][1]
            seq.append(action)
        plan.append(seq)
    bound = sum(abs(s[0] - g[0]) + abs(s[1] - g[1]) for s, g in zip(starts, goals, strict=True))
    soc = bound + draw(st.integers(0, 2))
    makespan = max(abs(s[0] - g[0]) + abs(s[1] - g[1]) for s, g in zip(starts, goals, strict=True))
    return board(grid, starts, goals, soc=soc, makespan=makespan + draw(st.integers(0, 1))), plan


@settings(max_examples=250, deadline=None)
@given(boards_and_plans())
def test_validator_agrees_with_the_naive_reference(case):
    inst, plan = case
    v = validate_plan(inst, plan)
    assert validate(inst, format_answer(plan)) == v
    ref = reference(inst, plan)
    assert v.agents_on_goal == ref[3]
    if ref[0] == "valid":
        assert v.valid and (v.soc, v.makespan) == ref[1:3]
        assert v.optimal == (v.soc == inst.optimal_soc)
        assert v.makespan_optimal == (v.makespan == inst.optimal_makespan)
        assert v.failure == (None if v.optimal else "suboptimal")
        assert v.checks_passed == 8
    else:
        assert (v.failure, v.agent, v.step) == ref[:3]
        assert v.checks_passed == FAILURE_CATEGORIES.index(ref[0])
        assert not v.valid and not v.optimal and v.soc is None


def test_random_plans_reach_every_outcome():
    """The reference comparison is only meaningful if random plans hit every category; check a few."""
    inst = board(["....", ".H..", "....", "...."], [(0, 0), (0, 1)], [(0, 1), (0, 2)], soc=2, makespan=1)
    outcomes = {
        validate_plan(inst, p).failure
        for p in (
            [["RIGHT"], ["RIGHT"]],
            [["RIGHT"], ["LEFT"]],
            [["RIGHT"], ["WAIT"]],
            [["DOWN"], ["DOWN"]],
            [["UP"], ["RIGHT"]],
            [["WAIT"], ["RIGHT"]],
            [["DOWN", "RIGHT"], []],
        )
    }
    assert {"swap_conflict", "vertex_conflict", "hole", "out_of_bounds", "goal_not_reached", None} <= outcomes


def test_the_solvers_optimal_plans_are_judged_optimal():
    """Cross-check with the exact solver: its SoC-optimal plan passes every check at exactly its SoC."""
    solver = pytest.importorskip("envengineer.mapf.solver")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(2026)
    cases = [SWAP, FOLLOW, LINE]
    while len(cases) < 15:
        n, k = int(rng.integers(3, 5)), int(rng.integers(2, 4))
        grid = ["".join("H" if rng.random() < 0.2 else "." for _ in range(n)) for _ in range(n)]
        free = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "."]
        if len(free) < 2 * k:
            continue
        picks = [free[int(i)] for i in rng.choice(len(free), size=2 * k, replace=False)]
        cases.append(board(grid, picks[:k], picks[k:], soc=0, makespan=0))
    checked = 0
    for inst in cases:
        try:
            sol = solver.solve_instance(inst)
        except Exception:  # unsolvable random board (or over budget): nothing to compare
            continue
        solved = inst.with_optimum(
            optimal_soc=sol.soc, optimal_makespan=sol.makespan, shortest_sum=sol.shortest_sum
        )
        v = validate_plan(solved, solver.paths_to_actions(sol.paths))
        assert v.valid and v.optimal and v.soc == sol.soc, (inst, v)
        checked += 1
    assert checked >= 5
