"""Bad arguments to every integration surface raise the documented error types, never another one.

One test per case the red team found (each failed before), then one hypothesis property per surface that
feeds random arguments and accepts only the types the surface's docstring names.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.mapf.instance import Instance

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("pettingzoo")
pytest.importorskip("reasoning_gym")
pytest.importorskip("datasets")

from envengineer.integrations import MissingDependency, hf_datasets, require, trackers, verl  # noqa: E402
from envengineer.integrations.gym_env import MapfEpisode, MapfFrozenLakeEnv, benchmark_cell, play_plan  # noqa: E402
from envengineer.integrations.pettingzoo_env import MapfParallelEnv  # noqa: E402
from envengineer.integrations.reasoning_gym import MapfFrozenLakeConfig, MapfFrozenLakeDataset  # noqa: E402

INST = Instance("ex", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
PROJECT = (ConfigError, InstanceFormatError, MissingDependency)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Any JSON-like value, nested a little: what a careless caller might pass anywhere.
ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _raises_only(allowed: tuple[type[BaseException], ...], fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except allowed:
        pass


# -- the red team's cases ----------------------------------------------------------------------------------
def test_gym_constructor_and_reset_refuse_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="sequence of Instance"):
        MapfFrozenLakeEnv("abc")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_agents must be a positive integer"):
        MapfFrozenLakeEnv(num_agents=0)
    with pytest.raises(ConfigError, match="size must be a positive integer"):
        MapfFrozenLakeEnv(size=0)
    env = MapfFrozenLakeEnv(num_agents=3, size=3)
    with pytest.raises(ConfigError, match="options must be a dict"):
        env.reset(options=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(gymnasium.error.Error):  # Gymnasium's own error for a bad seed
        env.reset(seed=-1)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="joint action"):
        env.step([[1], [2, 3]])
    with pytest.raises(ConfigError, match="an Instance"):
        MapfEpisode("abc", max_steps=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="one list of action names"):
        play_plan(env, None)  # type: ignore[arg-type]


def test_pettingzoo_step_and_reset_refuse_bad_arguments() -> None:
    env = MapfParallelEnv(num_agents=3, size=3)
    with pytest.raises(ConfigError, match="seed must be a non-negative integer"):
        env.reset(seed=-1)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="actions must be a dict"):
        env.step(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sequence of Instance"):
        MapfParallelEnv("abc")  # type: ignore[arg-type]


def test_verl_compute_score_refuses_bad_ground_truths_and_shapes() -> None:
    gt = INST.to_json()
    with pytest.raises(InstanceFormatError, match="nested too deeply"):
        verl.compute_score(verl.DATA_SOURCE, "x", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(InstanceFormatError, match="not a readable JSON value"):
        verl.compute_score(verl.DATA_SOURCE, "x", gt.replace("[[0,0]", "[[" + "9" * 5000 + ",0]", 1))
    with pytest.raises(ConfigError, match="shape must be"):
        verl.compute_score(verl.DATA_SOURCE, "x", gt, shape=["graded"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="weight"):
        verl.compute_score(verl.DATA_SOURCE, "x", gt, valid=[1])  # type: ignore[arg-type]
    assert verl.compute_score(verl.DATA_SOURCE, None, gt) == 0.0  # model output never raises


def test_reasoning_gym_refuses_a_bad_seed_at_creation_and_a_foreign_entry() -> None:
    import reasoning_gym

    with pytest.raises(ConfigError, match="seed must be"):
        reasoning_gym.create_dataset("mapf_frozenlake", size=3, seed=-1)
    with pytest.raises(ConfigError, match="size must be an integer"):
        reasoning_gym.create_dataset("mapf_frozenlake", size="3", seed=0)
    with pytest.raises(ConfigError, match="MapfFrozenLakeConfig"):
        MapfFrozenLakeDataset(None)  # type: ignore[arg-type]
    ds = reasoning_gym.create_dataset("mapf_frozenlake", size=2, seed=0)
    with pytest.raises(InstanceFormatError, match=r"metadata\.instance"):
        ds.score_answer("A0: UP", None)
    with pytest.raises(ConfigError, match="indexed by integers"):
        ds["a"]
    with pytest.raises(IndexError):
        ds[5]
    assert ds.score_answer(None, ds[0]) == 0.0


def test_datasets_trackers_and_require_refuse_bad_arguments() -> None:
    with pytest.raises(InstanceFormatError, match="Instance objects only"):
        hf_datasets.rows(["a"], split="x")  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="split"):
        hf_datasets.rows([INST], split=3)  # type: ignore[arg-type]
    with pytest.raises(InstanceFormatError, match="a name or a path"):
        hf_datasets.resolve_instances(3)  # type: ignore[arg-type]
    with pytest.raises(InstanceFormatError, match="reads a Dataset"):
        hf_datasets.instances_from_dataset(5)
    with pytest.raises(ConfigError, match=r"datasets\.Dataset"):
        hf_datasets.write_dataset(None, "x.parquet")
    with pytest.raises(ConfigError, match="report_to must be"):
        trackers.normalize_report_to(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ScoreReport"):
        trackers.round_scalars({"table": {"2": 5}})
    with pytest.raises(ConfigError, match="module name"):
        require(5, purpose="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be an integer"):
        benchmark_cell("a", 3)  # type: ignore[arg-type]


# -- one property per surface ------------------------------------------------------------------------------
@SETTINGS
@given(
    instances=ANYTHING, num_agents=ANYTHING, size=ANYTHING, max_steps=ANYTHING, shape=ANYTHING, mode=ANYTHING
)
def test_gym_constructor_raises_only_config_errors(
    instances, num_agents, size, max_steps, shape, mode
) -> None:
    kwargs = {"num_agents": num_agents, "size": size, "max_steps": max_steps, "reward_shape": shape}
    _raises_only((ConfigError,), MapfFrozenLakeEnv, instances, render_mode=mode, **kwargs)
    _raises_only((ConfigError,), MapfParallelEnv, instances, render_mode=mode, **kwargs)


@SETTINGS
@given(seed=ANYTHING, options=ANYTHING, action=ANYTHING)
def test_gym_reset_and_step_raise_only_documented_errors(seed, options, action) -> None:
    env = MapfFrozenLakeEnv([INST])
    _raises_only((ConfigError, gymnasium.error.Error), env.reset, seed=seed, options=options)
    env.reset(seed=0)
    _raises_only((ConfigError,), env.step, action)


@SETTINGS
@given(seed=ANYTHING, options=ANYTHING, actions=ANYTHING)
def test_pettingzoo_reset_and_step_raise_only_config_errors(seed, options, actions) -> None:
    env = MapfParallelEnv([INST])
    _raises_only((ConfigError,), env.reset, seed=seed, options=options)
    env.reset(seed=0)
    _raises_only((ConfigError,), env.step, actions)
    env.reset(seed=0)
    _raises_only((ConfigError,), env.step, {"A0": actions, "A1": 4})


@SETTINGS
@given(source=ANYTHING, solution=ANYTHING, truth=ANYTHING, shape=ANYTHING, weight=ANYTHING)
def test_verl_compute_score_raises_only_project_errors(source, solution, truth, shape, weight) -> None:
    good = INST.to_json()
    for gt in (truth, json.dumps(truth), good):
        _raises_only(PROJECT, verl.compute_score, verl.DATA_SOURCE, solution, gt)
        _raises_only(PROJECT, verl.compute_score, source, solution, gt, shape=shape)
        _raises_only(PROJECT, verl.compute_score, verl.DATA_SOURCE, solution, gt, valid=weight)
    assert 0.0 <= verl.compute_score(verl.DATA_SOURCE, solution, good) <= 1.0


_CONFIG_FIELDS = ("source", "min_agents", "max_agents", "min_size", "max_size", "min_hole_ratio",
                  "max_hole_ratio", "wait_ratio", "reward_shape", "seed", "size")  # fmt: skip


@SETTINGS
@given(field=st.sampled_from(_CONFIG_FIELDS), value=ANYTHING, index=ANYTHING, answer=ANYTHING, entry=ANYTHING)
def test_reasoning_gym_raises_only_documented_errors(field, value, index, answer, entry) -> None:
    config = MapfFrozenLakeConfig(size=3, seed=0, max_size=4)
    setattr(config, field, value)
    _raises_only((ConfigError,), MapfFrozenLakeDataset, config)
    ds = MapfFrozenLakeDataset(MapfFrozenLakeConfig(size=3, seed=0, max_size=4))
    _raises_only((ConfigError, IndexError), ds.__getitem__, index)
    _raises_only((InstanceFormatError,), ds.score_answer, answer, entry)
    assert ds.score_answer(answer, ds[0]) in (0.0, 0.5, 1.0)


@SETTINGS
@given(instances=ANYTHING, split=ANYTHING, source=ANYTHING, seed=ANYTHING, data=ANYTHING, column=ANYTHING)
def test_datasets_functions_raise_only_project_errors(instances, split, source, seed, data, column) -> None:
    _raises_only(PROJECT, hf_datasets.rows, instances, split=split)
    _raises_only(PROJECT, hf_datasets.rows, [INST], split=split)
    _raises_only(PROJECT, verl.verl_rows, instances, split=split)
    if source not in ("benchmark", "validation"):
        _raises_only(PROJECT, hf_datasets.resolve_instances, source, seed=seed)
    if not isinstance(data, str):  # a string is a path: reading random paths is not the point here
        _raises_only(PROJECT, hf_datasets.instances_from_dataset, data, column=column)


@SETTINGS
@given(report_to=ANYTHING, validation=ANYTHING, module=ANYTHING)
def test_trackers_and_require_raise_only_project_errors(report_to, validation, module) -> None:
    _raises_only(PROJECT, trackers.normalize_report_to, report_to)
    _raises_only(PROJECT, trackers.loop_trackers, report_to)
    _raises_only(PROJECT, trackers.round_scalars, validation)
    if not (isinstance(module, str) and module.strip()):
        _raises_only(PROJECT, require, module, purpose="a test")


@settings(max_examples=15, deadline=None)
@given(key=st.sampled_from(["source", "seed", "limit", "agents", "system", "task", "other"]), value=ANYTHING)
def test_verifiers_load_environment_raises_only_config_errors(key: str, value: Any) -> None:
    pytest.importorskip("verifiers")
    from envengineer.integrations.verifiers_env import load_environment

    if key == "source" and value in ("benchmark", "validation"):
        return
    _raises_only((ConfigError,), load_environment, **{key: value})
