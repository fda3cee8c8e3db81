"""``benchmarks/scratchpad_checks.py``: an answer's failure against its own scratchpad, by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from envengineer.mapf.benchmark import load_benchmark
from envengineer.mapf.instance import Instance
from envengineer.training.dataset import target_response

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_DIR))  # the script imports common, the scripts' library beside it
_spec = importlib.util.spec_from_file_location("scratchpad_checks", _DIR / "scratchpad_checks.py")
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

# 3x3, a hole at (1,1): A0 (0,0) -> (2,0) down the left column, A1 (2,2) -> (0,2) up the right one.
HOLE = Instance("x", ("...", ".H.", "..."), ((0, 0), (2, 2)), ((2, 0), (0, 2)), 4, 2, 4)
ANSWER = "\n</think>\n<answer>\nA0: DOWN DOWN\nA1: UP UP\n</answer>"


def test_the_solvers_own_targets_follow_their_checks() -> None:
    for inst in [HOLE, *load_benchmark()[::41]]:  # boards where agents wait, for every kind of list
        for scratchpad in checks.SCRATCHPADS:
            assert checks.classify(inst, target_response(inst, scratchpad), scratchpad) == "followed", inst.id


def test_a_wrong_check_a_move_off_the_list_and_no_scratchpad() -> None:
    right = (
        "<think>\nA0 (0,0) down right DOWN (1,0) up down DOWN (2,0)\n"
        "A1 (2,2) up left UP (1,2) up down UP (0,2)"
    )
    assert checks.classify(HOLE, right + ANSWER, "solver_free") == "followed"
    # (1,0) has a hole to its right: listing "right" there is a wrong check
    wrong = right.replace("(1,0) up down DOWN", "(1,0) up down right DOWN")
    assert checks.classify(HOLE, wrong + ANSWER, "solver_free") == "check wrong"
    # every list right, and A1 leaves (2,2) by a move its list does not hold
    off = right.replace("(2,2) up left UP", "(2,2) up left RIGHT")
    assert checks.classify(HOLE, off + ANSWER, "solver_free") == "move not listed"
    assert checks.classify(HOLE, "<answer>\nA0: DOWN DOWN\n</answer>", "solver_free") == "no scratchpad"
    assert checks.classify(HOLE, "<think>\nA0 DOWN DOWN" + ANSWER, "solver_free") == "no scratchpad"


def test_the_joint_check_reads_the_agents_written_before() -> None:
    # Against A0's line, A1 at (1,1) may not go left (a swap) nor wait (A0 arrives there at t=1).
    inst = Instance("y", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    a0 = "<think>\nA0 (1,0) up down right wait RIGHT (1,1)\n"
    tail = "\n</think>\n<answer>\nA0: RIGHT\nA1: RIGHT\n</answer>"
    assert (
        checks.classify(inst, a0 + "A1 (1,1) up down right RIGHT (1,2)" + tail, "solver_joint") == "followed"
    )
    free_only = a0 + "A1 (1,1) up down left right wait RIGHT (1,2)" + tail  # right for free-moves, not here
    assert checks.classify(inst, free_only, "solver_joint") == "check wrong"


def test_the_timed_joint_check_first_copies_where_the_agents_before_stand() -> None:
    inst = Instance("y", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    a0 = "<think>\nA0 t0 (1,0) up down right wait RIGHT t1 (1,1)\n"
    tail = "\n</think>\n<answer>\nA0: RIGHT\nA1: RIGHT\n</answer>"
    right = a0 + "A1 t0 (1,1) (1,1) up down right RIGHT t1 (1,2)"
    assert checks.classify(inst, right + tail, "solver_timed_joint") == "followed"
    # A0 stands on (1,1) at t=1, not on its start: a wrong copy comes before the check it feeds
    copied_wrong = right.replace("t0 (1,1) (1,1) up", "t0 (1,1) (1,0) up")
    assert checks.classify(inst, copied_wrong + tail, "solver_timed_joint") == "copy wrong"
    listed_wrong = right.replace("(1,1) up down right RIGHT", "(1,1) up down right wait RIGHT")
    assert checks.classify(inst, listed_wrong + tail, "solver_timed_joint") == "check wrong"
    off = right.replace("up down right RIGHT t1", "up down right LEFT t1")
    assert checks.classify(inst, off + tail, "solver_timed_joint") == "move not listed"
    no_time = a0 + "A1 (1,1) (1,1) up down right RIGHT (1,2)"  # no time before the cells
    assert checks.classify(inst, no_time + tail, "solver_timed_joint") == "no scratchpad"


def test_the_two_checks_of_timed_checks_are_read_apart() -> None:
    inst = Instance("y", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    a0 = "<think>\nA0 t0 (1,0) up down right RIGHT t1 (1,1)\n"
    tail = "\n</think>\n<answer>\nA0: RIGHT\nA1: RIGHT\n</answer>"
    right = a0 + "A1 t0 (1,1) up down left right (1,1) up down right RIGHT t1 (1,2)"
    assert checks.classify(inst, right + tail, "solver_timed_checks") == "followed"
    assert (
        checks.classify(
            inst, right.replace("left right (1,1)", "left right (1,0)") + tail, "solver_timed_checks"
        )
        == "copy wrong"
    )
    free_wrong = right.replace("t0 (1,1) up down left right", "t0 (1,1) up down right")
    assert checks.classify(inst, free_wrong + tail, "solver_timed_checks") == "check wrong"
    joint_wrong = right.replace("(1,1) up down right RIGHT", "(1,1) up down left right RIGHT")
    assert checks.classify(inst, joint_wrong + tail, "solver_timed_checks") == "check wrong"
    # the first agent's only list is its free moves: waiting is always open to it
    waits = a0.replace("right RIGHT t1 (1,1)", "right WAIT t1 (1,0)")
    assert checks.classify(inst, waits + "</think>", "solver_timed_checks") == "followed"


def test_a_collision_counts_whatever_the_holes() -> None:
    # A0 steps on the hole at (1,1) and then onto A1's cell as A1 waits there: the validator says hole
    board = Instance("z", ("...", ".H.", "..."), ((1, 0), (1, 2)), ((1, 2), (1, 0)), 4, 2, 4)
    text = "<answer>\nA0: RIGHT RIGHT\nA1: WAIT WAIT\n</answer>"
    assert not checks.collides(HOLE, ANSWER.replace("</think>\n", ""))
    assert checks.collides(board, text)
    assert not checks.collides(board, "<answer>\nA0: RIGHT\nA1: WAIT\n</answer>")  # a hole alone
