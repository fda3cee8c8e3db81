"""The training-round configuration (SPEC §3), its legal space, random draws and projection.

One pydantic model is the single source of truth: its bounds validate files, its JSON schema is what the
environment engineer sees, and :func:`project` maps any proposal onto the legal space while recording what
it changed.

Decisions the spec leaves open (also in ``docs/testbed.md``):

* The engineer controls the per-size knobs only. ``num_agents`` and ``num_samples`` are set by the
  experiment; a proposal that changes them is projected back and the change recorded.
* Size keys may be written ``3``, ``"3"`` or ``"3x3"``.
* A value that is not a finite number (a string, NaN, null) is taken from the previous configuration.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envengineer.errors import ConfigError

log = logging.getLogger(__name__)

MIN_SIZE, MAX_SIZE = 3, 10
HOLE_RATIO_MAX = 0.5
#: Largest data_ratio before renormalisation (a proposal's larger values are clipped to it).
DATA_RATIO_MAX = 1000.0
#: Bounds of the experiment-owned fields (a proposal may not change them; they are checked all the same).
NUM_AGENTS_RANGE = (1, 16)
NUM_SAMPLES_RANGE = (1, 1_000_000)


def _no_bool(v: Any) -> Any:
    """pydantic's lax mode reads ``true`` as 1; a boolean is never a count or a ratio here."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got the boolean {str(v).lower()}")
    return v


