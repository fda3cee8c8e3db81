"""Arms of seeds for :mod:`envengineer.loop.compare`: which runs are one experiment with other seeds
(:func:`group_arms`, :func:`arm_label`), an explicit ``--arm`` (:func:`parse_arm`), and an arm whose runs
are different experiments (:func:`mixed_arms`, naming the fields that differ)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.report import RunRecord
from envengineer.loop.seeds import SEED_OPTION_KEYS

_SEED_SUFFIX = re.compile(r"[-_.+](?:seed|s)?=?\d+$", re.I)
#: Experiment fields that do not make two runs different arms (the seeds are what an arm varies).
ARM_FREE_FIELDS = ("seeds", "name", "description")


def _shared_part(experiment: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment without what an arm may vary: its name, description and the seeds ``--seed`` sets.
    ``seeds.config`` (the round-0 configuration's) stays: runs from other starting configurations are
    other experiments, not seeds of one.

    >>> _shared_part({"name": "a-s1", "rounds": 2, "seeds": {"config": 0, "data": 1}})
    {'rounds': 2, 'seeds': {'config': 0}}
    """
    rest = {k: v for k, v in experiment.items() if k not in ARM_FREE_FIELDS}
    seeds = experiment.get("seeds")
    if isinstance(seeds, Mapping):
        kept = {k: v for k, v in seeds.items() if k not in SEED_OPTION_KEYS}
        if kept:
            rest["seeds"] = kept
    return rest


@dataclass
class Arm:
    """Runs of one experiment that differ only in their seeds."""

    name: str
    runs: list[RunRecord]


def arm_key(experiment: Mapping[str, Any]) -> str:
    """What two runs of one arm share: the experiment without the seeds ``--seed`` sets, name and
    description (:func:`_shared_part`)."""
    return json.dumps(_shared_part(experiment), sort_keys=True, default=str)


def arm_label(names: Sequence[str]) -> str:
    """The arm's name: the runs' common name, without a trailing seed suffix.

    >>> arm_label(["cpu-main-self-s0", "cpu-main-self-s1"]), arm_label(["fixed_seed2"]), arm_label(["v6"])
    ('cpu-main-self', 'fixed', 'v6')
    >>> arm_label(["cpu-a-s0", "cpu-b-s1"])
    'cpu'

    """
    stripped = {_SEED_SUFFIX.sub("", n) or n for n in names}
    if len(stripped) == 1:
        return stripped.pop()
    first, last = min(stripped), max(stripped)  # the common prefix of all is that of these two
    common = next((i for i, (x, y) in enumerate(zip(first, last, strict=False)) if x != y), len(first))
    prefix = first[:common].rstrip("-_.+")
    return prefix or sorted(stripped)[0]


def group_arms(
    runs: Sequence[RunRecord], explicit: Mapping[str, Sequence[str | Path]] | None = None
) -> list[Arm]:
    """Group runs into arms: explicitly by name, else by experiment content without the seeds.

    Raises:
        ConfigError: an explicit arm names a directory that is not among the compared runs.
    """
    arms: list[Arm] = []
    placed: set[int] = set()
    if explicit:
        by_root = {r.root.resolve(): i for i, r in enumerate(runs)}
        for name, dirs in explicit.items():
            members = []
            for d in dirs:
                i = by_root.get(Path(d).resolve())
                if i is None:
                    raise ConfigError(f"arm {name!r}: {d} is not one of the compared run directories")
                if i in placed:
                    raise ConfigError(f"arm {name!r}: {d} is already in another arm")
                placed.add(i)
                members.append(runs[i])
            arms.append(Arm(name, members))
        for i, r in enumerate(runs):
            if i not in placed:
                arms.append(Arm(r.name, [r]))
        return arms
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        groups.setdefault(arm_key(r.experiment), []).append(r)
    labels: dict[str, int] = {}
    for members in groups.values():
        label = arm_label([m.name for m in members])
        labels[label] = labels.get(label, 0) + 1
        arms.append(Arm(label if labels[label] == 1 else f"{label} ({labels[label]})", members))
    return arms


def differing_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The dotted fields in which two experiments differ, leaving out what an arm may vary (seeds, name).

    >>> differing_fields({"rounds": 2, "seeds": {"data": 0}}, {"rounds": 1, "seeds": {"data": 1}})
    ['rounds']
    >>> differing_fields({"seeds": {"config": 0, "data": 0}}, {"seeds": {"config": 3, "data": 1}})
    ['seeds.config']
    """

    def flat(data: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(data, Mapping) and data:
            return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): data}

    fa, fb = (flat(_shared_part(e)) for e in (a, b))
    missing = object()
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k, missing) != fb.get(k, missing))


def mixed_arms(arms: Sequence[Arm]) -> list[str]:
    """One line per arm whose runs are different experiments (not only other seeds), naming the fields."""
    out = []
    for arm in arms:
        if not arm.runs:
            continue
        first = arm.runs[0]
        other = next((r for r in arm.runs[1:] if arm_key(r.experiment) != arm_key(first.experiment)), None)
        if other is not None:
            fields = differing_fields(first.experiment, other.experiment)
            shown = ", ".join(fields[:6]) + (" ..." if len(fields) > 6 else "")
            out.append(
                f"arm {arm.name!r}: {first.root} and {other.root} are different experiments "
                f"({shown} differ), not seeds of one"
            )
    return out


def parse_arm(text: str) -> tuple[str, list[Path]]:
    """``NAME=DIR,DIR,...`` (the ``--arm`` option) -> ``(NAME, [DIR, ...])``.

    >>> parse_arm("fixed=runs/f0,runs/f1")
    ('fixed', [PosixPath('runs/f0'), PosixPath('runs/f1')])
    """
    name, sep, dirs = text.partition("=")
    paths = [Path(d.strip()) for d in dirs.split(",") if d.strip()]
    if not sep or not name.strip() or not paths:
        raise ConfigError(f"--arm {text!r} must look like NAME=DIR,DIR,... (e.g. fixed=runs/f-s0,runs/f-s1)")
    return name.strip(), paths
