"""Prime Intellect verifiers: MAPF-FrozenLake as a single-turn taskset, scored by the testbed's rewards.

verifiers (0.4, ``verifiers.v1``) builds an environment from a *taskset* plugin: a package exporting one
``Taskset`` subclass, whose tasks carry ``@reward`` and ``@metric`` methods. Ours is the top-level package
``mapf_frozenlake`` (this module's classes, re-exported), so verifiers' own tooling finds it by id::

    import verifiers.v1 as vf
    env = vf.load_environment(vf.SingleAgentEnvConfig.model_validate({"taskset": {"id": "mapf-frozenlake"}}))

or with :func:`load_environment` (``load_environment(source="benchmark", limit=100)``). Each task is one
instance: ``prompt`` the testbed's user prompt, ``system_prompt`` its system message, ``id`` the instance
id and ``instance`` the whole instance (``Instance.to_dict()``). Scoring reads the rollout's final reply:

* reward ``mapf`` (weight 1): the testbed reward of ``reward_shape`` (``graded`` by default; set
  ``task.reward_shape``, ``--env.taskset.task.reward_shape sparse`` on verifiers' command line);
* metrics ``valid``, ``optimal``, ``checks_passed`` (0-8) from the validator's verdict.

Taskset options (``--env.taskset.*``): ``source`` (``benchmark``, ``validation``, a round configuration or an
instance file, as ``envengineer export`` reads them), ``seed`` (the data seed of a round configuration),
``limit`` (the first N instances) and ``agents`` (keep instances with these agent counts).

Install: verifiers 0.4.0 declares ``openai<3``, while the project runs openai 3.60; ``scripts/install.sh
--dev`` installs it with ``--no-deps`` plus its other requirements (docs/integrations.md). Scoring needs
no model and no network; rollouts (``vf-eval``, prime-rl) need an OpenAI-compatible endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance

__all__ = ["MapfData", "MapfTask", "MapfTaskConfig", "MapfTaskset", "MapfTasksetConfig", "load_environment"]

TASKSET_ID = "mapf-frozenlake"


class MapfData(vf.TaskData):
    """One instance as verifiers task data."""

    instance: dict[str, Any]
    """The whole instance, ``Instance.to_dict()`` (with its optima)."""


class MapfTaskConfig(vf.TaskConfig):
    """Scoring knobs, under ``--env.taskset.task.*``."""

    reward_shape: str = "graded"
    """The testbed reward shape: graded (default), sparse or dense (docs/testbed-answers.md)."""


class MapfTask(vf.Task[MapfData, vf.State, MapfTaskConfig]):
    """One instance: single-turn, scored on the final reply with the testbed's validator."""

    @property
    def key(self) -> str:
        return self.data.id or self.hash

    def _verdict(self, trace: vf.Trace) -> Any:
        """The validator's verdict of the reply (computed once per reply: the reward and metrics share it)."""
        from envengineer.mapf.validator import validate

        key = (trace.last_reply, id(self.data))
        cached = self.__dict__.get("_verdict_of")
        if cached is None or cached[0] != key:
            cached = (key, validate(_instance(self.data.instance), key[0]))
            self.__dict__["_verdict_of"] = cached
        return cached[1]

    @vf.reward(weight=1.0)
    async def mapf(self, trace: vf.Trace) -> float:
        """The testbed reward of the reply (``reward_shape``)."""
        from envengineer.mapf.rewards import make_reward

        reward = make_reward(self.config.reward_shape)  # type: ignore[arg-type]
        return reward.score(self._verdict(trace), len(self.data.instance["starts"]))

    @vf.metric
    async def valid(self, trace: vf.Trace) -> float:
        return float(self._verdict(trace).valid)

    @vf.metric
    async def optimal(self, trace: vf.Trace) -> float:
        return float(self._verdict(trace).optimal)

    @vf.metric
    async def checks_passed(self, trace: vf.Trace) -> float:
        return float(self._verdict(trace).checks_passed)


class MapfTasksetConfig(vf.TasksetConfig):
    """Which instances load, under ``--env.taskset.*``."""

    id: str = TASKSET_ID
    source: str = "benchmark"
    """benchmark, validation, a round configuration (.yaml/.json) or an instance file (.jsonl)."""
    seed: int = 0
    """Data seed of a round configuration."""
    limit: int | None = None
    """Keep the first N instances (after the agents filter)."""
    agents: list[int] | None = None
    """Keep instances with these agent counts."""
    system: bool = True
    """Give each task the testbed's system message."""
    task: MapfTaskConfig = MapfTaskConfig()


class MapfTaskset(vf.Taskset[MapfTask, MapfTasksetConfig]):
    """The instances of ``config.source`` as single-turn tasks."""

    def load(self) -> Iterator[MapfTask]:
        from envengineer.integrations.hf_datasets import check_solved, resolve_instances
        from envengineer.mapf.prompt import SYSTEM_PROMPT, build_prompt

        cfg = self.config
        _check_options(cfg)
        instances, _ = resolve_instances(cfg.source, seed=cfg.seed)
        if cfg.agents:
            instances = [i for i in instances if i.num_agents in cfg.agents]
        instances = instances[: cfg.limit]
        check_solved(instances, f"taskset source {cfg.source!r}")
        for inst in instances:
            data = MapfData(
                id=inst.id,
                name=inst.id,
                prompt=build_prompt(inst),
                system_prompt=SYSTEM_PROMPT if cfg.system else None,
                instance=inst.to_dict(),
            )
            yield MapfTask(data, cfg.task)


def load_environment(**kwargs: Any) -> vf.Env:
    """The verifiers environment (single agent, single turn) over the MAPF-FrozenLake taskset.

    Args:
        **kwargs: Taskset options (``source``, ``seed``, ``limit``, ``agents``, ``system``, and ``task``:
            ``{"reward_shape": ...}``).

    Raises:
        ConfigError: An unknown option or a bad value (checked here, before any instance is loaded).
    """
    from pydantic import ValidationError

    try:
        config = vf.SingleAgentEnvConfig.model_validate({"taskset": {"id": TASKSET_ID, **kwargs}})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"verifiers environment option {where}: {first['msg']}") from None
    _check_options(config.taskset)
    return vf.load_environment(config)


def _check_options(cfg: Any) -> None:
    """The checks pydantic's types leave: a known reward shape, a positive limit, a non-negative seed."""
    from envengineer.mapf.rewards import SHAPES

    if cfg.task.reward_shape not in SHAPES:
        raise ConfigError(
            f"task.reward_shape {cfg.task.reward_shape!r} is unknown; use one of {', '.join(SHAPES)}"
        )
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"limit must be a positive number of instances, got {cfg.limit}")
    if cfg.seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {cfg.seed}")


def _instance(data: dict[str, Any]) -> Instance:
    return Instance.from_dict(data, where="the task's instance")
