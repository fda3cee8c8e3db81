"""A new run that starts from the stages another run already finished with the same inputs.

The arms of a curriculum comparison differ only in their engineer, and the engineer is first asked after
round 0: every arm of a seed computes the same warm-start, the same starting validation and the same
round 0 (configuration, data, training, validation), to the byte. ``envengineer run EXP --share-from
DIR`` copies those finished stages from the run in ``DIR`` instead of computing them again, which takes
a third of a three-round arm's time off every arm after the first.

What may be shared is decided from the two resolved experiments, never guessed: they must be equal in
every field but ``name``, ``description`` and ``engineer``; anything else that differs (a seed, the
learner, the validation set) is refused with the fields named. The source's stages are read through the
check ``--resume`` makes (:class:`envengineer.loop.integrity.Verifier`): a damaged file stops the copy.
Each copied file is hashed again in the new run and must match what the source's ledger recorded. The
new run's ledger lines say where each stage came from (``info.shared_from``) and keep the source's
seconds, the time the stage took to compute; the source's checkpoint paths are rewritten to the copies.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.integrity import Verifier, check_experiment
from envengineer.loop.rundir import EXPERIMENT, VALIDATION_SET, DamagedRunError, LedgerEntry, RunDir

log = logging.getLogger(__name__)

#: Fields an experiment may differ in and still share the stages before the engineer is first asked.
ENGINEER_FIELDS: frozenset[str] = frozenset({"name", "description", "engineer"})
#: The stages computed before the engineer is first asked, in the order a run runs them.
BEFORE_ENGINEER: tuple[tuple[int | None, str], ...] = (
    (None, "warm_start"),
    (None, "start_validation"),
    (0, "config"),
    (0, "data"),
    (0, "train"),
    (0, "validation"),
)


def sharing_differences(mine: Experiment, theirs: Experiment) -> list[str]:
    """The fields, outside :data:`ENGINEER_FIELDS`, in which two experiments differ (dotted, sorted).

    >>> a = Experiment.model_validate({"name": "a", "policy": "scripted:optimal"})
    >>> b = a.model_copy(update={"name": "b", "engineer": a.engineer.model_copy(update={"kind": "fixed"})})
    >>> sharing_differences(a, b), sharing_differences(a, b.model_copy(update={"rounds": 4}))
    ([], ['rounds'])
    """
    a = mine.model_dump(mode="json", exclude=set(ENGINEER_FIELDS))
    b = theirs.model_dump(mode="json", exclude=set(ENGINEER_FIELDS))
    return sorted(_differing(a, b))


def share_stages(
    source: str | Path,
    target: str | Path,
    experiment: Experiment,
    planned: Sequence[tuple[int | None, str]],
) -> list[str]:
    """Copy into the new run ``target`` (its ``experiment.yaml`` written, no stage finished) the stages of
    :data:`BEFORE_ENGINEER` among ``planned`` (the new run's stages, in order) that the run in ``source``
    finished; returns their labels.

    Stops at the first of them the source has not finished (the rest run as usual).

    Raises:
        ConfigError: ``source`` holds no run, its experiment differs outside :data:`ENGINEER_FIELDS`, or
            ``target`` already finished a stage.
        DamagedRunError: a file the source's ledger vouches for is damaged, or a copy differs from it.
    """
    src, dst = check_source(source, experiment), RunDir(target)
    if src.root.resolve() == dst.root.resolve():
        raise ConfigError(f"--share-from {src.root}: that is the new run's own directory")
    if dst.done():
        raise ConfigError(f"{dst.root}: stages already finished; --share-from starts a new run only")
    finished, verifier = src.done(), Verifier(src)
    shared: list[str] = []
    for key in [k for k in planned if k in BEFORE_ENGINEER]:
        entry = finished.get(key)
        if entry is None:
            break
        verifier.usable(entry)  # raises DamagedRunError: nothing damaged is copied
        if not shared:
            _copy(src, dst, VALIDATION_SET)
        for rel in entry.paths.values():
            _copy(src, dst, rel)
        _record(src, dst, entry)
        shared.append(key[1] if key[0] is None else f"round {key[0]} {key[1]}")
    if shared:
        log.info("%s: %s taken from %s", dst.root, ", ".join(shared), src.root)
    return shared


def check_source(source: str | Path, experiment: Experiment) -> RunDir:
    """The run in ``source``, if ``experiment`` may share its stages before the engineer.

    Raises:
        ConfigError: no run there, or its experiment differs outside :data:`ENGINEER_FIELDS`.
        DamagedRunError: its ``experiment.yaml`` changed since its stages ran.
    """
    src = RunDir(source)
    if not src.experiment_path.is_file():
        raise ConfigError(f"--share-from {src.root}: no run there ({EXPERIMENT} missing)")
    check_experiment(src)
    differs = sharing_differences(experiment, load_experiment(src.experiment_path))
    if differs:
        shown = ", ".join(differs[:6]) + (" ..." if len(differs) > 6 else "")
        raise ConfigError(
            f"--share-from {src.root}: its experiment differs from this one in {shown}; only runs that "
            f"differ in {', '.join(sorted(ENGINEER_FIELDS))} compute the same stages before the engineer"
        )
    return src


def _record(src: RunDir, dst: RunDir, entry: LedgerEntry) -> None:
    info = {k: _moved(src, dst, v) for k, v in entry.info.items()}
    info["shared_from"] = str(src.root)
    new = dst.record(
        entry.round,
        entry.stage,
        seconds=entry.seconds,
        paths={k: dst.abs(v) for k, v in entry.paths.items()},
        info=info,
        status=entry.status,
    )
    mine = {k: v for k, v in new.hashes.items() if k != EXPERIMENT}
    theirs = {k: v for k, v in entry.hashes.items() if k != EXPERIMENT}
    if mine != theirs:  # a copy that is not what the source vouched for must not be trusted
        raise DamagedRunError(
            f"{dst.root}: the copy of stage {entry.stage!r} from {src.root} differs from what its ledger "
            "recorded; remove the new run and start it again"
        )


def _copy(src: RunDir, dst: RunDir, rel: str) -> None:
    a, b = src.abs(rel), dst.abs(rel)
    if Path(rel).is_absolute() or not a.exists():
        return  # outside the run (a cached warm-start): both runs read the same place
    b.parent.mkdir(parents=True, exist_ok=True)
    if a.is_dir():
        shutil.copytree(a, b, dirs_exist_ok=True)
    else:
        shutil.copy2(a, b)


def _moved(src: RunDir, dst: RunDir, value: Any) -> Any:
    """A path into the source run (a checkpoint) as the same path into the new run; anything else as is."""
    if not isinstance(value, str) or not value:
        return value
    path = Path(value)
    try:
        rel = path.resolve().relative_to(src.root.resolve())
    except (ValueError, OSError):
        return value
    return str(dst.root / rel) if path.exists() else value


def _differing(a: Any, b: Any, prefix: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for key in set(a) | set(b):
            out |= _differing(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return set() if a == b else {prefix.rstrip(".")}
