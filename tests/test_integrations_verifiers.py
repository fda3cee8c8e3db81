"""verifiers: the mapf-frozenlake taskset loads by id and scores offline through Task.score; the figures."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.mapf.instance import Instance, save_instances
from envengineer.mapf.policies import respond
from integration_figures import POLICIES, benchmark, cli_table, responses, table_of

vf = pytest.importorskip("verifiers.v1")

from verifiers.v1.trace import AgentInfo, Trace, TraceTask  # noqa: E402

from envengineer.integrations.verifiers_env import MapfTaskset, load_environment  # noqa: E402


def _trace(task, reply: str) -> Trace:
    """The trace a rollout leaves: the task's data and the agent's final reply."""
    data = TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    return Trace(task=data, agent=AgentInfo(config=vf.AgentConfig()), root_reply=reply)


def _score(task, reply: str) -> Trace:
    trace = _trace(task, reply)
    asyncio.run(task.score(trace))
    return trace


def test_verifiers_finds_the_taskset_by_id():
    config = vf.SingleAgentEnvConfig.model_validate({"taskset": {"id": "mapf-frozenlake", "limit": 4}})
    env = vf.load_environment(config)
    assert isinstance(env, vf.SingleAgentEnv) and isinstance(env.taskset, MapfTaskset)
    tasks = list(env.taskset)
    assert [t.data.id for t in tasks] == [i.id for i in benchmark()[:4]]
    task = tasks[0]
    assert task.key == task.data.id and "<answer>" in task.data.prompt and task.data.system_prompt
    assert Instance.from_dict(task.data.instance) == benchmark()[0]


def test_options_sources_and_bad_options(tmp_path):
    env = load_environment(agents=[5], limit=2, system=False, task={"reward_shape": "sparse"})
    tasks = list(env.taskset)
    assert len(tasks) == 2 and all(len(t.data.instance["starts"]) == 5 for t in tasks)
    assert tasks[0].data.system_prompt is None and tasks[0].config.reward_shape == "sparse"
    save_instances(benchmark()[:3], tmp_path / "mine.jsonl")
    assert len(list(load_environment(source=str(tmp_path / "mine.jsonl")).taskset)) == 3
    with pytest.raises(ConfigError, match="limt"):
        load_environment(limt=3)
    with pytest.raises(ConfigError, match="reward_shape"):
        list(load_environment(task={"reward_shape": "shaped"}).taskset)
    with pytest.raises(InstanceFormatError, match="is no instance set"):
        list(load_environment(source="notes.txt").taskset)


def test_rewards_and_metrics_through_task_score():
    task = next(iter(load_environment(limit=1).taskset))
    inst = Instance.from_dict(task.data.instance)
    best = _score(task, respond("optimal", inst, np.random.default_rng(0)))
    assert best.rewards["mapf"].score == 1.0 and best.reward == 1.0
    assert best.metrics == {"valid": 1.0, "optimal": 1.0, "checks_passed": 8.0}
    bad = _score(task, "I would rather not.")
    assert bad.reward == 0.0 and bad.metrics["checks_passed"] == 0.0
    dense = next(iter(load_environment(limit=1, task={"reward_shape": "dense"}).taskset))
    assert 0.0 < _score(dense, "<answer>\nA0: UP\nA1: UP\nA2: UP\n</answer>").reward < 1.0


@pytest.mark.parametrize("policy", POLICIES)
def test_benchmark_scores_equal_envengineer_score(policy):
    answers = responses(policy)
    tasks = list(load_environment().taskset)
    assert len(tasks) == 3150

    async def score_all() -> list[Trace]:
        traces = [_trace(t, answers[t.data.id]) for t in tasks]
        for task, trace in zip(tasks, traces, strict=True):
            await task.score(trace)
        return traces

    traces = asyncio.run(score_all())
    valid = {t.task.data.id: t.metrics["valid"] == 1.0 for t in traces}
    optimal = {t.task.data.id: t.metrics["optimal"] == 1.0 for t in traces}
    assert table_of(benchmark(), valid, optimal) == cli_table(policy)
