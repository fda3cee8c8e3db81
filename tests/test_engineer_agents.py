"""The engineer is told the agent counts the round really trains on (``training.agents``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from envengineer.engineer import EngineerRequest
from envengineer.engineer.context import ContextSpec
from envengineer.engineer.prompt import build_user_prompt
from envengineer.errors import ConfigError
from envengineer.loop.experiment import load_experiment
from envengineer.loop.rundir import RunDir
from envengineer.loop.stages.config import build_request
from envengineer.loop.state import RoundState
from envengineer.mapf.config import ConfigSpace, RoundConfig, round0_config

ROOT = Path(__file__).resolve().parents[1]
SPACE = ConfigSpace(sizes=(3, 4, 5, 6))
TRAINING = {"total_rounds": 3, "num_samples": 64, "num_agents": 2}


def prompt(agents: tuple[int, ...]) -> str:
    config = RoundConfig.model_validate({**round0_config(0).model_dump(), "num_samples": 64})
    request = EngineerRequest(
        round_index=0,
        config=config,
        report=None,
        space=SPACE,
        training=TRAINING,
        context=ContextSpec.from_switches({"T": "bookkeeping"}),
        agents=agents,
    )
    return build_user_prompt(request)


def test_a_round_of_two_and_three_agents_names_both() -> None:
    text = prompt((3, 2))
    assert "number of agents per training instance (2)" not in text
    assert "agents per training instance (2 or 3, in equal shares of the round's instances)" in text
    assert "2 or 3 agents each, in equal shares" in text  # the T module says it too


def test_one_count_reads_as_before() -> None:
    for agents in ((), (2,)):
        text = prompt(agents)
        assert (
            "The number of agents per training instance (2) and the number of instances per round (64)"
            in text
        )
        assert "- Each round trains on 64 freshly generated training instances, 2 agents each." in text


@pytest.mark.parametrize("bad", [(0,), (2, "3"), (True,)])
def test_agent_counts_are_checked(bad: tuple) -> None:
    with pytest.raises(ConfigError, match="agents must be agent counts"):
        EngineerRequest(round_index=0, config=round0_config(0), report=None, agents=bad)


def test_the_loop_passes_the_rounds_mix(tmp_path: Path) -> None:
    """``build_request`` of an experiment with ``training.agents: [2, 3]`` (the small-policy arms)."""
    exp = load_experiment(ROOT / "experiments" / "cpu" / "_policy.yaml")
    assert exp.training.agents == (2, 3)
    loop = SimpleNamespace(
        exp=exp,
        rd=RunDir(tmp_path),
        space=SPACE,
        rounds=[RoundState(0, config=round0_config(0), validation={"summary": {}}, source="round0")],
    )
    request = build_request(loop, 1)
    assert request.agent_counts == (2, 3)
    assert "(2 or 3, in equal shares" in build_user_prompt(request)