class SizeConfig(BaseModel):
    """The generator's knobs for one map size."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    data_ratio: float = Field(
        ge=0.0,
        le=DATA_RATIO_MAX,
        description="Share of the round's samples drawn at this size (>= 0; renormalised).",
    )
    hole_ratio: float = Field(
        ge=0.0, le=HOLE_RATIO_MAX, description="Share of the grid's cells that are holes, in [0, 0.5]."
    )
    wait_ratio: float = Field(
        ge=0.0,
        le=1.0,
        description="Share of the instances at this size whose optimum needs a wait, in [0, 1].",
    )

    _numbers = field_validator("data_ratio", "hole_ratio", "wait_ratio", mode="before")(
        lambda cls, v: _no_bool(v)
    )


class RoundConfig(BaseModel):
    """One training round's data distribution: per map size, how much data, how many holes, how many waits.

    >>> cfg = RoundConfig.model_validate({"num_samples": 10, "sizes": {"3": {
    ...     "data_ratio": 1, "hole_ratio": 0.2, "wait_ratio": 0.5}}})
    >>> cfg.allocation()
    {3: (10, 5)}
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sizes: dict[int, SizeConfig] = Field(
        description="Per map size n (an n x n grid): data_ratio, hole_ratio and wait_ratio.", min_length=1
    )
    num_agents: int = Field(
        default=2,
        ge=NUM_AGENTS_RANGE[0],
        le=NUM_AGENTS_RANGE[1],
        description="Agents per instance (2 in the paper's training).",
    )
    num_samples: int = Field(
        default=4000,
        ge=NUM_SAMPLES_RANGE[0],
        le=NUM_SAMPLES_RANGE[1],
        description="Instances generated for the round (4,000 in the paper).",
    )

    _counts = field_validator("num_agents", "num_samples", mode="before")(lambda cls, v: _no_bool(v))

    @field_validator("sizes", mode="before")
    @classmethod
    def _size_keys(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {size_key(k): val for k, val in v.items()}
        return v

    @model_validator(mode="after")
    def _check(self) -> RoundConfig:
        for n in self.sizes:
            if n < 2:
                raise ValueError(f"map size {n} is too small; use sizes of 2 or more")
        if sum(s.data_ratio for s in self.sizes.values()) <= 0:
            raise ValueError("all data_ratio values are 0; give at least one size a positive share")
        return self

    def normalised_ratios(self) -> dict[int, float]:
        total = sum(s.data_ratio for s in self.sizes.values())
        return {n: s.data_ratio / total for n, s in sorted(self.sizes.items())}

    def allocation(self) -> dict[int, tuple[int, int]]:
        """Exact ``(count, wait_count)`` per size, by largest-remainder rounding (SPEC §3)."""
        ratios = self.normalised_ratios()
        counts = largest_remainder(list(ratios.values()), self.num_samples)
        out = {}
        for (n, _), count in zip(ratios.items(), counts, strict=True):
            w = self.sizes[n].wait_ratio
            out[n] = (count, largest_remainder([w, 1.0 - w], count)[0])
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(), sort_keys=False)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.model_dump_json(indent=2) if path.suffix == ".json" else self.to_yaml()
        path.write_text(text, encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> RoundConfig:
        """Read a YAML or JSON round configuration, with a one-line error naming the bad field."""
        path = Path(path)
        data = read_yaml(path, "configuration")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {format_validation_error(exc)}") from None


@dataclass(frozen=True)
class ConfigSpace:
    """The legal configuration space: which map sizes exist and the bounds of every knob."""

    sizes: tuple[int, ...] = tuple(range(MIN_SIZE, MAX_SIZE + 1))
    hole_ratio_max: float = HOLE_RATIO_MAX

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 2:
            raise ConfigError(f"the configuration space needs sizes of 2 or more, got {self.sizes}")


DEFAULT_SPACE = ConfigSpace()


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Split ``total`` into integer parts proportional to ``weights`` (ties go to the earlier part).

    >>> largest_remainder([0.5, 0.25, 0.25], 10)
    [5, 3, 2]
    """
    s = float(sum(weights))
    if total < 0 or s <= 0:
        raise ConfigError(f"cannot split {total} by weights {list(weights)}")
    quotas = [w / s * total for w in weights]
    parts = [math.floor(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def random_config(
    rng: np.random.Generator,
    space: ConfigSpace = DEFAULT_SPACE,
    *,
    num_agents: int = 2,
    num_samples: int = 4000,
) -> RoundConfig:
    """A configuration drawn uniformly from the legal space (data ratios from a flat Dirichlet).

    Values are rounded to 3 decimals so that the configuration reads well in prompts and logs.

    >>> random_config(np.random.default_rng(0)).num_samples
    4000
    """
    ratios = rng.dirichlet(np.ones(len(space.sizes)))
    sizes = {
        n: {
            "data_ratio": round(float(r), 3),
            "hole_ratio": round(float(rng.uniform(0.0, space.hole_ratio_max)), 3),
            "wait_ratio": round(float(rng.uniform(0.0, 1.0)), 3),
        }
        for n, r in zip(space.sizes, ratios, strict=True)
    }
    if all(s["data_ratio"] == 0 for s in sizes.values()):
        for s in sizes.values():
            s["data_ratio"] = 1.0
    return RoundConfig.model_validate({"sizes": sizes, "num_agents": num_agents, "num_samples": num_samples})


def round0_config(seed: int, space: ConfigSpace = DEFAULT_SPACE, **kw: int) -> RoundConfig:
    """The paper's "random default" for round 0: a random legal configuration from a fixed seed."""
    return random_config(np.random.default_rng(np.random.SeedSequence((seed, 0xC0F16))), space, **kw)


# -- projection -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Projection:
    """What :func:`project` did: the raw proposal, the legal configuration, and each change in words."""

    raw: Any
    config: RoundConfig
    changes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"raw": self.raw, "config": self.config.model_dump(mode="json"), "changes": list(self.changes)}


def project(proposal: Any, previous: RoundConfig, space: ConfigSpace = DEFAULT_SPACE) -> Projection:
    """Map any proposal onto the legal space (SPEC §3), recording every change; never raises.

    Unknown sizes and keys are dropped, missing sizes and unusable values (text, NaN, ``true``, nested
    objects) come from ``previous``, numbers are clipped to their bounds (``data_ratio`` to [0, 1000]
    before renormalising) and data ratios renormalised (all zero gives the uniform split). Any JSON or
    YAML value is accepted: huge integers, ``1e308``, strings and nested junk give a legal configuration
    and a recorded change, never an exception.

    >>> prev = round0_config(0)
    >>> p = project({"sizes": {"3": {"data_ratio": 2, "hole_ratio": 0.9, "wait_ratio": -1}}}, prev)
    >>> p.config.sizes[3].hole_ratio, p.config.sizes[3].wait_ratio
    (0.5, 0.0)
    >>> huge = {"sizes": {"3": {"data_ratio": 10**400, "hole_ratio": 0.1, "wait_ratio": 0.5}}}
    >>> project(huge, prev).changes[0]
    'size 3: data_ratio <an integer of about 400 digits> clipped to 1000.0'
    """
    try:
        return _project(proposal, previous, space)
    except Exception as exc:  # the last guard: a proposal is data and must never stop a run
        log.warning("projection failed (%s); kept the previous configuration", type(exc).__name__)
        return Projection(
            raw=proposal,
            config=previous,
            changes=(
                f"the proposal could not be projected ({type(exc).__name__}); "
                "kept the previous configuration",
            ),
        )


