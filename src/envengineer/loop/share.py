"""A new run that starts from the stages another run already finished with the same inputs.

The arms of a curriculum comparison differ only in their engineer, and the engineer is first asked after
round 0: arms of a seed run by the same code with the same presets and held-out sets compute the same
warm-start, the same starting validation and the same round 0 (configuration, data, training,
validation). ``envengineer run EXP --share-from DIR`` copies those finished stages from the run in
``DIR`` instead of computing them again, which takes a third of a three-round arm's time off every arm
after the first.

What may be shared is decided from what is recorded, never guessed:

* the two resolved experiments must be equal in every field but ``name``, ``description`` and
  ``engineer``; anything else that differs (a seed, the learner, the validation settings) is refused with
  the fields named;
* the fingerprint under which the source computed those stages (:mod:`envengineer.loop.fingerprint`:
  package version, commit, the presets' contents, the benchmark file's and the validation sets' hashes)
  must be today's; a difference, or a source from before fingerprints, is refused with the fields named
  unless ``--allow-fingerprint-change`` is given, and then the new run's ``fingerprint.json`` records
  the source's fingerprint for the copied lines;
* the source's stages are read through the check ``--resume`` makes
  (:class:`envengineer.loop.integrity.Verifier`), all of them before the new run's folder is written: a
  damaged file refuses the share. Each copied file is hashed again in the new run and must match what the
  source's ledger recorded; a copy that does not is refused, and the new run's files are removed again
  (:func:`start_shared`), so the same command can be run again.

The new run's ledger lines say where each stage came from (``info.shared_from``) and keep the source's
seconds, the time the stage took to compute; the source's checkpoint paths are rewritten to the copies.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.fingerprint import check_share, record_share
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


def start_shared(
    source: str | Path,
    target: str | Path,
    experiment: Experiment,
    planned: Sequence[tuple[int | None, str]],
    start: Callable[[], Any],
    *,
    allow_fingerprint_change: bool = False,
) -> Any:
    """Start the new run in ``target`` with ``start()`` (which writes its ``experiment.yaml``) and copy the
    shared stages into it (:func:`share_stages`); returns what ``start`` returned.

    Everything is checked before ``start`` runs; should the copy still fail, what the new run wrote is
    removed again (what was in ``target`` before stays), so the same command can run once more.

    Raises:
        ConfigError, DamagedRunError: as :func:`share_stages`.
    """
    allow = allow_fingerprint_change
    check_source(source, experiment, planned, target=target, allow_fingerprint_change=allow)
    root = Path(target)
    before = _snapshot(root) if root.exists() else None
    started = start()
    try:
        share_stages(source, target, experiment, planned, allow_fingerprint_change=allow)
    except BaseException:
        _undo(root, before)
        raise
    return started


def share_stages(
    source: str | Path,
    target: str | Path,
    experiment: Experiment,
    planned: Sequence[tuple[int | None, str]],
    *,
    allow_fingerprint_change: bool = False,
) -> list[str]:
    """Copy into the new run ``target`` (its ``experiment.yaml`` written, no stage finished) the stages of
    :data:`BEFORE_ENGINEER` among ``planned`` (the new run's stages, in order) that the run in ``source``
    finished; returns their labels.

    Stops at the first of them the source has not finished (the rest run as usual). When the source's
    fingerprint differs and ``allow_fingerprint_change`` lets it through, the new run's
    ``fingerprint.json`` records it (:func:`envengineer.loop.fingerprint.record_share`).

    Raises:
        ConfigError: as :func:`check_source`, or ``target`` already finished a stage.
        DamagedRunError: a file the source's ledger vouches for is damaged, or a copy differs from it.
    """
    src, note = check_source(
        source, experiment, planned, target=target, allow_fingerprint_change=allow_fingerprint_change
    )
    dst = RunDir(target)
    if src.root.resolve() == dst.root.resolve():
        raise ConfigError(f"--share-from {src.root}: that is the new run's own directory")
    if dst.done():
        raise ConfigError(f"{dst.root}: stages already finished; --share-from starts a new run only")
    shared = copy_stages(src, dst, [k for k in planned if k in BEFORE_ENGINEER])
    if note is not None and shared:
        record_share(dst, note, len(shared))
    if shared:
        log.info("%s: %s taken from %s", dst.root, ", ".join(shared), src.root)
    return shared


def copy_stages(src: RunDir, dst: RunDir, keys: Sequence[tuple[int | None, str]]) -> list[str]:
    """Copy into ``dst`` the stages ``keys`` that the run in ``src`` finished, in order, with their files
    and ledger lines (the validation set with the first); stops at the first one ``src`` has not finished.
    Returns their labels. Shared by ``--share-from`` and branch rounds (:mod:`envengineer.loop.branch`).

    Raises:
        DamagedRunError: a file the source's ledger vouches for is damaged, or a copy differs from it.
    """
    finished, verifier = src.done(), Verifier(src)
    copied: list[str] = []
    for key in keys:
        entry = finished.get(key)
        if entry is None:
            break
        verifier.usable(entry)  # raises DamagedRunError: nothing damaged is copied
        if not copied:
            _copy(src, dst, VALIDATION_SET)
        for rel in entry.paths.values():
            _copy(src, dst, rel)
        _record(src, dst, entry)
        copied.append(key[1] if key[0] is None else f"round {key[0]} {key[1]}")
    return copied


def check_source(
    source: str | Path,
    experiment: Experiment,
    planned: Sequence[tuple[int | None, str]],
    *,
    target: str | Path | None = None,
    allow_fingerprint_change: bool = False,
) -> tuple[RunDir, dict[str, Any] | None]:
    """The run in ``source``, if ``experiment`` (planning ``planned``; its run in ``target``) may share its
    stages before the engineer, and what the new run records of a fingerprint change let through (None:
    no change). Reads every file it would copy, so nothing is written when anything is refused.

    Raises:
        ConfigError: no run there, its experiment differs outside :data:`ENGINEER_FIELDS`, or what computed
            its stages is not what computes this run (:func:`envengineer.loop.fingerprint.check_share`) and
            ``allow_fingerprint_change`` is off.
        DamagedRunError: its ``experiment.yaml``, validation set, ``fingerprint.json`` or a file of a stage
            to copy changed since its stages ran.
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
    lines, finished, verifier = src.entries(), src.done(), Verifier(src)
    verifier.check_validation_set(VALIDATION_SET)  # raises DamagedRunError
    to_copy: list[int] = []
    for key in [k for k in planned if k in BEFORE_ENGINEER]:
        entry = finished.get(key)
        if entry is None:
            break
        verifier.usable(entry)  # raises DamagedRunError: nothing damaged is copied
        to_copy.append(lines.index(entry))
    note = check_share(src, to_copy, experiment, target, allow=allow_fingerprint_change)
    return src, note


def _snapshot(root: Path) -> set[Path]:
    return {root, *root.rglob("*")}


def _undo(root: Path, before: set[Path] | None) -> None:
    """Remove what was written under ``root`` since :func:`_snapshot` gave ``before`` (None: ``root``
    itself was new)."""
    if before is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for path in sorted(_snapshot(root) - before, key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    log.warning("%s: the refused share's files were removed; the folder is as it was", root)


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
