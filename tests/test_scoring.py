"""Scoring: the paper's table from verdicts, and the reference policies that make it meaningful."""

from __future__ import annotations

import numpy as np
import pytest

from envengineer.mapf.generator import generate_cell
from envengineer.mapf.instance import Instance
from envengineer.mapf.policies import greedy_plan, respond
from envengineer.mapf.scoring import score
from envengineer.mapf.validator import format_answer

SWAP = Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
FOLLOW = Instance("follow", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
BIG = Instance(
    "big", ("....", "....", "....", "...."), ((0, 0), (3, 3), (0, 3)), ((3, 0), (0, 3), (3, 3)), 9, 3, 9
)


def test_hand_checked_table():
    responses = {
        "swap": "<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>",  # optimal
        "follow": "<answer>A0: WAIT RIGHT\nA1: RIGHT</answer>",  # valid, SoC 3 > 2: suboptimal
        # "big" has no response: parse_error
    }
    r = score([SWAP, FOLLOW, BIG], responses, tokens={"swap": 10, "follow": 20})
    t = r.table()
    assert t["2"]["sizes"]["3"] == {"n": 2, "valid": 100.0, "optimal": 50.0}
    assert t["3"]["sizes"]["4"] == {"n": 1, "valid": 0.0, "optimal": 0.0}
    assert t["2"]["sum"] == {"valid": 100.0, "optimal": 50.0}
    assert r.failures() == {"2": {"3": {"suboptimal": 1}}, "3": {"4": {"parse_error": 1}}}
    s = r.summary()
    assert (s["n"], s["valid"], s["optimal"], s["mean_tokens"]) == (3, 66.67, 33.33, 15.0)
    v = {d["id"]: d for d in r.to_json()["verdicts"]}
    assert v["swap"]["soc"] == 6 and v["swap"]["makespan"] == 4 and v["follow"]["failure"] == "suboptimal"
    assert "| 2 | 100.0 / 50.0 |" in r.markdown()


def test_sum_is_the_unweighted_mean_over_sizes():
    a = Instance("a", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    b = Instance("b", ("...", "...", "..."), ((0, 0), (0, 1)), ((0, 1), (0, 2)), 2, 1, 2)
    c = Instance("c", ("....", "....", "....", "...."), ((0, 0), (1, 0)), ((0, 1), (1, 1)), 2, 1, 2)
    ok = "<answer>A0: RIGHT\nA1: RIGHT</answer>"
    r = score([a, b, c], {"a": ok, "b": "nonsense", "c": ok})
    # size 3: 1 of 2 valid (50 %), size 4: 1 of 1 (100 %) -> Sum 75, not the pooled 66.67
    assert r.table()["2"]["sum"]["valid"] == 75.0


@pytest.fixture(scope="module")
def mixed_set():
    out = []
    for k, n in ((2, 3), (3, 5), (4, 6)):
        out += generate_cell(
            num_agents=k, size=n, count=12, wait_count=6, seed=5, split="custom", hole_ratio=0.2
        )
    return out


def test_optimal_policy_scores_100(mixed_set):
    rng = np.random.default_rng(0)
    r = score(mixed_set, {i.id: respond("optimal", i, rng) for i in mixed_set})
    assert r.summary()["valid"] == r.summary()["optimal"] == 100.0


def test_greedy_is_optimal_exactly_when_it_stays_conflict_free(mixed_set):
    rng = np.random.default_rng(0)
    r = score(mixed_set, {i.id: respond("greedy", i, rng) for i in mixed_set})
    for inst in mixed_set:
        v = r.verdicts[inst.id]
        if inst.needs_wait:
            assert not v.optimal  # shortest paths for all cannot be conflict-free
        if v.valid:
            assert v.optimal and v.soc == inst.shortest_sum
    assert 0 < r.summary()["valid"] < 100


def test_greedy_paths_are_shortest(mixed_set):
    inst = mixed_set[0]
    plan = greedy_plan(inst, np.random.default_rng(1))
    assert sum(len(p) for p in plan) == inst.shortest_sum
    assert format_answer(plan).startswith("<answer>")


def test_random_policy_is_seeded(mixed_set):
    a = [respond("random", i, np.random.default_rng(3)) for i in mixed_set]
    b = [respond("random", i, np.random.default_rng(3)) for i in mixed_set]
    assert a == b