def _project(proposal: Any, previous: RoundConfig, space: ConfigSpace) -> Projection:
    changes: list[str] = []
    proposed = _proposed_sizes(_size_mapping(proposal, previous, changes), space, changes)
    bounds = {
        "data_ratio": (0.0, DATA_RATIO_MAX),
        "hole_ratio": (0.0, space.hole_ratio_max),
        "wait_ratio": (0.0, 1.0),
    }
    raw_sizes: dict[int, dict[str, float]] = {}
    for n in space.sizes:
        prev = previous.sizes.get(n)
        prev_vals = prev.model_dump() if prev else {"data_ratio": 0.0, "hole_ratio": 0.0, "wait_ratio": 0.0}
        if n not in proposed:
            changes.append(f"size {n} missing; filled from the previous configuration")
            raw_sizes[n] = dict(prev_vals)
        else:
            raw_sizes[n] = _project_size(n, proposed[n], prev_vals, bounds, changes)
    _normalise_data_ratios(raw_sizes, changes)
    config = RoundConfig.model_validate(
        {"sizes": raw_sizes, "num_agents": previous.num_agents, "num_samples": previous.num_samples}
    )
    return Projection(raw=proposal, config=config, changes=tuple(changes))


def _size_mapping(proposal: Any, previous: RoundConfig, changes: list[str]) -> Mapping[Any, Any]:
    """The per-size part of a proposal: its ``sizes`` when it has the full shape, else the proposal."""
    body = proposal
    if isinstance(body, Mapping) and "sizes" in body:
        for key in ("num_agents", "num_samples"):
            if key in body and _number(body[key]) != getattr(previous, key):
                changes.append(
                    f"{key} is set by the experiment: kept {getattr(previous, key)}, "
                    f"ignored {short_repr(body[key])}"
                )
        for key in body:
            if key not in ("sizes", "num_agents", "num_samples"):
                changes.append(f"dropped unknown top-level key {short_repr(key)}")
        body = body["sizes"]
    if not isinstance(body, Mapping):
        changes.append(
            f"proposal has no per-size mapping (got {type(body).__name__}); kept the previous sizes"
        )
        body = {}
    return body


def _proposed_sizes(body: Mapping[Any, Any], space: ConfigSpace, changes: list[str]) -> dict[int, Any]:
    """The entries of ``body`` keyed by a legal size (unknown, illegal and repeated sizes dropped)."""
    proposed: dict[int, Any] = {}
    for key, value in body.items():
        try:
            n = size_key(key)
        except (ValueError, TypeError):
            changes.append(f"dropped unknown size {short_repr(key)}")
            continue
        if n not in space.sizes:
            changes.append(f"dropped size {short_repr(n)}, outside the legal sizes {list(space.sizes)}")
            continue
        if n in proposed:
            changes.append(f"size {n} given twice; kept the first")
            continue
        proposed[n] = value
    return proposed


