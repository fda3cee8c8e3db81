"""The ``threshold`` baseline: a per-size difficulty ladder moved by validation success.

A classic learning-progress curriculum over the same knobs the LLM engineers control:

* **Difficulty.** A ladder of (hole_ratio, wait_ratio) levels, easiest first, sets where sizes move.
  When a size's validation success rate is above ``upper`` it moves ``step`` levels up, below
  ``lower`` ``step`` levels down, otherwise it stays and keeps its own hole and wait ratio exactly,
  on the ladder or off it (a random round-0 configuration is off it). One level up is the next ladder
  level at or above the size's current values in each knob and harder in at least one, so a size that
  moves up never loses holes or waits; one level down is, the other way round, the next level at or
  below in each knob. Where no level lies above (below), the size takes the top (bottom) level's value
  in each knob where that is harder (easier) and keeps its own in the other. The knobs are read from the
  current configuration, so the curriculum keeps no state between rounds and a resumed run decides
  exactly as an uninterrupted one.
* **Data.** Data shifts toward the frontier: a size's target weight is ``floor + 4 p (1 - p)`` (p the
  success rate as a fraction; largest at p = 0.5, where learning progress is fastest; an unvalidated size
  counts as p = 0.5); the new data ratio is ``momentum * previous + (1 - momentum) * target`` (both
  normalised), so the distribution moves gradually. With ``weighting="failures"`` the target weight is
  ``floor + (1 - p)`` instead: a supervised learner (``training.learner: sft``) learns from the solver's
  plan of every board, whether the policy solves it or not, so its data goes where the policy still
  fails rather than where a sampled group would vary (p (1 - p) gives a size the policy never solves no
  weight at all, though its plans are the ones it has most to learn from).
* **Levels kept.** With ``keep_levels=True`` no size moves on the ladder: each keeps the hole and wait
  ratio it has, and only the data moves. This separates the two changes the ladder makes (where the
  data goes, and how hard each size's boards are). With ``keep_data=True`` it is the other way round:
  every size keeps its data ratio exactly as the configuration gives it (not normalised), and only the
  levels move. With ``upper=0.2, lower=0.0, keep_data=True`` (the ``climb`` experiment) no size's hole or
  wait ratio ever decreases.

Success rates are pooled over the validation set's agent counts (weighted by instance counts).

The ``learnability`` baseline (:class:`LearnabilityCurriculum`) moves the same ladder and weights data the
same way, but reads the policy's *sampled* success during the round's training (``metrics.json
["sampled"]``, per map size) instead of its greedy validation success: the share of a size's sampled plans
that were valid is the ``p`` whose ``p (1 - p)`` is largest where GRPO groups have reward variance, so data
goes where the gradient is ("No Regrets", Rutherford et al. 2024; online difficulty filtering, Bae et al.
2025). A size that was not trained on last round falls back to its validation rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from envengineer.engineer.context import per_size_rates
from envengineer.engineer.decision import EngineerDecision, EngineerRequest
from envengineer.errors import ConfigError
from envengineer.mapf.config import HOLE_RATIO_MAX, ConfigSpace, RoundConfig

#: A (hole_ratio, wait_ratio) pair.
Knobs = tuple[float, float]

#: (hole_ratio, wait_ratio) per level, easiest first.
DEFAULT_LEVELS: tuple[tuple[float, float], ...] = (
    (0.0, 0.0),
    (0.1, 0.2),
    (0.2, 0.4),
    (0.3, 0.6),
    (0.4, 0.8),
    (0.5, 1.0),
)


def clip_ladder(levels: tuple[Knobs, ...], hole_max: float = HOLE_RATIO_MAX) -> tuple[Knobs, ...]:
    """The levels as a space whose hole ratio is at most ``hole_max`` applies them."""
    return tuple((min(h, hole_max), w) for h, w in levels)


def ladder_level(knobs: Knobs, ladder: tuple[Knobs, ...]) -> int | None:
    """The level of ``ladder`` a (hole_ratio, wait_ratio) pair is on (the first such), or None off it."""
    return next((i for i, level in enumerate(ladder) if level == knobs), None)


def ladder_move(
    knobs: Knobs, direction: Literal["up", "down"], ladder: tuple[Knobs, ...], step: int = 1
) -> Knobs:
    """A (hole_ratio, wait_ratio) pair moved ``step`` levels up or down ``ladder``, from on or off it.

    Up, each step is the next ladder level at or above the pair in each knob and unequal to it, so no
    knob decreases (off the ladder, one step up is the first level with both ratios at or above the
    pair's); where no level lies above, each knob takes the larger of its value and the top level's
    (unchanged: the pair is at the end of the ladder). Down is the mirror image. Shared by the
    curriculum rules and the LLM engineer's moves answer (:mod:`envengineer.engineer.moves`).

    >>> ladder_move((0.25, 0.5), "up", DEFAULT_LEVELS), ladder_move((0.25, 0.5), "down", DEFAULT_LEVELS)
    ((0.3, 0.6), (0.2, 0.4))
    """
    if direction == "up":
        beyond = [lv for lv in ladder if lv[0] >= knobs[0] and lv[1] >= knobs[1] and lv != knobs]
        end, pick = ladder[-1], max
    else:
        beyond = [lv for lv in ladder[::-1] if lv[0] <= knobs[0] and lv[1] <= knobs[1] and lv != knobs]
        end, pick = ladder[0], min
    distinct = list(dict.fromkeys(beyond))  # a level repeated, or equal once clipped, is one step
    if distinct:
        return distinct[min(step, len(distinct)) - 1]
    return (pick(knobs[0], end[0]), pick(knobs[1], end[1]))


def _where(move: Mapping[str, Any]) -> str:
    """A size's move for the rationale: ``level 2 -> 3``, or its knobs where one end is off the ladder."""
    if move["level"] is not None and move["new_level"] is not None:
        return f"level {move['level']} -> {move['new_level']}"
    ends = [
        f"level {level}" if level is not None else f"holes {h:g}, waits {w:g} (off the ladder)"
        for level, (h, w) in ((move["level"], move["knobs"]), (move["new_level"], move["new_knobs"]))
    ]
    return " -> ".join(ends)


@dataclass(frozen=True)
class ThresholdCurriculum:
    """Per-size difficulty ladder and frontier-weighted data ratios (see the module docstring).

    Attributes:
        upper: Success rate (fraction) above which a size moves up the ladder.
        lower: Success rate (fraction) below which a size moves down the ladder.
        step: Levels moved per round.
        levels: The ladder: (hole_ratio, wait_ratio) pairs, easiest first, each non-decreasing.
        floor: Minimum target weight of a size, so no size drops out of training.
        momentum: Share of the previous data ratios kept (0: jump to the target).
        metric: ``valid`` or ``optimal`` success rate.
        weighting: ``frontier`` (target weight ``floor + 4 p (1 - p)``) or ``failures``
            (``floor + (1 - p)``, for a supervised learner).
        keep_levels: Keep every size's hole and wait ratio as they are (only the data moves).
        keep_data: Keep every size's data ratio as it is (only the levels move).
        name: The engineer's name in records.

    >>> from envengineer.mapf.config import RoundConfig
    >>> cfg = RoundConfig.model_validate(
    ...     {"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}}})
    >>> report = {"table": {"2": {"sizes": {"3": {"n": 10, "valid": 90.0, "optimal": 80.0}}}}}
    >>> cfg2, _ = ThresholdCurriculum().step_config(cfg, report, ConfigSpace(sizes=(3,)))
    >>> cfg2.sizes[3].hole_ratio, cfg2.sizes[3].wait_ratio
    (0.2, 0.4)
    """

    upper: float = 0.6
    lower: float = 0.2
    step: int = 1
    levels: tuple[tuple[float, float], ...] = DEFAULT_LEVELS
    floor: float = 0.05
    momentum: float = 0.5
    metric: Literal["valid", "optimal"] = "valid"
    weighting: Literal["frontier", "failures"] = "frontier"
    keep_levels: bool = False
    keep_data: bool = False
    name: str = "threshold"

    baseline = "threshold"  # the kind in records (a class attribute, not an option)

    def rates_of(self, request: EngineerRequest) -> dict[int, dict[str, float]] | None:
        """The per-size success rates the ladder reads: the validation report's (None: from the report)."""
        return None

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple((float(h), float(w)) for h, w in self.levels))
        if not (0.0 <= self.lower < self.upper <= 1.0):
            raise ConfigError(
                f"threshold curriculum needs 0 <= lower < upper <= 1 (fractions), got lower="
                f"{self.lower}, upper={self.upper}"
            )
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 1:
            raise ConfigError(f"threshold curriculum step must be an int >= 1, got {self.step!r}")
        if not self.levels:
            raise ConfigError("threshold curriculum needs at least one (hole_ratio, wait_ratio) level")
        for i, (h, w) in enumerate(self.levels):
            if not (0.0 <= h <= 0.5 and 0.0 <= w <= 1.0):
                raise ConfigError(
                    f"level {i} = ({h}, {w}) is out of range; hole_ratio in [0, 0.5], wait_ratio in [0, 1]"
                )
            if i and (h < self.levels[i - 1][0] or w < self.levels[i - 1][1]):
                raise ConfigError(
                    f"levels must be non-decreasing in both hole_ratio and wait_ratio; level {i} "
                    f"{(h, w)} is easier than level {i - 1} {self.levels[i - 1]}"
                )
        if not (math.isfinite(self.floor) and self.floor >= 0):
            raise ConfigError(f"floor must be a finite number >= 0, got {self.floor}")
        if not (0.0 <= self.momentum < 1.0):
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.metric not in ("valid", "optimal"):
            raise ConfigError(f"metric must be 'valid' or 'optimal', got {self.metric!r}")
        if self.weighting not in ("frontier", "failures"):
            raise ConfigError(f"weighting must be 'frontier' or 'failures', got {self.weighting!r}")
        for option in ("keep_levels", "keep_data"):
            if not isinstance(getattr(self, option), bool):
                raise ConfigError(f"{option} must be true or false, got {getattr(self, option)!r}")
        if self.keep_levels and self.keep_data:
            raise ConfigError(
                "keep_levels and keep_data together change nothing; use the engineer kind 'fixed'"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, name: str | None = None) -> ThresholdCurriculum:
        """Build from an experiment file's ``options`` mapping, naming any unknown option."""
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.baseline} option(s) {unknown}; use {sorted(known)}")
        opts = dict(options)
        if "levels" in opts:
            try:
                opts["levels"] = tuple((float(h), float(w)) for h, w in opts["levels"])
            except (TypeError, ValueError):
                raise ConfigError(
                    f"levels must be a list of [hole_ratio, wait_ratio] pairs, got {options['levels']!r:.80}"
                ) from None
        return cls(**opts, name=name or cls.baseline)

    def ladder(self, hole_max: float = HOLE_RATIO_MAX) -> tuple[Knobs, ...]:
        """The levels as a space whose hole ratio is at most ``hole_max`` applies them."""
        return clip_ladder(self.levels, hole_max)

    def level_of(self, knobs: Knobs, hole_max: float = HOLE_RATIO_MAX) -> int | None:
        """The ladder level a (hole_ratio, wait_ratio) pair is on (the first such), or None off the ladder.

        >>> ThresholdCurriculum().level_of((0.2, 0.4)), ThresholdCurriculum().level_of((0.47, 0.386))
        (2, None)
        """
        return ladder_level(knobs, self.ladder(hole_max))

    def moved(
        self, knobs: Knobs, direction: Literal["up", "down"], hole_max: float = HOLE_RATIO_MAX
    ) -> Knobs:
        """A (hole_ratio, wait_ratio) pair moved ``step`` levels up or down, from on or off the ladder.

        :func:`ladder_move` on :meth:`ladder`: no knob decreases going up, none increases going down.

        >>> ThresholdCurriculum().moved((0.115, 0.716), "up")  # off the ladder: the first level above
        (0.4, 0.8)
        >>> ThresholdCurriculum().moved((0.261, 0.598), "down")
        (0.2, 0.4)
        """
        return ladder_move(knobs, direction, self.ladder(hole_max), self.step)

    def step_config(
        self,
        config: RoundConfig,
        report: Mapping[str, Any] | None,
        space: ConfigSpace,
        rates: Mapping[int, Mapping[str, float]] | None = None,
    ) -> tuple[RoundConfig, dict[str, Any]]:
        """The next configuration and, per size, what was read and decided.

        ``rates`` (per size, ``valid``/``optimal`` in percent) replace the report's when given.
        """
        rates = per_size_rates(report) if rates is None else rates
        prev = config.normalised_ratios()
        hole_max = space.hole_ratio_max
        moves: dict[str, Any] = {}
        weights: dict[int, float] = {}
        knobs: dict[int, Knobs] = {}
        for n in sorted(config.sizes):
            cur = (config.sizes[n].hole_ratio, config.sizes[n].wait_ratio)
            rate = rates[n][self.metric] / 100.0 if n in rates else None
            if self.keep_levels:
                move = "kept"
            elif rate is None:
                move = "stay (not validated)"
            elif rate > self.upper:
                move = "up"
            elif rate < self.lower:
                move = "down"
            else:
                move = "stay"
            # a size that stays keeps its own knobs exactly, on the ladder or off it
            knobs[n] = cur
            if move in ("up", "down"):
                knobs[n] = self.moved(cur, "up" if move == "up" else "down", hole_max)
                move += " (at the end of the ladder)" if knobs[n] == cur else ""
            p = 0.5 if rate is None else rate
            weights[n] = self.floor + (1.0 - p if self.weighting == "failures" else 4.0 * p * (1.0 - p))
            moves[str(n)] = {
                "rate": None if rate is None else round(rate, 4),
                "level": self.level_of(cur, hole_max),
                "new_level": self.level_of(knobs[n], hole_max),
                "knobs": list(cur),
                "new_knobs": list(knobs[n]),
                "move": move,
                "weight": round(weights[n], 4),
            }
        total = sum(weights.values())
        target = {n: (w / total if total > 0 else 1.0 / len(weights)) for n, w in weights.items()}
        sizes = {}
        for n in sorted(config.sizes):
            ratio = self.momentum * prev[n] + (1.0 - self.momentum) * target[n]
            sizes[n] = {
                "data_ratio": config.sizes[n].data_ratio if self.keep_data else round(ratio, 3),
                "hole_ratio": knobs[n][0],
                "wait_ratio": knobs[n][1],
            }
        if sum(s["data_ratio"] for s in sizes.values()) <= 0:
            for s in sizes.values():
                s["data_ratio"] = 1.0
        cfg = RoundConfig.model_validate(
            {"sizes": sizes, "num_agents": config.num_agents, "num_samples": config.num_samples}
        )
        return cfg, moves

    def propose(self, request: EngineerRequest) -> EngineerDecision:
        """Move each size's ladder level by its validation success and shift data toward the frontier."""
        t0 = time.perf_counter()
        cfg, moves = self.step_config(request.config, request.report, request.space, self.rates_of(request))
        summary = "; ".join(
            f"{n}x{n}: {self.metric} "
            + ("n/a" if m["rate"] is None else f"{100 * m['rate']:.1f}%")
            + f", {_where(m)}"
            for n, m in moves.items()
        )
        return EngineerDecision(
            engineer=self.name,
            round_index=request.round_index,
            config=cfg,
            previous=request.config,
            raw_proposal=cfg.model_dump(mode="json"),
            rationale=summary,
            details={
                "baseline": self.baseline,
                "upper": self.upper,
                "lower": self.lower,
                "step": self.step,
                "metric": self.metric,
                "weighting": self.weighting,
                "keep_levels": self.keep_levels,
                "keep_data": self.keep_data,
                "floor": self.floor,
                "momentum": self.momentum,
                "levels": [list(lv) for lv in self.levels],
                "sizes": moves,
            },
            seconds=time.perf_counter() - t0,
        )


