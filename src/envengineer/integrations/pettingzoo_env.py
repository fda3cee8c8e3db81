"""MAPF-FrozenLake step by step for PettingZoo: a parallel environment and its AEC form.

:class:`MapfParallelEnv` plays the same episodes as the Gymnasium environment
(:class:`~envengineer.integrations.gym_env.MapfFrozenLakeEnv`, whose docstring holds the rules, rewards
and episode end), with one PettingZoo agent ``A<i>`` per MAPF agent and a shared team reward.
:func:`aec_env` gives the AEC (turn-by-turn) form through ``pettingzoo.utils.parallel_to_aec``.

This module imports gymnasium and PettingZoo: install the ``integrations`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from envengineer.errors import ConfigError
from envengineer.integrations.gym_env import (
    RENDER_MODES,
    MapfEpisode,
    _instance_set,
    _max_steps,
    _observation_space,
    _pick,
    _render,
    _render_mode,
)
from envengineer.mapf.instance import ACTIONS, Instance, agent_name
from envengineer.mapf.rewards import make_reward

__all__ = ["MapfParallelEnv", "aec_env"]


class MapfParallelEnv(ParallelEnv):
    """The PettingZoo form of :class:`MapfFrozenLakeEnv`: one agent ``A<i>`` per MAPF agent.

    Same rules, instances, observation (each agent sees the whole board: the shared ``Dict`` observation)
    and episode end as :class:`MapfFrozenLakeEnv`. Per agent: action space ``Discrete(5)``
    (``0 UP, 1 DOWN, 2 LEFT, 3 RIGHT, 4 WAIT``); the reward is the team's (every agent gets the episode's
    reward); termination and truncation are the episode's, for all agents at once, after which ``agents``
    is empty. Every live agent must be given an action each step. ``reset(seed=...)`` reseeds the
    generator that draws instances. Arguments as :class:`MapfFrozenLakeEnv`.

    Raises:
        ConfigError: Bad arguments, as :class:`MapfFrozenLakeEnv`'s; in ``reset`` a seed that is not a
            non-negative integer or an ``options`` that is not a dict; in ``step`` actions that are not a
            dict with one integer in 0..4 per live agent, or a step outside an episode.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": list(RENDER_MODES),
        "name": "mapf_frozenlake_v0",
        "is_parallelizable": True,
    }

    def __init__(
        self,
        instances: Sequence[Instance] | None = None,
        *,
        num_agents: int | None = None,
        size: int | None = None,
        max_steps: int | None = None,
        reward_shape: str = "sparse",
        render_mode: str | None = None,
    ) -> None:
        self.instances = _instance_set(instances, num_agents, size)
        k, n = self.instances[0].num_agents, self.instances[0].size
        self.size = n
        self.max_steps = _max_steps(max_steps, n)
        make_reward(reward_shape)  # type: ignore[arg-type]
        self.reward_shape = reward_shape
        self.render_mode = _render_mode(render_mode)
        self.possible_agents = [agent_name(i) for i in range(k)]
        self.agents: list[str] = []
        self._obs_space = _observation_space(k, n)
        self._act_space = spaces.Discrete(len(ACTIONS))
        self._by_id = {inst.id: inst for inst in self.instances}
        self._rng = np.random.default_rng()
        self.episode: MapfEpisode | None = None

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0
        ):
            raise ConfigError(f"seed must be a non-negative integer or None, got {seed!r}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._obs_space.seed(seed)
            self._act_space.seed(seed)
        inst = _pick(self.instances, self._by_id, options, self._rng)
        self.episode = MapfEpisode(inst, max_steps=self.max_steps, reward_shape=self.reward_shape)
        self.agents = list(self.possible_agents)
        obs = self.episode.observation()
        info = self.episode.info()
        return {a: obs for a in self.agents}, {a: dict(info) for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.episode is None or not self.agents:
            raise ConfigError("the episode is over (or not started); call reset() before step()")
        if not isinstance(actions, Mapping):
            raise ConfigError(f"actions must be a dict of agent name to action, got {type(actions).__name__}")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ConfigError(f"every agent needs an action each step; missing: {', '.join(missing)}")
        live = list(self.agents)
        reward, terminated, truncated = self.episode.step([actions[a] for a in live])
        obs, info = self.episode.observation(), self.episode.info()
        out = (
            {a: obs for a in live},
            {a: reward for a in live},
            {a: terminated for a in live},
            {a: truncated for a in live},
            {a: dict(info) for a in live},
        )
        if terminated or truncated:
            self.agents = []
        return out

    def render(self) -> str | np.ndarray | None:
        return _render(self.render_mode, self.episode)

    def close(self) -> None:
        pass


def aec_env(**kwargs: Any) -> Any:
    """The AEC (turn-by-turn) form of :class:`MapfParallelEnv` via ``pettingzoo.utils.parallel_to_aec``.

    Raises:
        ConfigError: A bad argument value (as :class:`MapfParallelEnv`); an unknown keyword name is
            Python's own ``TypeError``.
    """
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(MapfParallelEnv(**kwargs))
