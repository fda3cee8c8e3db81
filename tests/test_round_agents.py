"""``training.agents``: a round's boards in equal shares of several agent counts (stage ``data``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.plan import _board_problems
from envengineer.loop.stages.data import boards
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round

CONFIG = RoundConfig.model_validate(
    {
        "num_agents": 2,
        "num_samples": 9,
        "sizes": {
            "2": {"data_ratio": 0.5, "hole_ratio": 0.0, "wait_ratio": 0.0},
            "4": {"data_ratio": 0.5, "hole_ratio": 0.2, "wait_ratio": 0.5},
        },
    }
)


def loop_of(agents: list[int] | None) -> SimpleNamespace:
    exp = Experiment.model_validate({"name": "a", "training": {"agents": agents}})
    return SimpleNamespace(
        exp=exp, comps=SimpleNamespace(generator=generate_round), exclude=frozenset(), progress=False
    )


def test_without_agents_the_round_is_the_generators_own() -> None:
    got = boards(loop_of(None), CONFIG, seed=5)
    want = generate_round(CONFIG, 5)
    assert [i.board_hash() for i in got] == [i.board_hash() for i in want]


def test_equal_shares_on_the_sizes_that_fit_each_count() -> None:
    got = boards(loop_of([2, 3]), CONFIG, seed=5)
    by_count = {k: [i for i in got if i.num_agents == k] for k in (2, 3)}
    assert len(got) == 9 and [len(by_count[2]), len(by_count[3])] == [
        5,
        4,
    ]  # 9 = 5 + 4, the first takes the rest
    assert {i.size for i in by_count[2]} == {2, 4}
    assert {i.size for i in by_count[3]} == {4}  # three agents do not fit a 2x2 map: its share goes to 4x4
    assert [i.num_agents for i in got] != sorted(i.num_agents for i in got)  # shuffled together
    again = boards(loop_of([2, 3]), CONFIG, seed=5)
    assert [i.board_hash() for i in again] == [i.board_hash() for i in got]  # the seed decides it all


def test_a_count_that_fits_no_size_is_a_clear_error() -> None:
    with pytest.raises(
        ConfigError, match=r"training.agents: 5 agents fit none of the round's map sizes \[2, 4\]"
    ):
        boards(loop_of([2, 5]), CONFIG, seed=5)


def test_the_plan_refuses_a_count_no_map_of_the_space_holds() -> None:
    exp = Experiment.model_validate({"name": "a", "rounds": 1, "training": {"agents": [2, 16]}})
    assert [p for p in _board_problems(exp) if "training.agents" in p] == [
        "training.agents: 16 agents fit no map size of the space (3-10); lower training.agents"
    ]
    fine = Experiment.model_validate({"name": "a", "rounds": 1, "training": {"agents": [2, 3]}})
    assert _board_problems(fine) == []


def test_agent_counts_are_checked() -> None:
    for bad in ([], [0], ["two"], [17]):
        with pytest.raises(ValueError):
            Experiment.model_validate({"name": "a", "training": {"agents": bad}})
