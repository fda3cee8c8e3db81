"""verl: a ``compute_score`` reward function and the Parquet layout verl's reward manager reads.

verl (``pip install verl``) is not part of the ``integrations`` extra: verl 0.9.1 pins
``transformers<5.11`` and pulls ray, tensordict and torchdata, which conflicts with the training stack
(transformers 5.24) and does not install within CI's time on a 2-core CPU machine. This module needs
only ``datasets`` and follows verl's documented contract, which the tests check on our side:

* **Data.** One Parquet file per split with the columns verl's ``RLHFDataset`` and ``RewardManager``
  read: ``data_source`` (which scorer to use), ``prompt`` (chat messages), ``ability``, ``reward_model``
  (``{"style": "rule", "ground_truth": ...}``) and ``extra_info`` (here ``split``, ``index``, ``id`` and
  the instance). ``ground_truth`` is ``Instance.to_json()``: the whole instance with its optima.
* **Reward.** ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``
  returns a float, the testbed's reward of the response. verl passes
  ``custom_reward_function.reward_kwargs`` as keyword arguments, so
  ``+custom_reward_function.reward_kwargs.shape=sparse`` picks another reward shape.

A verl GRPO run on an exported file (docs/integrations.md has the whole command)::

    envengineer export benchmark --format verl -o data/mapf/test.parquet
    python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\
        data.train_files=data/mapf/train.parquet data.val_files=data/mapf/test.parquet \\
        custom_reward_function.path=$(python -m envengineer.integrations.verl) \\
        custom_reward_function.name=compute_score ...
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.integrations import require
from envengineer.mapf.instance import Instance

__all__ = ["ABILITY", "DATA_SOURCE", "VERL_COLUMNS", "compute_score", "to_verl_dataset", "verl_rows"]

#: The ``data_source`` of every row; ``compute_score`` refuses other sources.
DATA_SOURCE = "envengineer/mapf_frozenlake"
#: The ``ability`` column.
ABILITY = "multi_agent_planning"
#: The columns of a verl file, in order.
VERL_COLUMNS: tuple[str, ...] = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def verl_rows(instances: Sequence[Instance], *, split: str, system: bool = True) -> list[dict[str, Any]]:
    """verl's rows for a set of solved instances.

    Raises:
        InstanceFormatError: Not a non-empty list of solved instances. ConfigError: a bad split name.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> row = verl_rows([inst], split="test")[0]
    >>> row["data_source"], row["reward_model"]["style"], row["extra_info"]["id"]
    ('envengineer/mapf_frozenlake', 'rule', 'x')
    """
    from envengineer.integrations.hf_datasets import check_solved, check_split
    from envengineer.mapf.prompt import build_messages

    check_solved(instances)
    check_split(split)
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": build_messages(inst, system=system),
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": inst.to_json()},
            "extra_info": {"split": split, "index": i, "id": inst.id, "instance": inst.to_json()},
        }
        for i, inst in enumerate(instances)
    ]


def to_verl_dataset(instances: Sequence[Instance], *, split: str, system: bool = True) -> Any:
    """The verl rows as a ``datasets.Dataset`` (write it with ``.to_parquet(path)``)."""
    datasets = require("datasets", purpose="exporting a verl dataset")
    return datasets.Dataset.from_list(verl_rows(instances, split=split, system=system), split=split)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    shape: str = "graded",
    **weights: float,
) -> float:
    """The testbed's reward of one response, with verl's ``compute_score`` signature.

    Args:
        data_source: Must be :data:`DATA_SOURCE`.
        solution_str: The decoded response (its ``<answer>`` block is read as by the validator).
        ground_truth: ``Instance.to_json()`` (a dict or an :class:`Instance` also work).
        extra_info: verl's ``extra_info`` of the row (unused).
        shape: Reward shape, ``graded`` (default), ``sparse`` or ``dense``.
        **weights: Overrides of the shape's weights (``make_reward``).

    Returns:
        The reward in ``[0, 1]``; never raises on what a model writes.

    Raises:
        InstanceFormatError: Another data source, or a ground truth that is not a solved instance (text that
            is not JSON, nested too deeply, holding a number too long to read, a malformed instance).
        ConfigError: ``shape`` is not a known shape name, or a weight is unknown or not a number in [0, 1].

    >>> inst = Instance("ex", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
    >>> compute_score(DATA_SOURCE, "<answer>A0: RIGHT RIGHT\\nA1: DOWN LEFT LEFT UP</answer>", inst.to_json())
    1.0
    """
    if data_source != DATA_SOURCE:
        raise InstanceFormatError(
            f"compute_score scores data_source {DATA_SOURCE!r}, got {data_source!r}; "
            "route other sources to their own scorer"
        )
    if not isinstance(shape, str):
        raise ConfigError(f"shape must be a reward shape name such as 'graded', got {shape!r}")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in weights.values()):
        _check_weights(shape, weights)  # raises the ConfigError naming the bad weight
    reward = _reward(shape, tuple(sorted(weights.items())))
    return reward([solution_str], instance=[_ground_truth(ground_truth)])[0]


def _check_weights(shape: str, weights: dict[str, Any]) -> Any:
    from envengineer.mapf.rewards import make_reward

    return make_reward(shape, **weights)  # type: ignore[arg-type]


def _ground_truth(value: Any) -> Any:
    """The ground truth as an :class:`Instance` (or as given, for the reward's own checks)."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return _instance_from_text(value)
    if isinstance(value, dict):
        return Instance.from_dict(value, where="the ground truth")
    return value


@lru_cache(maxsize=2048)
def _instance_from_text(text: str) -> Instance:
    import json

    where = "the ground truth"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceFormatError(f"{where} is not JSON ({exc.msg}); it must be Instance.to_json()") from None
    except RecursionError:
        raise InstanceFormatError(
            f"{where} is JSON nested too deeply; an instance is a flat object"
        ) from None
    except ValueError as exc:  # an integer longer than Python's 4,300-digit limit
        raise InstanceFormatError(f"{where} is not a readable JSON value ({str(exc)[:80]})") from None
    return Instance.from_dict(data, where=where)


@lru_cache(maxsize=16)
def _reward(shape: str, weights: tuple[tuple[str, float], ...]) -> Any:
    from envengineer.mapf.rewards import make_reward

    return make_reward(shape, **dict(weights))  # type: ignore[arg-type]


if __name__ == "__main__":  # `python -m envengineer.integrations.verl` prints the path verl's config needs
    import sys

    sys.stdout.write(__file__ + "\n")
