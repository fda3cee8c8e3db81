"""Per-purpose seeds of a round, drawn from a tuple (never ``base + r``), and the seeds ``--seed`` sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from envengineer.errors import ConfigError

#: The seeds ``run --seed N`` (and each seed of ``--seeds``) sets; ``seeds.config``, the round-0
#: configuration's, stays, so the seeds of an arm share their starting configuration.
SEED_OPTION_KEYS: tuple[str, ...] = ("data", "training", "evaluation")


def round_seed(base: int, purpose: str, r: int) -> int:
    """A 31-bit seed for ``purpose`` in round ``r`` from the tuple ``(base, purpose, r)``, never ``base + r``.

    >>> round_seed(0, "data", 1) != round_seed(0, "data", 0) != round_seed(0, "training", 0)
    True
    """
    code = {
        "data": 1,
        "training": 2,
        "validation": 3,
        "benchmark": 4,
        "engineer": 5,
        "warm_start": 6,
        "start_validation": 7,
        "agents": 8,
    }[purpose]
    return int(np.random.SeedSequence((base, code, r)).generate_state(1)[0] >> 1)


def with_seed(overrides: Mapping[str, Any], seed: int | None, *, option: str = "--seed") -> dict[str, Any]:
    """``overrides`` (``--set``) with the seeds ``option`` (``--seed``, or a sweep's ``--seeds``) sets.

    One seed given two ways is refused rather than one silently winning.

    Raises:
        ConfigError: ``seed`` is negative, or ``overrides`` also sets one of :data:`SEED_OPTION_KEYS`.

    >>> with_seed({"rounds": 1}, 3)
    {'rounds': 1, 'seeds.data': 3, 'seeds.training': 3, 'seeds.evaluation': 3}
    >>> with_seed({"seeds.config": 5}, 3)["seeds.config"]
    5
    """
    out = dict(overrides)
    if seed is None:
        return out
    if seed < 0:
        raise ConfigError(f"{option} must be >= 0, got {seed}")
    whole = out.get("seeds") if isinstance(out.get("seeds"), Mapping) else {}
    for key in SEED_OPTION_KEYS:
        if f"seeds.{key}" in out or key in whole:
            given = out[f"seeds.{key}"] if f"seeds.{key}" in out else whole[key]
            raise ConfigError(
                f"{option} sets seeds.{key} (to {seed}), and so does --set seeds.{key}={str(given)[:40]}; "
                f"give the seed one way: drop --set seeds.{key} or {option}"
            )
    out.update({f"seeds.{key}": seed for key in SEED_OPTION_KEYS})
    return out
