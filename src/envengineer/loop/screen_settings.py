"""``engineer.screen``: several proposals per round, screened by a probe of the current policy.

The settings as an experiment file writes them; :mod:`envengineer.loop.stages.screen` runs the screen.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Engineer kinds whose proposals differ from one sampling seed to another (the others propose one
#: configuration whatever the seed, so K of them would be K copies).
SAMPLING_KINDS = ("self", "base", "openai", "random")


class ScreenSettings(BaseModel):
    """Ask the engineer ``proposals`` times in each round after round 0 and keep the proposal whose boards
    the current policy finds most learnable: ``sum over sizes of share x p (1 - p)`` on ``boards`` probe
    boards generated from it, ``p`` the size's valid rate (docs/engineer.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    proposals: int = Field(
        default=4,
        ge=2,
        le=32,
        description="Proposals asked of the engineer per round, each with its own sampling seed.",
    )
    boards: int = Field(
        default=48,
        ge=4,
        le=4096,
        description="Probe boards generated from each proposal and answered by the current checkpoint "
        "(the screen costs proposals x boards answers per round).",
    )


def screen_problem(kind: str, screen: ScreenSettings | None) -> str | None:
    """Why ``screen`` cannot apply to an engineer of ``kind``, or None.

    >>> screen_problem("random", ScreenSettings()) is None, screen_problem("fixed", None) is None
    (True, True)
    >>> screen_problem("fixed", ScreenSettings()).split(";")[0]
    'engineer.screen needs an engineer that samples (self, base, openai, random)'
    """
    if screen is None or kind in SAMPLING_KINDS:
        return None
    return (
        f"engineer.screen needs an engineer that samples ({', '.join(SAMPLING_KINDS)}); kind {kind!r} "
        "proposes the same configuration whatever the seed: drop engineer.screen or change engineer.kind"
    )