@dataclass(frozen=True)
class LearnabilityCurriculum(ThresholdCurriculum):
    """The threshold ladder driven by the policy's sampled success in training (see the module docstring).

    The defaults differ from ``threshold``'s: a size moves up when more than 80 % of its sampled plans
    are valid and down below 20 %, the band where GRPO groups still have reward variance.

    >>> from envengineer.mapf.config import RoundConfig
    >>> from envengineer.engineer.decision import EngineerRequest
    >>> cfg = RoundConfig.model_validate({"sizes": {
    ...     "3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2},
    ...     "6": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}}})
    >>> sampled = {"3": {"valid": 0.9, "optimal": 0.9}, "6": {"valid": 0.5, "optimal": 0.4}}
    >>> d = LearnabilityCurriculum(momentum=0.0).propose(EngineerRequest(0, cfg, None, sampled=sampled))
    >>> d.config.sizes[3].hole_ratio, d.config.sizes[6].hole_ratio  # 3x3 too easy: one level up
    (0.2, 0.1)
    >>> d.config.sizes[6].data_ratio > d.config.sizes[3].data_ratio  # p(1-p): 0.25 against 0.09
    True
    """

    upper: float = 0.8
    lower: float = 0.2
    name: str = "learnability"

    baseline = "learnability"

    def rates_of(self, request: EngineerRequest) -> dict[int, dict[str, float]]:
        """Sampled valid/optimal rates per size (percent), validation rates where a size was not sampled."""
        rates = dict(per_size_rates(request.report))
        for key, stats in (request.sampled or {}).items():
            try:
                n = int(key)
                valid, optimal = float(stats["valid"]), float(stats["optimal"])
            except (KeyError, TypeError, ValueError):
                continue  # a damaged entry reads as not sampled
            if stats.get("completions", 1) and math.isfinite(valid) and math.isfinite(optimal):
                rates[n] = {"valid": 100.0 * valid, "optimal": 100.0 * optimal}
        return rates
