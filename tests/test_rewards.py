"""Reward functions: the three shapes, weights, TRL's call conventions, and never raising on model text."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.mapf.instance import Instance
from envengineer.mapf.rewards import DEFAULT_WEIGHTS, RewardFunction, make_reward, mapf_reward, score_verdict
from envengineer.mapf.validator import validate

SWAP = Instance("t", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6, optimal_makespan=4,
                shortest_sum=4)  # fmt: skip
COLUMN = SWAP.to_json()


def answer(*lines: str) -> str:
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


OPTIMAL = answer("A0: RIGHT RIGHT", "A1: DOWN LEFT LEFT UP")
SUBOPTIMAL = answer("A0: WAIT RIGHT RIGHT", "A1: DOWN LEFT LEFT UP")
CONFLICT = answer("A0: RIGHT RIGHT", "A1: LEFT LEFT")  # vertex_conflict, both end on their goals
HALF = answer("A0: RIGHT RIGHT", "A1: DOWN")  # goal_not_reached, one agent on its goal
BAD_TOKEN = answer("A0: RIGHT NORTH", "A1: LEFT")
MISSING = answer("A0: RIGHT RIGHT")
NO_TAGS = "A0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP"
ALL = [OPTIMAL, SUBOPTIMAL, CONFLICT, HALF, BAD_TOKEN, MISSING, NO_TAGS]


def rewards(fn, completions=ALL):
    return fn(completions, instance=[COLUMN] * len(completions))


def test_graded_default():
    assert rewards(mapf_reward) == [1.0, 0.6, 0.1, 0.1, 0.0, 0.0, 0.0]
    assert rewards(make_reward()) == rewards(make_reward("graded")) == rewards(mapf_reward)


def test_sparse():
    assert rewards(make_reward("sparse")) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_dense():
    got = rewards(make_reward("dense"))
    # checks/8 * 0.3 + goals share * 0.2 + valid * 0.2 + optimal * 0.3
    expected = [1.0, 0.7, 0.3 * 5 / 8 + 0.2, 0.3 * 7 / 8 + 0.1, 0.3 * 2 / 8, 0.3 * 1 / 8, 0.0]
    assert got == pytest.approx(expected)
    assert got == sorted(got, reverse=True)  # the test cases are ordered from best to worst


def test_all_shapes_rank_optimal_over_valid_over_invalid():
    for shape in ("graded", "sparse", "dense"):
        r = rewards(make_reward(shape))
        assert r[0] == 1.0 and r[0] > r[1] > max(r[2:]) >= min(r[2:]) >= 0.0


def test_weights_override():
    assert rewards(make_reward("graded", format=0.0, valid=0.5)) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert rewards(make_reward("sparse", valid=0.0)) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # dense weights are relative: only the goal share counts here
    dense = make_reward("dense", checks=0.0, goals=1.0, valid=0.0, optimal=0.0)
    assert rewards(dense) == [1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    assert DEFAULT_WEIGHTS["graded"] == {"format": 0.1, "valid": 0.6, "optimal": 1.0}  # not mutated


@pytest.mark.parametrize(
    ("shape", "weights", "match"),
    [
        ("shaped", {}, "unknown reward shape"),
        ("graded", {"bonus": 0.1}, "has no weight 'bonus'"),
        ("sparse", {"format": 0.1}, "has no weight 'format'"),
        ("graded", {"valid": 1.5}, r"in \[0, 1\]"),
        ("graded", {"valid": -0.1}, r"in \[0, 1\]"),
        ("graded", {"valid": "high"}, r"in \[0, 1\]"),
        ("graded", {"valid": True}, r"in \[0, 1\]"),
        ("dense", {"checks": 0, "goals": 0, "valid": 0, "optimal": 0}, "all zero"),
    ],
)
def test_bad_configuration_is_a_config_error(shape, weights, match):
    with pytest.raises(ConfigError, match=match):
        make_reward(shape, **weights)


def test_names_and_pickling():
    assert mapf_reward.__name__ == "mapf_reward"
    for shape in ("graded", "sparse", "dense"):
        fn = make_reward(shape)
        assert fn.__name__ == f"mapf_{shape}"
        clone = pickle.loads(pickle.dumps(fn))
        assert clone.__name__ == fn.__name__ and rewards(clone) == rewards(fn)
    assert "graded" in repr(make_reward())


def test_trl_conversational_completions_and_extra_kwargs():
    conv = [[{"role": "assistant", "content": text}] for text in ALL]
    got = mapf_reward(conv, instance=[COLUMN] * len(ALL), prompts=["p"] * len(ALL), completion_ids=[[1]] * 7,
                      trainer_state=None, id=["t"] * 7)  # fmt: skip
    assert got == rewards(mapf_reward)


def test_instance_column_forms():
    as_dict = SWAP.to_dict()
    assert mapf_reward([OPTIMAL, CONFLICT], instance=[as_dict, SWAP]) == [1.0, 0.1]
    assert mapf_reward([OPTIMAL, CONFLICT], instance=COLUMN) == [1.0, 0.1]  # one value for all
    assert mapf_reward([OPTIMAL], [COLUMN]) == [1.0]  # positional, as TRL's keyword-only call also works
    assert mapf_reward([], instance=[]) == []


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (None, "needs the dataset column 'instance'"),
        (["{not json"], "not JSON"),
        ([42], "holds a int"),
        ([{"id": "x"}], "missing required field"),
        ([Instance("u", ("..", ".."), ((0, 0),), ((1, 1),)).to_json()], "envengineer solve"),
        ([COLUMN, COLUMN], "1 completions but 2"),
    ],
)
def test_caller_errors_raise(column, match):
    with pytest.raises(InstanceFormatError, match=match):
        mapf_reward([OPTIMAL], instance=column)


def test_score_verdict_matches_the_functions():
    for shape in ("graded", "sparse", "dense"):
        fn = make_reward(shape)
        assert [score_verdict(validate(SWAP, t), 2, shape) for t in ALL] == rewards(fn)
        assert [fn.score(validate(SWAP, t), 2) for t in ALL] == rewards(fn)


def test_reward_function_class_directly():
    fn = RewardFunction("graded", {"format": 0.2}, name="my_reward")
    assert fn.__name__ == "my_reward" and rewards(fn)[2] == 0.2


MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "user"]), "content": st.text(max_size=80)}
)
PIECES = ["<answer>", "</answer>", "A0:", "A1: ", "RIGHT", "LEFT", "DOWN", "UP", "\n", "x"]
completions = st.one_of(
    st.text(max_size=200),
    st.lists(MESSAGES, max_size=3),
    st.none(),
    st.integers(),
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(completions, max_size=6), st.sampled_from(["graded", "sparse", "dense"]))
def test_never_raises_and_stays_in_range(batch, shape):
    fn = make_reward(shape)
    got = fn(batch, instance=[COLUMN] * len(batch))
    assert len(got) == len(batch)
    assert all(isinstance(x, float) and 0.0 <= x <= 1.0 for x in got)
