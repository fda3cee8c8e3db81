"""What computed a run's stages: code, presets and held-out sets, recorded in ``fingerprint.json``.

A run's experiment file says what to compute; its fingerprint says what computed it. The fingerprint
holds:

* ``package_version`` — ``envengineer.__version__``;
* ``commit`` — the git commit of the checkout the package is imported from, read from ``.git`` without
  running git (``None`` when the package is not imported from a checkout: an installed wheel); edits not
  committed are not seen;
* ``presets`` — per preset the experiment reads (``training.preset`` unless the learner is ``teach`` or
  nothing trains, ``warm_start.preset`` when a warm-start runs), the SHA-256 of the preset as resolved:
  every key, defaults included, so an edited preset file and a changed default both show;
* ``benchmark`` — the benchmark's version (or ``benchmark_path``) and the SHA-256 of its file;
* ``validation_set`` — the SHA-256 of the run's ``validation_set.jsonl`` where it exists.

A new run writes ``fingerprint.json`` when it starts (:func:`write_start`). ``--share-from`` compares the
fingerprint under which the source computed the stages it would copy with today's, validation sets
included (:func:`check_share`); ``--resume`` compares the run's latest fingerprint with today's before
any stage runs again (:func:`check_resume`; the validation set is the ledger's to vouch for,
:mod:`envengineer.loop.integrity`). A field known on one side only (a commit outside a checkout, a
validation set not built yet) is not compared. A difference is refused with one line naming the fields,
unless the run is started or resumed with ``--allow-fingerprint-change``; then the file records the
change. A run from before fingerprints has an unknown one: ``--share-from`` refuses it without the flag,
``--resume`` logs a warning and records today's fingerprint from that point on.

The file's ``events`` say which fingerprint computed which ledger lines: each event holds the number of
ledger lines (``ledger_lines``) when it began and the fingerprint in force from then on (``None``:
unknown); a ledger line is governed by the last event that began at or before it (:func:`governing`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import VALIDATION_SET, DamagedRunError, RunDir, atomic_write_json, file_digest

log = logging.getLogger(__name__)

#: The file in the run directory.
FINGERPRINT = "fingerprint.json"
#: The fields of a fingerprint, in the order messages name them.
FIELDS: tuple[str, ...] = ("package_version", "commit", "presets", "benchmark", "validation_set")
#: Fields compared only where both sides know them.
WHERE_KNOWN: frozenset[str] = frozenset({"commit", "validation_set"})
#: The command-line flag that lets a difference through (the run records it).
ALLOW_FLAG = "--allow-fingerprint-change"

Fingerprint = dict[str, Any]


# -- what computes a run today ----------------------------------------------------------------------------
def current(exp: Experiment, root: str | Path | None = None) -> Fingerprint:
    """Today's fingerprint of ``exp`` (``root``: the run directory whose validation set counts, if any)."""
    from envengineer import __version__

    validation = Path(root) / VALIDATION_SET if root is not None else None
    return {
        "package_version": __version__,
        "commit": git_commit(),
        "presets": {
            section: _preset_digest(name, kind) for section, (name, kind) in used_presets(exp).items()
        },
        "benchmark": _benchmark(exp),
        "validation_set": file_digest(validation)
        if validation is not None and validation.is_file()
        else None,
    }


def used_presets(exp: Experiment) -> dict[str, tuple[str, str]]:
    """The presets ``exp`` reads, ``{section: (name or path, kind)}`` (the ones preflight checks).

    >>> used_presets(Experiment.model_validate({"name": "a", "policy": "scripted:optimal"}))
    {}
    """
    out: dict[str, tuple[str, str]] = {}
    if exp.trains and exp.rounds > 0 and exp.training.learner != "teach":
        out["training.preset"] = (exp.training.preset, exp.training.preset_kind)
    if exp.warm_start.enabled and not exp.scripted:
        out["warm_start.preset"] = (exp.warm_start.preset, "sft")
    return out


def _preset_digest(name: str, kind: str) -> str:
    try:
        from envengineer.training.presets import load_preset

        preset = load_preset(name, kind)  # type: ignore[arg-type]
    except (ConfigError, ImportError) as exc:  # preflight refuses it; here the message stands in
        return f"unreadable: {str(exc)[:120]}"
    text = json.dumps(preset.model_dump(mode="json"), sort_keys=True)
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def _benchmark(exp: Experiment) -> dict[str, Any]:
    ev = exp.evaluation
    if ev.benchmark_path:
        path, where = Path(ev.benchmark_path), {"path": str(ev.benchmark_path)}
    else:
        from envengineer.mapf.benchmark import benchmark_path

        path, where = benchmark_path(ev.benchmark_version), {"version": ev.benchmark_version}
    return {**where, "sha256": file_digest(path) if path.is_file() else None}