def _project_size(
    n: int,
    entry: Any,
    prev_vals: dict[str, float],
    bounds: dict[str, tuple[float, float]],
    changes: list[str],
) -> dict[str, float]:
    """One size's ratios: numbers clipped to ``bounds``, anything else kept from ``prev_vals``."""
    if not isinstance(entry, Mapping):
        changes.append(f"size {n}: expected an object with data/hole/wait ratios; kept the previous values")
        return dict(prev_vals)
    for key in entry:
        if key not in bounds:
            changes.append(f"size {n}: dropped unknown key {short_repr(key)}")
    vals = {}
    for key, (lo, hi) in bounds.items():
        v = _number(entry.get(key))
        if v is None:
            got = short_repr(entry.get(key))
            changes.append(f"size {n}: {key} {got} is not a number; kept {prev_vals[key]}")
            v = prev_vals[key]
        elif v < lo or v > hi:
            clipped = min(max(v, lo), hi)
            changes.append(f"size {n}: {key} {short_repr(entry.get(key))} clipped to {clipped}")
            v = clipped
        vals[key] = v
    return vals


def _normalise_data_ratios(raw_sizes: dict[int, dict[str, float]], changes: list[str]) -> None:
    """Make the data ratios sum to 1 (uniform when they are all 0), in place."""
    total = sum(v["data_ratio"] for v in raw_sizes.values())
    if total <= 0:
        changes.append("all data ratios are 0; used the uniform split")
        for v in raw_sizes.values():
            v["data_ratio"] = 1.0 / len(raw_sizes)
    elif abs(total - 1.0) > 1e-9:
        changes.append(f"data ratios summed to {total:.6g}; renormalised to 1")
        for v in raw_sizes.values():
            v["data_ratio"] /= total


def validate_proposal(proposal: Any, space: ConfigSpace = DEFAULT_SPACE) -> list[str]:
    """Strict check of every field's type and range: what projection will change, empty when nothing.

    A proposal is ``{"sizes": {SIZE: {data_ratio, hole_ratio, wait_ratio}}}`` (optionally with
    ``num_agents`` and ``num_samples``, which the experiment sets) or the per-size mapping alone. Missing
    sizes are allowed (projection fills them); unknown keys, unknown sizes, values that are not finite
    numbers (booleans included) and values out of range are each one message naming the field, the value
    and the allowed range. Never raises, whatever the value; messages quote at most 40 characters of it.

    >>> validate_proposal({"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.9, "wait_ratio": 0}}})
    ['sizes.3.hole_ratio: 0.9 is out of range; use a number in [0, 0.5]']
    """
    try:
        return _validate(proposal, space)
    except Exception as exc:  # a proposal is data: any failure is a message, not an exception
        return [f"the configuration could not be checked ({type(exc).__name__}); write plain numbers"]


def _validate(proposal: Any, space: ConfigSpace) -> list[str]:
    if not isinstance(proposal, Mapping):
        return [f"the configuration must be a JSON object, got {type(proposal).__name__}"]
    errors: list[str] = []
    if "sizes" in proposal:
        for key in proposal:
            if key not in ("sizes", "num_agents", "num_samples"):
                errors.append(
                    f"{short_repr(key)}: unknown key; use sizes (num_agents and num_samples are optional)"
                )
        for key, (lo, hi) in (("num_agents", NUM_AGENTS_RANGE), ("num_samples", NUM_SAMPLES_RANGE)):
            if key in proposal:
                v = proposal[key]
                if isinstance(v, bool) or not isinstance(v, int):
                    errors.append(f"{key}: {short_repr(v)} is not an integer; use an integer in [{lo}, {hi}]")
                elif not lo <= v <= hi:
                    errors.append(f"{key}: {short_repr(v)} is out of range; use an integer in [{lo}, {hi}]")
        sizes, where = proposal["sizes"], "sizes"
    else:
        sizes, where = proposal, "sizes"
    if not isinstance(sizes, Mapping):
        return [*errors, f"{where}: expected an object keyed by map size, got {type(sizes).__name__}"]
    if not sizes:
        errors.append(f"{where}: no map size given; give at least 1 item")
    bounds = {
        "data_ratio": (0.0, DATA_RATIO_MAX),
        "hole_ratio": (0.0, space.hole_ratio_max),
        "wait_ratio": (0.0, 1.0),
    }
    seen: set[int] = set()
    for key, entry in sizes.items():
        try:
            n = size_key(key)
        except (ValueError, TypeError):
            errors.append(f"{where}.{short_repr(key)}: not a map size; write 6 or '6x6'")
            continue
        if n not in space.sizes:
            errors.append(
                f"{where}.{short_repr(key)}: size {short_repr(n)} is not a legal size; "
                f"use one of {list(space.sizes)}"
            )
            continue
        if n in seen:
            errors.append(f"{where}.{short_repr(key)}: size {n} given twice")
            continue
        seen.add(n)
        if not isinstance(entry, Mapping):
            errors.append(
                f"{where}.{n}: expected an object with data_ratio, hole_ratio and wait_ratio, "
                f"got {type(entry).__name__}"
            )
            continue
        for field in entry:
            if field not in bounds:
                errors.append(
                    f"{where}.{n}.{short_repr(field)}: unknown key; use data_ratio, hole_ratio, wait_ratio"
                )
        for field, (lo, hi) in bounds.items():
            if field not in entry:
                errors.append(f"{where}.{n}.{field}: missing; give a number in [{lo:g}, {hi:g}]")
                continue
            v = _number(entry[field])
            if v is None:
                errors.append(
                    f"{where}.{n}.{field}: {short_repr(entry[field])} is not a finite number; "
                    f"use a number in [{lo:g}, {hi:g}]"
                )
            elif not lo <= v <= hi:
                errors.append(
                    f"{where}.{n}.{field}: {short_repr(entry[field])} is out of range; "
                    f"use a number in [{lo:g}, {hi:g}]"
                )
    if seen and not errors and all(_number(sizes[k]["data_ratio"]) == 0 for k in sizes):
        errors.append(f"{where}: all data_ratio values are 0; give at least one size a positive share")
    return errors


