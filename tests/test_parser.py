"""Answer parsing: the documented lenient rules, each parsing decision, fuzzing (never raises, linear)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.mapf.instance import Instance
from envengineer.mapf.parser import (
    check_plan_tokens,
    completion_text,
    extract_answer_block,
    parse_answer,
    parse_plan,
)
from envengineer.mapf.validator import validate

SWAP = Instance("t", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6, optimal_makespan=4)
OPTIMAL = (("RIGHT", "RIGHT"), ("DOWN", "LEFT", "LEFT", "UP"))


def plan_of(text: str, k: int = 2):
    return parse_plan(text, k).plan


# -- the canonical format and lenient variants -----------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        "A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP",
        "a0: right right\na1: down left left up",
        "A0: Right, Right\nA1: Down, Left, Left, Up",
        "A0:RIGHT,RIGHT\nA1:DOWN,LEFT,LEFT,UP",
        "  A0 :   RIGHT    RIGHT  \n\n\n  A1: DOWN   LEFT LEFT UP   ",
        "Agent 0: RIGHT RIGHT\nAgent 1: DOWN LEFT LEFT UP",
        "agent0: RIGHT RIGHT\nagent1: DOWN LEFT LEFT UP",
        "AGENT_0: RIGHT RIGHT\nAgent-1: DOWN LEFT LEFT UP",
        "Agent #0: RIGHT RIGHT\nAgent #1: DOWN LEFT LEFT UP",
        "A0 RIGHT RIGHT\nA1 DOWN LEFT LEFT UP",
        "**A0:** RIGHT RIGHT\n**A1:** DOWN LEFT LEFT UP",
        "- A0: RIGHT RIGHT\n- A1: DOWN LEFT LEFT UP",
        "```\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n```",
        "A0: [RIGHT, RIGHT]\nA1: [DOWN, LEFT, LEFT, UP]",
        'A0: [\'RIGHT\', \'RIGHT\']\nA1: ["DOWN", "LEFT", "LEFT", "UP"]',
        "A0: RIGHT -> RIGHT\nA1: DOWN → LEFT → LEFT → UP",
        "A0: RIGHT; RIGHT.\nA1: DOWN; LEFT; LEFT; UP.",
        "A1: DOWN LEFT LEFT UP\nA0: RIGHT RIGHT",
        "A0: RIGHT RIGHT, A1: DOWN LEFT LEFT UP",
        "A0: RIGHT RIGHT A1: DOWN LEFT LEFT UP",
        "A00: RIGHT RIGHT\nA01: DOWN LEFT LEFT UP",
        "A0: RIGHT RIGHT\r\nA1: DOWN LEFT LEFT UP\r\n",
        "\tA0:\tRIGHT\tRIGHT\n\tA1:\tDOWN LEFT LEFT UP",
    ],
)
def test_lenient_formats_parse_to_the_same_plan(body):
    text = f"<answer>\n{body}\n</answer>"
    assert plan_of(text) == OPTIMAL
    assert validate(SWAP, text).optimal


def test_tags_are_case_insensitive():
    assert plan_of("<ANSWER>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</Answer>") == OPTIMAL


def test_labels_are_kept_for_messages():
    lines = parse_answer("<answer>\nAgent 0: right\nb1: up\n</answer>").lines
    assert [(x.label, x.agent, x.tokens) for x in lines] == [
        ("Agent 0", 0, ("RIGHT",)),
        ("b1", None, ("UP",)),
    ]


# -- which block is read ---------------------------------------------------------------------------
def test_the_last_block_after_the_last_think_is_read():
    text = (
        "<think>draft: <answer>A0: UP\nA1: UP</answer></think>\n"
        "<answer>A0: LEFT\nA1: LEFT</answer>\n"
        "Wait, better:\n<answer>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer>\nDone."
    )
    assert plan_of(text) == OPTIMAL


def test_an_answer_only_inside_think_is_a_parse_error():
    text = "<think>I will answer <answer>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer></think>\nGood luck."
    assert parse_plan(text, 2).failure == "parse_error"


def test_without_think_the_whole_text_is_searched():
    assert plan_of("Sure!\n<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>") == OPTIMAL


def test_an_unclosed_last_block_falls_back_to_the_last_complete_one():
    text = "<answer>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer> and also <answer>A0: UP"
    assert plan_of(text) == OPTIMAL


def test_nested_opening_tags_take_the_innermost():
    assert plan_of("<answer>notes <answer>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer>") == OPTIMAL


@pytest.mark.parametrize(
    "text",
    [
        "",
        "A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP",  # no tags (SPEC §2.3)
        "<think>hmm</think>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP",
        "<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP",  # never closed (truncated)
        "A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer>",  # never opened
        "</answer>A0: RIGHT<answer>",  # wrong order
        "<answer></answer>",
        "<answer>\n\n   \n</answer>",
        "<answer>\nHere is my plan:\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>",  # prose line
        "<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\nThat is optimal.\n</answer>",
        "<answer>\nRIGHT RIGHT\nDOWN LEFT LEFT UP\n</answer>",  # no labels
        "<answer>\nUP: A0\n</answer>",
    ],
)
def test_parse_errors(text):
    parsed = parse_plan(text, 2)
    assert parsed.failure == "parse_error" and parsed.plan is None and parsed.detail
    assert parsed.checks_passed == 0


# -- agent_mismatch --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "agent"),
    [
        ("A0: RIGHT RIGHT", 1),  # missing agent: the lowest missing index
        ("A1: LEFT", 0),
        ("A0: RIGHT RIGHT\nA1: LEFT\nA0: RIGHT", 0),  # repeated
        ("A0: RIGHT RIGHT\nA1: LEFT\nA7: UP", None),  # not an agent of this instance
        ("A0: RIGHT RIGHT\nB1: LEFT", None),  # not an agent label at all
        ("Robot 0: RIGHT\nRobot 1: LEFT", None),
        ("A0: RIGHT\nA1: LEFT\nStep 3: UP", None),
        ("A0: RIGHT\nA" + "9" * 50 + ": UP", None),  # huge numbers name no agent
    ],
)
def test_agent_mismatch(body, agent):
    parsed = parse_plan(f"<answer>\n{body}\n</answer>", 2)
    assert (parsed.failure, parsed.agent, parsed.checks_passed) == ("agent_mismatch", agent, 1)
    assert parsed.detail


def test_agent_mismatch_comes_before_invalid_actions():
    assert parse_plan("<answer>A0: NORTH\nA0: SOUTH</answer>", 2).failure == "agent_mismatch"


# -- tokens ----------------------------------------------------------------------------------------
def test_empty_sequences_are_allowed():
    assert plan_of("<answer>\nA0:\nA1: UP\n</answer>") == ((), ("UP",))
    assert plan_of("<answer>\nA0\nA1: []\n</answer>") == ((), ())


@pytest.mark.parametrize(
    ("body", "agent", "step"),
    [
        ("A0: NORTH\nA1: LEFT", 0, 1),
        ("A0: U U\nA1: LEFT", 0, 1),
        ("A0: RIGHT STAY\nA1: LEFT", 0, 2),
        ("A0: RIGHT RIGHT x2\nA1: LEFT", 0, 3),
        ("A0: RIGHT RIGHT (done)\nA1: LEFT", 0, 3),
        ("A0: RIGHT RIGHT RIGHT MOVE\nA1: LEFT BACK", 1, 2),
        ("A0: ⬆️\nA1: LEFT", 0, 1),
        ("A0: ВВЕРХ\nA1: LEFT", 0, 1),
    ],
)
def test_invalid_actions(body, agent, step):
    parsed = parse_plan(f"<answer>\n{body}\n</answer>", 2)
    assert (parsed.failure, parsed.agent, parsed.step, parsed.checks_passed) == (
        "invalid_action",
        agent,
        step,
        2,
    )
    assert "not one of" in parsed.detail


def test_check_plan_tokens_on_split_plans():
    assert check_plan_tokens([["up", " Down "], []]).plan == (("UP", "DOWN"), ())
    assert check_plan_tokens([["UP"], None]).failure == "agent_mismatch"
    assert check_plan_tokens([["UP"]], num_agents=2).failure == "agent_mismatch"
    assert check_plan_tokens(["UP, LEFT", "WAIT"]).plan == (("UP", "LEFT"), ("WAIT",))


# -- completions in chat format --------------------------------------------------------------------
def test_completion_text_formats():
    ans = "<answer>A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP</answer>"
    assert completion_text(ans) == ans
    assert completion_text([{"role": "assistant", "content": ans}]) == ans
    conv = [{"role": "user", "content": "plan"}, {"role": "assistant", "content": "draft"},
            {"role": "user", "content": "again"}, {"role": "assistant", "content": ans}]  # fmt: skip
    assert completion_text(conv) == ans
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": ans}]}]) == ans
    assert completion_text([{"role": "user", "content": ans}]) == ans  # no assistant message: the last one
    assert completion_text({"role": "assistant", "content": ans}) == ans
    for junk in (None, 5, b"bytes", [], [1, 2], [{"role": "assistant"}], [{"content": None}], object()):
        assert completion_text(junk) == ""
        assert parse_plan(junk, 2).failure == "parse_error"
    assert plan_of([{"role": "assistant", "content": ans}]) == OPTIMAL


# -- robustness ------------------------------------------------------------------------------------
FRAGMENTS = [
    "<answer>", "</answer>", "<think>", "</think>", "<ANSWER>", "</Answer>", "A0:", "A1:", "a2 ", "Agent 0:",
    "agent_1", "B3:", "A99999999:", "RIGHT", "left", "UP", "Down", "WAIT", "NORTH", "U", ",", ";", "->", "→",
    "\n", "\r\n", " ", "\t", "*", "`", "-", "[", "]", "(", ")", ":", "0", "7", "é", "İ", "ß", "\u2028",
    "\x00", "⬆️", "ВВЕРХ", "#", "=",
]  # fmt: skip
texts = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=40).map("".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.integers(1, 6))
def test_parser_and_validator_never_raise(text, k):
    parsed = parse_plan(text, k)
    assert parsed.failure in (None, "parse_error", "agent_mismatch", "invalid_action")
    assert (parsed.plan is None) == (parsed.failure is not None)
    if parsed.plan is not None:
        assert len(parsed.plan) == k
    parse_answer(text)
    extract_answer_block(text)
    v = validate(SWAP, text)
    assert 0 <= v.checks_passed <= 8


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["UP", "DOWN", "LEFT", "RIGHT", "WAIT"]), max_size=8), min_size=2,
                max_size=2), st.sampled_from(["Agent {i}: ", "a{i}: ", "A{i} ", "agent{i}:"]),
       st.sampled_from([" ", ", ", " -> "]), st.booleans())  # fmt: skip
def test_formatted_plans_round_trip(plan, label, sep, lower):
    lines = [
        label.format(i=i) + sep.join(a.lower() if lower else a for a in seq) for i, seq in enumerate(plan)
    ]
    text = "<think>…</think><answer>\n" + "\n".join(lines) + "\n</answer>"
    assert parse_plan(text, 2).plan == tuple(tuple(seq) for seq in plan)


ADVERSARIAL = [
    "<answer>" * 40_000,
    "</answer>" * 40_000,
    "<answer>" + "A" * 300_000 + "</answer>",
    "<answer>A" + "0" * 300_000 + ": UP</answer>",
    "<answer>" + "a1 " * 100_000 + "</answer>",
    "<answer>A0: X" + " a" * 100_000 + "</answer>",
    "<answer>A0: X a" + " " * 300_000 + "</answer>",
    "<answer>A0: X " + "a-" * 150_000 + "1</answer>",
    "<answer>" + "Agent" * 60_000 + "</answer>",
    "<answer>" + "A0: UP\n" * 50_000 + "</answer>",
    "<answer>A0: " + "RIGHT " * 50_000 + "\nA1: LEFT</answer>",
    "<think>" * 50_000 + "</think>" * 50_000,
    "İ" * 200_000 + "<answer>A0: UP\nA1: UP</answer>",
    "\n" * 300_000,
    "<answer>" + "\n" * 300_000 + "</answer>",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_huge_adversarial_inputs_are_fast(text):
    t0 = time.perf_counter()
    parse_plan(text, 2)
    v = validate(SWAP, text)
    elapsed = time.perf_counter() - t0
    assert v.failure is not None
    assert elapsed < 2.0, f"{elapsed:.2f} s on {len(text):,} characters"


def test_time_grows_linearly():
    def cost(n: int) -> float:
        text = "<answer>A0: X" + " a" * n + "\n" + "A1 " * n + "</answer>"
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            parse_plan(text, 2)
            best = min(best, time.perf_counter() - t0)
        return best

    small, large = cost(10_000), cost(80_000)
    assert large < 8 * small * 3, (small, large)  # 8x the input: far from 64x
