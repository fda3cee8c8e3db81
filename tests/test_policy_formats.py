"""Each policy format's record (``models/policy_formats.py``) agrees with what its SFT target writes.

The writer (``training/dataset.py``) reads the records; these tests read the text it writes, so a record
that says one thing while the writer writes another fails here, whichever of the two drifted.
"""

from __future__ import annotations

import re
from typing import get_args

import pytest

from envengineer.mapf.benchmark import load_benchmark
from envengineer.mapf.instance import ACTIONS, Instance
from envengineer.mapf.solver import solve_instance
from envengineer.models.policy_formats import (
    POLICY_FORMATS,
    SCRATCHPADS,
    Scratchpad,
    SFTTarget,
    scratchpad_of,
)
from envengineer.training.dataset import SFT_TARGETS, plan_response, target_response, wait_instead_of_detours

# 3x3, a hole at (2,2). A0 (1,2) -> (1,1): one step LEFT, down is the hole. A1 (2,0) -> (0,1) has one
# optimal path, UP UP RIGHT (A0 holds (1,1) from t=1): at (1,0) the hole check lists right, the joint
# check leaves it out (A0 holds (1,1) next), and staying is clear of A0 at every step of A1's.
BOARD = Instance("formats", ("...", "...", "..H"), ((1, 2), (2, 0)), ((1, 1), (0, 1)), 4, 3, 4)
FREE = {"up", "down", "left", "right"}
CELL = re.compile(r"\(\d+,\d+\)")
TIME = re.compile(r"t\d+")


def _lines(text: str) -> list[list[str]]:
    """Each agent's scratchpad words after its name (none without a ``<think>`` block)."""
    if "<think>" not in text:
        return []
    think = text.split("<think>\n", 1)[1].split("\n</think>", 1)[0]
    return [line.split()[1:] for line in think.splitlines()]


def _check_at(words: list[str], cell: str) -> list[str]:
    """What the line writes between ``cell`` (where the agent stands) and the move that leaves it."""
    start = words.index(cell) + 1
    end = next(k for k in range(start, len(words)) if words[k] in ACTIONS)
    return [w for w in words[start:end] if not TIME.fullmatch(w)]


def test_every_target_has_a_record_and_every_format_a_target() -> None:
    assert tuple(SCRATCHPADS) == get_args(SFTTarget) == SFT_TARGETS
    assert {f.scratchpad for f in POLICY_FORMATS.values()} <= set(SCRATCHPADS)
    assert all(f.holds is SCRATCHPADS[f.scratchpad] for f in POLICY_FORMATS.values())
    with pytest.raises(Exception, match="unknown SFT target"):
        scratchpad_of("solver_everything")


def test_a_record_that_writes_a_part_without_its_place_is_refused() -> None:
    for bad in ({"moves": True}, {"think": True, "copies": True}, {"think": True, "hole_check": True}):
        with pytest.raises(ValueError, match="needs"):
            Scratchpad(**bad)


def test_the_board_shows_every_part() -> None:
    # the board is what the tests below read: the hand-derived plan and its checks
    assert [list(p) for p in solve_instance(BOARD).paths] == [
        [(1, 2), (1, 1), (1, 1), (1, 1)],
        [(2, 0), (1, 0), (0, 0), (0, 1)],
    ]
    text = target_response(BOARD, "solver_timed_checks")
    assert _lines(text) == [
        "t0 (1,2) up left LEFT t1 (1,1)".split(),
        (
            "t0 (2,0) up right (1,1) up right wait UP t1 (1,0) up down right (1,1) up down wait UP "
            "t2 (0,0) down right (1,1) down right wait RIGHT t3 (0,1)"
        ).split(),
    ]


@pytest.mark.parametrize("name", list(POLICY_FORMATS))
def test_each_formats_record_is_what_its_target_writes(name: str) -> None:
    holds = POLICY_FORMATS[name].holds
    text = target_response(BOARD, POLICY_FORMATS[name].scratchpad)
    lines = _lines(text)
    words = [w for line in lines for w in line]
    assert bool(lines) == holds.think
    first = 1 if holds.times == "cells" else 0  # each line begins with its start cell (after t0)
    assert [line[first] for line in lines] == (["(1,2)", "(2,0)"] if lines else [])
    assert any(w in ACTIONS for w in words) == holds.moves
    # times: each step's (before its move) or each cell's (before the cell, from t0)
    times = [k for k, w in enumerate(words) if TIME.fullmatch(w)]
    assert bool(times) == (holds.times is not None)
    if holds.times == "steps":
        assert all(words[k + 1] in ACTIONS for k in times) and "t0" not in words
    if holds.times == "cells":
        assert all(CELL.fullmatch(words[k + 1]) for k in times) and all(line[0] == "t0" for line in lines)
    assert bool(FREE & set(words)) == holds.free_moves
    assert ("wait" in words) == holds.waits  # staying is clear of A0 at every step of A1's
    if not holds.free_moves:  # no check: each move follows its cell (and its time)
        assert not holds.moves or all(_check_at(line, line[first]) == [] for line in lines)
        return
    a0, a1 = lines
    at = _check_at(a1, "(1,0)")  # A0 holds (1,1) at the next time: right is free of holes, not of A0
    last = at[max((k + 1 for k, w in enumerate(at) if CELL.fullmatch(w)), default=0) :]
    assert ("right" not in last) == holds.joint_check
    assert (at[:3] == ["up", "down", "right"]) == holds.hole_check
    assert (at.count("(1,1)") == 1) == holds.copies  # where A0 stands at the next time
    # the first agent: its only list is the joint one or the hole one (joint_list)
    assert ("wait" in _check_at(a0, "(1,2)")) == holds.joint_list(False)


@pytest.mark.parametrize("name", list(POLICY_FORMATS))
def test_each_formats_tokenizer_has_the_pieces_its_scratchpad_writes(name: str) -> None:
    pytest.importorskip("transformers")
    fmt = POLICY_FORMATS[name]
    tok = fmt.tokenizer()
    vocab = tok.get_vocab()
    assert (" t1" in vocab) == (fmt.holds.times is not None)
    assert (" up" in vocab) == fmt.holds.free_moves
    assert (" wait" in vocab) == fmt.holds.waits
    text = target_response(BOARD, fmt.scratchpad)
    ids = tok.encode(text)
    assert tok.unk_token_id not in ids and tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(ids)
    for word in {w for line in _lines(text) for w in line if w in FREE | {"wait"} or TIME.fullmatch(w)}:
        assert " " + word in pieces  # one token each


def test_detours_are_spelled_as_waits_where_the_record_says() -> None:
    detoured = []
    for inst in load_benchmark()[::3]:
        paths = [list(p) for p in solve_instance(inst).paths]
        waited = wait_instead_of_detours(inst, paths)
        if waited != paths:
            detoured.append((inst, paths, waited))
        if len(detoured) == 3:
            break
    assert detoured, "no benchmark board whose solver plan has a detour"
    for target, holds in SCRATCHPADS.items():
        for inst, paths, waited in detoured:
            spelled, other = (waited, paths) if holds.detours_as_waits else (paths, waited)
            text = target_response(inst, target)
            assert text == plan_response(inst, spelled, target), (target, inst.id)
            assert text != plan_response(inst, other, target), (target, inst.id)