def git_commit() -> str | None:
    """The commit of the git checkout the package is imported from (``src/envengineer`` in it), read from
    ``.git`` without running git; None when it is not imported from a checkout or ``.git`` is unreadable.
    """
    import envengineer

    package = Path(envengineer.__file__).resolve().parent
    if package.parent.name != "src":
        return None
    root = package.parent.parent
    try:
        git = root / ".git"
        if git.is_file():  # a worktree: "gitdir: PATH"
            text = git.read_text(encoding="utf-8").strip()
            git = (root / text.removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return _sha(head)
        ref = head.removeprefix("ref:").strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return _sha((base / ref).read_text(encoding="utf-8"))
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                if line.endswith(f" {ref}"):
                    return _sha(line.split()[0])
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _sha(text: str) -> str | None:
    text = text.strip()
    return text if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text) else None


# -- comparing -----------------------------------------------------------------------------------------------
def differences(before: Mapping[str, Any], now: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """The fields (dotted) in which two fingerprints differ; a field of :data:`WHERE_KNOWN` that one side
    does not know is not compared.

    >>> a = {"package_version": "1", "commit": None, "presets": {"training.preset": "sha256:1"}}
    >>> differences(a, {**a, "commit": "ab"}), differences(a, {**a, "presets": {"training.preset": "x"}})
    ([], ['presets.training.preset'])
    """
    out: list[str] = []
    for name in FIELDS:
        a, b = before.get(name), now.get(name)
        if name in skip or (name in WHERE_KNOWN and (a is None or b is None)):
            continue
        out += _differing(a, b, name)
    return out


def _differing(a: Any, b: Any, prefix: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for key in sorted(set(a) | set(b))
            for d in _differing(a.get(key), b.get(key), f"{prefix}.{key}")
        ]
    return [] if a == b else [prefix]


def describe(names: Sequence[str], before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """The differing fields, short values shown: ``commit (1a2b3c4d5e -> 9f8e7d6c5b), presets.x``."""
    parts = []
    for name in names:
        a, b = _value(before, name), _value(now, name)
        if isinstance(a, (str, type(None))) and isinstance(b, (str, type(None))):
            parts.append(f"{name} ({_short(a)} -> {_short(b)})")
        else:
            parts.append(name)
    return ", ".join(parts)


def _value(fp: Mapping[str, Any], dotted: str) -> Any:
    head, _, rest = dotted.partition(".")
    value = fp.get(head)
    return value.get(rest) if rest and isinstance(value, dict) else value


def _short(v: str | None) -> str:
    if v is None:
        return "none"
    return v.removeprefix("sha256:")[:10]


# -- the file ------------------------------------------------------------------------------------------------
def read_record(rd: RunDir) -> dict[str, Any] | None:
    """The run's ``fingerprint.json``, or None when it has none (a run from before fingerprints).

    Raises:
        DamagedRunError: the file is not JSON or not what :func:`write_start` writes.
    """
    path = rd.root / FINGERPRINT
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list) or not events or not all(_is_event(e) for e in events):
        raise DamagedRunError(
            f"{path}: not a fingerprint record (edited or damaged); restore it, or remove it to treat the "
            "run as one of unknown fingerprint"
        )
    return data


def _is_event(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and type(e.get("ledger_lines")) is int
        and (e.get("fingerprint") is None or isinstance(e.get("fingerprint"), dict))
    )


def latest(record: Mapping[str, Any]) -> Fingerprint | None:
    """The fingerprint in force now: the last event's."""
    return record["events"][-1]["fingerprint"]


def governing(record: Mapping[str, Any] | None, line: int) -> Fingerprint | None:
    """The fingerprint that computed ledger line ``line`` (0-based), None when unknown."""
    found = None
    for event in (record or {}).get("events", []):
        if event["ledger_lines"] <= line:
            found = event["fingerprint"]
    return found


def _event(kind: str, rd: RunDir, fingerprint: Fingerprint | None, **more: Any) -> dict[str, Any]:
    # no wall-clock time: runs computed alike keep equal files (the ledger's lines hold the times)
    lines = len(rd.entries()) if rd.ledger_path.exists() else 0
    return {"event": kind, "ledger_lines": lines, "fingerprint": fingerprint, **more}


def _append(rd: RunDir, record: dict[str, Any] | None, *events: dict[str, Any]) -> None:
    data = dict(record or {})
    data["events"] = [*data.get("events", []), *events]
    atomic_write_json(rd.root / FINGERPRINT, data)


def write_start(rd: RunDir, exp: Experiment) -> Fingerprint:
    """Write a new run's ``fingerprint.json``: today's fingerprint, in force from its first stage on."""
    now = current(exp, rd.root)
    _append(rd, None, _event("start", rd, now))
    return now


def check_resume(
    rd: RunDir, exp: Experiment, planned: Sequence[tuple[int | None, str]], *, allow: bool = False
) -> None:
    """Before a resumed run runs a stage: its latest fingerprint against today's (the validation set is the
    ledger's to check). Nothing is compared when every planned stage is finished.

    Raises:
        ConfigError: they differ and ``allow`` is off.
        DamagedRunError: ``fingerprint.json`` is damaged.
    """
    done = rd.done()
    if all(key in done for key in planned):
        return
    record, now = read_record(rd), current(exp, rd.root)
    if record is None:
        log.warning(
            "%s: no %s (a run from before fingerprints): what computed its %d finished stages is unknown; "
            "today's fingerprint is recorded for the stages from now on", rd.root, FINGERPRINT, len(done),
        )  # fmt: skip
        _append(rd, None, _event("resume", rd, now, unknown_before=True))
        return
    before = latest(record) or {}
    changed = differences(before, now, skip=("validation_set",))
    if not changed:
        return
    said = describe(changed, before, now)
    if not allow:
        raise ConfigError(
            f"{rd.root}: what computes its stages changed since they ran: {said}; resume with the code "
            f"and presets it ran with, or pass {ALLOW_FLAG} to go on (the run records the change in "
            f"{FINGERPRINT})"
        )
    log.warning(
        "%s: resuming under another fingerprint (%s), as %s allows; recorded", rd.root, said, ALLOW_FLAG
    )
    _append(rd, record, _event("resume", rd, now, changed=changed, allowed=True))


def check_share(
    src: RunDir,
    lines: Sequence[int],
    exp: Experiment,
    target: str | Path | None,
    *,
    allow: bool = False,
    option: str = "--share-from",
) -> dict[str, Any] | None:
    """Whether the stages of ``src`` at ledger lines ``lines`` were computed under today's fingerprint of
    ``exp`` (``target``: the new run, whose validation set counts if it has one); ``option`` names the
    command's option in messages (``--share-from``, or ``branch`` for a branch round's source).

    Returns None when they were, else what the new run records (:func:`record_share`): the source's
    fingerprint (None: unknown) and the fields that differ.

    Raises:
        ConfigError: they were not (or it is unknown) and ``allow`` is off.
        DamagedRunError: the source's ``fingerprint.json`` is damaged.
    """
    if not lines:
        return None  # nothing to copy, nothing to compare
    record, now = read_record(src), current(exp, target)
    theirs = [governing(record, line) for line in lines]
    if any(fp is None for fp in theirs):
        if not allow:
            raise ConfigError(
                f"{option} {src.root}: what computed its stages is unknown (no {FINGERPRINT}: a run from "
                f"before fingerprints); compute them anew ({_anew(option)}), or pass {ALLOW_FLAG} to use "
                "them anyway (the new run records it)"
            )
        return {"source": str(src.root), "fingerprint": None, "changed": None}
    source_validation = (
        file_digest(src.root / VALIDATION_SET) if (src.root / VALIDATION_SET).is_file() else None
    )
    changed: list[str] = []
    for fp in theirs:
        fp = {**fp, "validation_set": source_validation}  # type: ignore[dict-item]
        changed += [c for c in differences(fp, now) if c not in changed]
    if not changed:
        return None
    said = describe(changed, {**theirs[0], "validation_set": source_validation}, now)  # type: ignore[dict-item]
    if not allow:
        raise ConfigError(
            f"{option} {src.root}: what computed its stages differs from what computes this run in "
            f"{said}; start from a run made with this code and these presets, or pass {ALLOW_FLAG} to use "
            "them anyway (the new run records it)"
        )
    log.warning(
        "%s: sharing stages computed under another fingerprint (%s), as %s allows", src.root, said, ALLOW_FLAG
    )
    return {"source": str(src.root), "fingerprint": theirs[0], "changed": changed}


def _anew(option: str) -> str:
    return "drop --share-from" if option == "--share-from" else "run the source again with this code"


def record_share(rd: RunDir, note: Mapping[str, Any], shared: int) -> None:
    """Record in the new run that its first ``shared`` ledger lines were computed under the source's
    fingerprint (``note`` from :func:`check_share`), today's from then on."""
    record = read_record(rd)
    now = latest(record) if record else None
    first = {"event": "share", "ledger_lines": 0, **note}
    _append(rd, record, first, _event("continue", rd, now, after_share=shared, allowed=True))
