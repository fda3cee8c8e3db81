"""What ``compare`` counts once or refuses (:mod:`envengineer.loop.compare`): a run given twice or copied,
runs of one arm with the same seeds, and arms pooled or paired across different scored sets
(:mod:`envengineer.loop.scored_sets`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.compare_arms import Arm
from envengineer.loop.report import RunRecord, load_run
from envengineer.loop.scored_sets import Pairing, pairing


def unique_runs(dirs: Sequence[Path]) -> tuple[list[RunRecord], list[str]]:
    """Each run once: a directory given twice, a link to one given, or a copy of one (the same ledger
    bytes) is left out with a note. Returns the runs and the notes."""
    from envengineer.loop.rundir import LEDGER, file_digest

    runs: list[RunRecord] = []
    notes: list[str] = []
    seen: dict[Any, Path] = {}
    for d in dirs:
        ledger = d / LEDGER
        keys = [("path", d.resolve())]
        if ledger.is_file():
            keys.append(("content", file_digest(ledger)))
        first = next((seen[k] for k in keys if k in seen), None)
        if first is not None:
            same = "the same directory as" if keys[0] in seen else "a copy of"
            notes.append(f"{d} is {same} {first}: counted once")
            continue
        for k in keys:
            seen[k] = d
        runs.append(load_run(d))
    return runs, notes


def _copy_key(run: RunRecord) -> str | None:
    """What a run and its copy share: the experiment but for its name and description (so its seeds too)
    and every score it holds; None for a run without scores (nothing to tell a copy by)."""
    scores = {
        "benchmark": run.benchmark,
        "start": run.start_validation,
        "rounds": [r.validation for r in run.rounds],
    }
    if run.benchmark is None and not any(r.validation for r in run.rounds):
        return None
    experiment = {k: v for k, v in run.experiment.items() if k not in ("name", "description")}
    return json.dumps([experiment, scores], sort_keys=True, default=str)


def drop_copies(arms: Sequence[Arm]) -> tuple[list[Arm], list[str]]:
    """Each arm without the runs that repeat another of its runs: the same experiment, seeds and scores
    (a copy whose ledger differs, or a rerun of the same seed) is that run again, not another seed, so it
    is left out with a note naming both directories. Runs with the same seeds and other scores stay
    (:func:`shared_seeds` warns about them). Returns the arms and the notes."""
    out: list[Arm] = []
    notes: list[str] = []
    for arm in arms:
        kept: list[RunRecord] = []
        seen: dict[str, RunRecord] = {}
        for r in arm.runs:
            key = _copy_key(r)
            if key is not None and key in seen:
                notes.append(
                    f"arm {arm.name!r}: {r.root} is a copy of {seen[key].root} (the same experiment, seeds "
                    "and scores): counted once"
                )
                continue
            if key is not None:
                seen[key] = r
            kept.append(r)
        out.append(Arm(arm.name, kept))
    return out, notes


def shared_seeds(arms: Sequence[Arm]) -> list[str]:
    """A warning per arm in which two runs have the same seeds (they are one seed counted twice)."""
    out = []
    for arm in arms:
        by_seeds: dict[str, RunRecord] = {}
        for r in arm.runs:
            key = json.dumps(r.experiment.get("seeds"), sort_keys=True, default=str)
            if key in by_seeds:
                out.append(
                    f"arm {arm.name!r}: {by_seeds[key].root} and {r.root} have the same seeds ({key}); "
                    "they are not independent seeds"
                )
            else:
                by_seeds[key] = r
    return out


def checked_pairing(arms: Sequence[Arm], against: str | None, mixed: bool) -> Pairing:
    """The arms' scored sets (:mod:`envengineer.loop.scored_sets`); an arm pooled or compared across
    different sets is refused unless ``mixed``.

    Raises:
        ConfigError: an arm's runs were scored on different sets, or an arm and the ``against`` reference
            were not scored on one identical set, and ``mixed`` is off.
    """
    pair = pairing({a.name: a.runs for a in arms}, against)
    problems = pair.mixtures + [n.split(": its ")[0] for n in pair.unpaired.values()]
    if problems and not mixed:
        raise ConfigError(
            f"{problems[0]}; arms are pooled and paired only on identical sets (ids and boards): compare "
            "runs scored on the same boards, or pass --mixed-arms to show each arm's sets and leave those "
            "differences out"
        )
    return pair
