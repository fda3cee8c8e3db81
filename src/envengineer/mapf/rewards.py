"""TRL-style reward functions for MAPF-FrozenLake: ``f(completions, instance, **kwargs) -> list[float]``.

Each function takes the batch of completions (strings, or TRL's conversational lists of messages) and the
dataset column ``instance`` (``Instance.to_json()`` strings; dicts and :class:`Instance` objects are
accepted too), validates every completion and maps its verdict to a value in ``[0, 1]``. Three shapes:

``graded`` (default)
    ``optimal`` (1.0) for a SoC-optimal plan, ``valid`` (0.6) for a valid plan, ``format`` (0.1) for a
    well-formed answer (checks 1-3 pass: parsed, one sequence per agent, known actions), else 0.
``sparse``
    The paper's style: ``optimal`` (1.0) for a SoC-optimal plan, ``valid`` (0.5) for a valid plan, else 0.
``dense``
    For small models that rarely produce valid plans: a weighted mean of the share of the 8 checks passed
    in order (``checks``, 0.3), the share of agents on their goal at the horizon (``goals``, 0.2), validity
    (``valid``, 0.2) and optimality (``optimal``, 0.3). Weights are relative (divided by their sum), so
    an optimal plan always scores 1.

Weights are overridden by keyword: ``make_reward("graded", format=0.0)``. The functions never raise on
anything a model writes; an unsolved or malformed instance is a caller error and raises.

>>> from envengineer.mapf.instance import Instance
>>> inst = Instance("ex", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), optimal_soc=6,
...                 optimal_makespan=4, shortest_sum=4).to_json()
>>> mapf_reward(["<answer>\\nA0: RIGHT RIGHT\\nA1: DOWN LEFT LEFT UP\\n</answer>",
...              "<answer>\\nA0: RIGHT RIGHT\\nA1: LEFT LEFT\\n</answer>", "no idea"], instance=[inst] * 3)
[1.0, 0.1, 0.0]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.mapf.instance import Instance
from envengineer.mapf.parser import completion_text
from envengineer.mapf.validator import FAILURE_CATEGORIES, Verdict, validate

__all__ = ["DEFAULT_WEIGHTS", "RewardFunction", "RewardShape", "make_reward", "mapf_reward", "score_verdict"]

logger = logging.getLogger(__name__)

RewardShape = Literal["graded", "sparse", "dense"]
SHAPES: tuple[str, ...] = get_args(RewardShape)

#: The default weights of each shape (see the module docstring for their meaning).
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "graded": {"format": 0.1, "valid": 0.6, "optimal": 1.0},
    "sparse": {"valid": 0.5, "optimal": 1.0},
    "dense": {"checks": 0.3, "goals": 0.2, "valid": 0.2, "optimal": 0.3},
}

_FORMAT_CHECKS = 3  # checks 1-3: parse, agents, actions
_NUM_CHECKS = len(FAILURE_CATEGORIES)


def _weights(shape: str, overrides: Mapping[str, Any]) -> dict[str, float]:
    if shape not in DEFAULT_WEIGHTS:
        raise ConfigError(f"unknown reward shape {shape!r}; choose one of {', '.join(SHAPES)}")
    weights = dict(DEFAULT_WEIGHTS[shape])
    for key, value in overrides.items():
        if key not in weights:
            raise ConfigError(
                f"reward shape {shape!r} has no weight {key!r}; its weights are {', '.join(weights)}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"reward weight {key}={value!r} must be a number in [0, 1]")
        weights[key] = float(value)
    if shape == "dense" and sum(weights.values()) <= 0.0:
        raise ConfigError("the dense reward's weights are all zero; give at least one a positive weight")
    return weights


def score_verdict(
    verdict: Verdict, num_agents: int, shape: RewardShape = "graded", **weights: float
) -> float:
    """The reward in ``[0, 1]`` of one verdict under a shape (weights as in :func:`make_reward`).

    Args:
        verdict: The validator's verdict.
        num_agents: Agents of the instance (for the dense shape's share of agents on their goal).
        shape: ``"graded"``, ``"sparse"`` or ``"dense"``.
        **weights: Overrides of the shape's default weights.

    Returns:
        The reward.

    >>> from envengineer.mapf.validator import Verdict
    >>> v = Verdict(False, False, False, "vertex_conflict", None, None, 0, 1, 5, 2)
    >>> score_verdict(v, 2, "graded"), score_verdict(v, 2, "sparse"), score_verdict(v, 2, "dense")
    (0.1, 0.0, 0.3875)
    """
    return _score(verdict, num_agents, shape, _weights(shape, weights))


def _score(verdict: Verdict, num_agents: int, shape: str, w: Mapping[str, float]) -> float:
    if shape == "graded":
        if verdict.optimal:
            return w["optimal"]
        if verdict.valid:
            return w["valid"]
        return w["format"] if verdict.checks_passed >= _FORMAT_CHECKS else 0.0
    if shape == "sparse":
        if verdict.optimal:
            return w["optimal"]
        return w["valid"] if verdict.valid else 0.0
    total = (
        w["checks"] * verdict.checks_passed / _NUM_CHECKS
        + w["goals"] * (verdict.agents_on_goal / num_agents if num_agents else 0.0)
        + w["valid"] * verdict.valid
        + w["optimal"] * verdict.optimal
    )
    return round(min(1.0, max(0.0, total / sum(w.values()))), 6)


@lru_cache(maxsize=2048)
def _instance_from_json(text: str) -> Instance:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceFormatError(
            f"the 'instance' column holds text that is not JSON ({exc.msg}); it must hold Instance.to_json()"
        ) from None
    return Instance.from_dict(data, where="the 'instance' column")


def instance_of(value: Any) -> Instance:
    """The instance a row's ``instance`` column holds (``Instance.to_json()``, a mapping or an instance),
    parsed once per distinct text; a clear ``InstanceFormatError`` for anything else."""
    if isinstance(value, Instance):
        return value
    if isinstance(value, str):
        return _instance_from_json(value)
    if isinstance(value, Mapping):
        return Instance.from_dict(dict(value), where="the 'instance' column")
    raise InstanceFormatError(
        f"the 'instance' column holds a {type(value).__name__}; it must hold Instance.to_json() strings"
    )


class RewardFunction:
    """A reward function of one shape and weights, callable the way TRL's ``GRPOTrainer`` calls it.

    Instances are plain picklable objects with a readable ``__name__`` (``mapf_graded``, ...), which TRL
    uses to name the reward in its logs.

    Args:
        shape: ``"graded"``, ``"sparse"`` or ``"dense"``.
        weights: Overrides of the shape's default weights.
        name: The ``__name__`` (default ``mapf_<shape>``).
    """

    def __init__(self, shape: RewardShape = "graded", weights: Mapping[str, float] | None = None, *,
                 name: str | None = None) -> None:  # fmt: skip
        self.shape = shape
        self.weights = _weights(shape, weights or {})
        self.__name__ = name or f"mapf_{shape}"
        self.__qualname__ = self.__name__

    def __repr__(self) -> str:
        return f"RewardFunction({self.shape!r}, {self.weights!r}, name={self.__name__!r})"

    def score(self, verdict: Verdict, num_agents: int) -> float:
        """The reward of one verdict."""
        return _score(verdict, num_agents, self.shape, self.weights)

    def __call__(self, completions: Sequence[Any], instance: Any = None, **kwargs: Any) -> list[float]:
        """Rewards for a batch of completions.

        Args:
            completions: Strings, or TRL's conversational lists of message dicts.
            instance: The dataset column, aligned with ``completions``: ``Instance.to_json()`` strings
                (dicts or :class:`Instance` objects also work). A single value applies to every completion.
            **kwargs: Other dataset columns and trainer arguments (ignored).

        Returns:
            One reward in ``[0, 1]`` per completion.

        Raises:
            InstanceFormatError: The column is missing or holds a malformed or unsolved instance.
        """
        return [self.score(verdict, inst.num_agents) for inst, verdict in self.judge(completions, instance)]

    def judge(self, completions: Sequence[Any], instance: Any = None) -> list[tuple[Instance, Verdict]]:
        """The instance and the validator's verdict of each completion (what :meth:`__call__` scores).

        Raises:
            InstanceFormatError: as :meth:`__call__`.
        """
        if instance is None:
            raise InstanceFormatError(
                "the reward needs the dataset column 'instance' (Instance.to_json() per row); "
                "build the dataset with envengineer.training.dataset.prompt_rows"
            )
        if isinstance(instance, (str, Mapping, Instance)):
            instance = [instance] * len(completions)
        if len(instance) != len(completions):
            raise InstanceFormatError(
                f"{len(completions)} completions but {len(instance)} values in the 'instance' column"
            )
        judged = []
        for completion, value in zip(completions, instance, strict=True):
            inst = instance_of(value)
            judged.append((inst, validate(inst, completion_text(completion))))
        return judged


def make_reward(shape: RewardShape = "graded", **weights: float) -> Callable[..., list[float]]:
    """A TRL reward function of the given shape; keyword arguments override the shape's weights.

    Args:
        shape: ``"graded"`` (default), ``"sparse"`` or ``"dense"`` (see the module docstring).
        **weights: e.g. ``valid=0.7`` for graded; each in ``[0, 1]``.

    Returns:
        A :class:`RewardFunction` named ``mapf_<shape>``.

    Raises:
        ConfigError: Unknown shape or weight name, or a weight outside ``[0, 1]``.

    >>> make_reward("sparse").__name__
    'mapf_sparse'
    >>> make_reward("graded", format=0.05).weights
    {'format': 0.05, 'valid': 0.6, 'optimal': 1.0}
    """
    return RewardFunction(shape, weights)


_DEFAULT = RewardFunction("graded", name="mapf_reward")


def mapf_reward(completions: Sequence[Any], instance: Any = None, **kwargs: Any) -> list[float]:
    """The default (graded) reward: 1.0 optimal, 0.6 valid, 0.1 well-formed, else 0.

    See :class:`RewardFunction` for the arguments.
    """
    return _DEFAULT(completions, instance, **kwargs)