def read_yaml(path: Path, what: str) -> Any:
    """A YAML (or JSON) file's content; an unreadable file or bad YAML is a one-line :class:`ConfigError`.

    Aliases are refused (:func:`envengineer.yamlio.load_yaml`): a few hundred bytes of aliases expand
    into an exponentially large document.
    """
    from envengineer.yamlio import YAMLDataError, load_yaml

    try:
        return load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read the {what} (not UTF-8 at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    except YAMLDataError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot read the {what} (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer longer than Python's 4,300-digit limit
        raise ConfigError(f"{path}: cannot read the {what} ({' '.join(str(exc).split())[:120]})") from None


def format_validation_error(exc: ValidationError, max_errors: int = 3) -> str:
    """One readable line per pydantic error: ``sizes.3.hole_ratio: ... (got 0.9)``."""
    parts = []
    for err in exc.errors()[:max_errors]:
        loc = ".".join(str(x) for x in err["loc"]) or "configuration"
        parts.append(f"{loc}: {err['msg']} (got {json.dumps(err.get('input'), default=str)[:60]})")
    more = len(exc.errors()) - max_errors
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


_SIZE_RE = re.compile(r"^\s*(\d+)\s*(?:[xX×]\s*(\d+))?\s*$")


def size_key(key: Any) -> int:
    """A map size from a key (``6``, ``"6"``, ``"6x6"``); ``ValueError`` for anything else."""
    if isinstance(key, bool):
        raise ValueError(key)
    if isinstance(key, int):
        return key
    if not isinstance(key, str) or len(key) > 20:
        raise ValueError("not a map size")
    m = _SIZE_RE.match(key)
    if not m or (m.group(2) and m.group(2) != m.group(1)):
        raise ValueError(f"{key!r} is not a map size; write 6 or '6x6'")
    return int(m.group(1))


def _number(v: Any) -> float | None:
    """A finite float from an int or float (a numeric string counts too); None for anything else."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, str):
        if len(v) > 40:
            return None
    elif not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond float range: a (far) out-of-range number
        return sys.float_info.max if v > 0 else -sys.float_info.max
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def short_repr(v: Any, limit: int = 40) -> str:
    """``repr`` of a value, cut to ``limit`` characters; never raises (huge ints, odd objects)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        return f"<an integer of about {int(v.bit_length() * 0.30103)} digits>"
    try:
        text = repr(v)
    except Exception:  # a value that cannot print itself is described by its type
        return f"<{type(v).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"
