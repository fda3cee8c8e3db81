"""A trust region on proposals: no knob moves further than a bound in one round.

A weak engineer can move every knob to its extreme in one step (all data on 10x10, wait ratio 1.0
everywhere) and wreck a run that was learning. With a trust region, the projected proposal is pulled back
toward the configuration the last round trained on:

* ``hole_ratio`` and ``wait_ratio`` of each size are clipped to ``previous +- bound``;
* the (normalised) data ratios move along the proposed direction by the largest common step that keeps
  every size within ``previous +- data_ratio``: ``new = previous + s * (proposed - previous)`` with one
  ``s`` in ``[0, 1]``, so the ratios still sum to 1 and their direction is the engineer's.

What was pulled back is recorded like the projection's changes. Off unless an experiment asks for it (the
paper's files do not).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envengineer.mapf.config import RoundConfig


class TrustRegion(BaseModel):
    """The largest move of each knob in one round (``None``: that knob is not bounded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_ratio: float | None = Field(
        default=0.2, gt=0.0, le=1.0, description="Largest change of a size's normalised data ratio."
    )
    hole_ratio: float | None = Field(default=0.1, gt=0.0, le=0.5, description="Largest hole-ratio change.")
    wait_ratio: float | None = Field(default=0.25, gt=0.0, le=1.0, description="Largest wait-ratio change.")


def apply_trust_region(
    previous: RoundConfig, proposed: RoundConfig, region: TrustRegion
) -> tuple[RoundConfig, list[dict[str, Any]]]:
    """``proposed`` pulled back into ``region`` around ``previous``, and one record per pulled-back value.

    >>> prev = RoundConfig.model_validate({"sizes": {
    ...     "3": {"data_ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.5},
    ...     "4": {"data_ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.5}}})
    >>> prop = RoundConfig.model_validate({"sizes": {
    ...     "3": {"data_ratio": 0.0, "hole_ratio": 0.5, "wait_ratio": 1.0},
    ...     "4": {"data_ratio": 1.0, "hole_ratio": 0.1, "wait_ratio": 0.5}}})
    >>> cfg, changes = apply_trust_region(prev, prop, TrustRegion())
    >>> [(n, s.data_ratio, s.hole_ratio, s.wait_ratio) for n, s in cfg.sizes.items()]
    [(3, 0.3, 0.2, 0.75), (4, 0.7, 0.1, 0.5)]
    >>> [c["knob"] for c in changes]
    ['data_ratio', 'data_ratio', 'hole_ratio', 'wait_ratio']
    """
    old, new = previous.normalised_ratios(), proposed.normalised_ratios()
    sizes = sorted(proposed.sizes)
    step = 1.0
    if region.data_ratio is not None:
        for n in sizes:
            delta = abs(new[n] - old.get(n, 0.0))
            if delta > region.data_ratio:
                step = min(step, region.data_ratio / delta)
    changes: list[dict[str, Any]] = []
    out: dict[int, dict[str, float]] = {}
    for n in sizes:
        sc, before = proposed.sizes[n], previous.sizes.get(n)
        ratio = old.get(n, 0.0) + step * (new[n] - old.get(n, 0.0))
        values = {"data_ratio": round(ratio, 6), "hole_ratio": sc.hole_ratio, "wait_ratio": sc.wait_ratio}
        if step < 1.0:
            changes.append(_change(n, "data_ratio", round(new[n], 6), values["data_ratio"]))
        for knob in ("hole_ratio", "wait_ratio"):
            bound = getattr(region, knob)
            if bound is None or before is None:
                continue
            lo, hi = getattr(before, knob) - bound, getattr(before, knob) + bound
            clipped = round(min(max(values[knob], lo), hi), 6)
            if clipped != values[knob]:
                changes.append(_change(n, knob, values[knob], clipped))
                values[knob] = clipped
        out[n] = values
    changes.sort(key=lambda c: (c["knob"] != "data_ratio", c["knob"], c["size"]))
    config = RoundConfig.model_validate(
        {"sizes": out, "num_agents": proposed.num_agents, "num_samples": proposed.num_samples}
    )
    return config, changes


def _change(size: int, knob: str, proposed: float, applied: float) -> dict[str, Any]:
    return {"size": size, "knob": knob, "proposed": proposed, "applied": applied, "reason": "trust region"}
