"""The run directory: the experiment's lab notebook, written atomically, with an append-only ledger.

Layout (``docs/loop.md`` has the full description)::

    RUN/
      experiment.yaml              the resolved experiment (every default written out)
      ledger.jsonl                 append-only: one line per finished stage
      round_00/
        config.applied.yaml        the configuration this round trained on
        proposal.raw.json          what the engineer wrote (round 0: the random default's seed)
        projection.json            raw proposal, projected configuration, what projection changed
        engineer/                  prompt, responses, rationale, attempts (rounds > 0, LLM engineers)
        dataset/manifest.jsonl     one line per training instance: id, seed tuple, board hash, size, ...
        train/metrics.json         training metrics, steps, seconds and the checkpoint path
        validation/responses.jsonl the validation answers (the evaluation resumes this file)
        validation/scores.json     ScoreReport.to_json()
      benchmark/scores.json, benchmark/table.md, benchmark/responses.jsonl
      report.md, figures/*.png     written by ``envengineer report``

Every file is written to a temporary name and moved into place with :func:`os.replace`, so a reader (or
a resumed run) sees either the old content or the new one, never half a file; what is written is valid
UTF-8 and holds no secret of the process (:mod:`envengineer.sanitize`). A stage is finished when
its ledger line exists; its files are always written before that line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envengineer.errors import ConfigError
from envengineer.sanitize import replace_surrogates, safe_text, scrub

log = logging.getLogger(__name__)

#: Stages of one round, in order. ``config`` decides the round's configuration (the engineer's proposal
#: for rounds > 0), ``data`` generates the training instances, ``train`` runs one GRPO round,
#: ``validation`` evaluates the round's checkpoint.
ROUND_STAGES: tuple[str, ...] = ("config", "data", "train", "validation")
#: Stages after the last round.
FINAL_STAGES: tuple[str, ...] = ("benchmark",)

LEDGER = "ledger.jsonl"
EXPERIMENT = "experiment.yaml"
VALIDATION_SET = "validation_set.jsonl"
#: Files every stage reads; each ledger line records their hash as it was when the stage finished.
FIXED_INPUTS: tuple[str, ...] = (EXPERIMENT, VALIDATION_SET)
#: Stages outside the rounds (their ledger lines have ``round: null``).
ROUNDLESS_STAGES: tuple[str, ...] = ("warm_start", "start_validation", *FINAL_STAGES)
LEDGER_STATUSES: tuple[str, ...] = ("done", "skipped", "redo")
_LINE_KEYS = ("round", "stage", "status", "time", "seconds", "paths", "info", "hashes")
#: Where each stage writes (:meth:`RunDir.stage_outputs`): the stages outside the rounds one folder each,
#: a round's ``config`` its files in the round folder, the other round stages one sub-folder each.
_ROUNDLESS_FOLDERS = {"warm_start": "warm_start", "start_validation": "start", "benchmark": "benchmark"}
_CONFIG_FILES = ("config.applied.yaml", "projection.json", "proposal.raw.json", "engineer")
_ROUND_FOLDERS = {"data": "dataset", "train": "train", "validation": "validation"}
#: Where outputs no ledger line vouches for are moved before their stages run again.
SET_ASIDE = "set_aside"


class DamagedRunError(ConfigError):
    """A file a resumed run would reuse differs from what the ledger recorded (changed, truncated, gone),
    or the ledger itself holds a line :meth:`RunDir.record` did not write."""


# -- atomic writes ----------------------------------------------------------------------------------------
def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and :func:`os.replace`.

    The text is written as valid UTF-8 with every secret the process holds replaced by ``***``
    (:mod:`envengineer.sanitize`): model text (an engineer's rationale, an echoed key) lands here.

    >>> import tempfile, pathlib
    >>> p = atomic_write_text(pathlib.Path(tempfile.mkdtemp()) / "a" / "x.txt", "hi")
    >>> p.read_text()
    'hi'
    """
    path = Path(path)
    text, replaced = replace_surrogates(scrub(text))
    if replaced:
        log.warning("%s: %d lone surrogates replaced by U+FFFD", path, replaced)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, data: Any) -> Path:
    """JSON with two-space indentation, written atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, default=_json_default) + "\n")


def atomic_write_yaml(path: str | Path, data: Any) -> Path:
    """YAML in insertion order, written atomically."""
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def atomic_write_jsonl(path: str | Path, rows: Iterable[Any]) -> Path:
    """JSON Lines, one compact object per line, written atomically."""
    return atomic_write_text(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in rows))


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_jsonl(path: str | Path, *, skip_torn: bool = False) -> list[Any]:
    """Rows of a JSON Lines file.

    A torn last line (a writer killed mid-line) is skipped with a warning; with ``skip_torn`` any line
    that is not JSON is (the ledger closes a torn line before appending, so it can sit mid-file).
    """
    rows = []
    lines = Path(path).read_bytes().splitlines()  # per line: a torn multi-byte character spoils one line
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if skip_torn or i == len(lines) - 1:
                log.warning("%s:%d: ignoring a torn line (a writer was killed mid-line)", path, i + 1)
                continue
            raise ConfigError(f"{path}:{i + 1}: not valid JSON; the file was edited or is corrupt") from None
    return rows


def _stage_label(entry: LedgerEntry) -> str:
    return f"stage {entry.stage!r}" + (f" of round {entry.round}" if entry.round is not None else "")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


# -- the ledger -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LedgerEntry:
    """One finished stage: which round (``None`` for final stages), which stage, and what it wrote.

    ``hashes`` maps each file it wrote, and the run's fixed inputs, relative to the run directory, to
    ``sha256:<hex>`` (:mod:`envengineer.loop.integrity` checks them on resume). ``status`` is ``done``,
    ``skipped`` or ``redo`` (the stage was found damaged and runs again).
    """

    round: int | None
    stage: str
    status: str
    time: str
    seconds: float
    paths: dict[str, str]
    info: dict[str, Any]
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int | None, str]:
        return (self.round, self.stage)

    @classmethod
    def from_dict(cls, d: Any) -> LedgerEntry:
        """A ledger line read strictly.

        Raises:
            ValueError: the line is not what :meth:`RunDir.record` writes (not an object, a key missing,
                retyped or unknown, a stage that does not exist); the message says which.
        """
        if not isinstance(d, dict):
            raise ValueError(f"not a ledger line (a JSON {type(d).__name__}, not an object)")
        unknown = sorted(set(d) - set(_LINE_KEYS))
        if unknown:
            raise ValueError(f"unknown keys {unknown} (a line of another tool?)")
        missing = [k for k in ("round", "stage", "status") if k not in d]
        if missing:
            raise ValueError(f"keys {missing} missing")
        r, stage, status = d["round"], d["stage"], d["status"]
        if r is not None and (type(r) is not int or r < 0):
            raise ValueError(f"round {r!r} is not a round number (an integer >= 0, or null)")
        stages = ROUND_STAGES if r is not None else ROUNDLESS_STAGES
        if not isinstance(stage, str) or stage not in stages:
            raise ValueError(f"stage {stage!r} is not one of {list(stages)}")
        if status not in LEDGER_STATUSES:
            raise ValueError(f"status {status!r} is not one of {list(LEDGER_STATUSES)}")
        seconds = d.get("seconds", 0.0)
        if type(seconds) not in (int, float) or not 0 <= seconds < float("inf"):
            raise ValueError(f"seconds {seconds!r} is not a duration")
        for key in ("paths", "hashes"):
            value = d.get(key) or {}
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ValueError(f"{key} is not a mapping of names to text")
        if not isinstance(d.get("info") or {}, dict) or not isinstance(d.get("time", ""), str):
            raise ValueError("info is not a mapping or time is not text")
        return cls(
            round=r,
            stage=stage,
            status=status,
            time=d.get("time", ""),
            seconds=float(seconds),
            paths=dict(d.get("paths") or {}),
            info=dict(d.get("info") or {}),
            hashes=dict(d.get("hashes") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "round": self.round,
            "stage": self.stage,
            "status": self.status,
            "time": self.time,
            "seconds": round(self.seconds, 3),
            "paths": self.paths,
            "info": self.info,
        }
        if self.hashes:
            out["hashes"] = self.hashes
        return out


def file_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in blocks.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
    >>> file_digest(p)[:15]
    'sha256:ba7816bf'
    """
    h = hashlib.sha256()
    update_digest(h, path)
    return f"sha256:{h.hexdigest()}"


def update_digest(h: Any, path: str | Path) -> None:
    """Feed a file's bytes to the hash ``h`` (a :mod:`hashlib` object) in 1 MiB blocks."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)


class RunDir:
    """Paths and records of one run; the ledger is the only record of what finished.

    >>> import tempfile
    >>> rd = RunDir(tempfile.mkdtemp())
    >>> rd.round_dir(1).name, rd.is_done(0, "data")
    ('round_01', False)
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # paths ---------------------------------------------------------------------------------------------
    @property
    def ledger_path(self) -> Path:
        return self.root / LEDGER

    @property
    def experiment_path(self) -> Path:
        return self.root / EXPERIMENT

    @property
    def benchmark_dir(self) -> Path:
        return self.root / "benchmark"

    def round_dir(self, r: int) -> Path:
        return self.root / f"round_{r:02d}"

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the run directory when it lies inside it (the ledger stores these)."""
        p = Path(path)
        try:
            return str(p.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(p)

    def abs(self, path: str | Path) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.root / p

    def rounds_present(self) -> list[int]:
        out = []
        for p in sorted(self.root.glob("round_[0-9][0-9]")):
            out.append(int(p.name.split("_")[1]))
        return out

    # what each stage writes -------------------------------------------------------------------------------
    def stage_outputs(self, r: int | None, stage: str) -> list[Path]:
        """The files and folders ``stage`` of round ``r`` wrote that are there (an empty folder is not).

        >>> import tempfile
        >>> rd = RunDir(tempfile.mkdtemp()); _ = atomic_write_text(rd.round_dir(0) / "train" / "x", "")
        >>> [rd.rel(p) for p in rd.stage_outputs(0, "train")], rd.stage_outputs(0, "data")
        (['round_00/train'], [])
        """
        if r is None:
            places = [self.root / _ROUNDLESS_FOLDERS[stage]]
        elif stage == "config":
            places = [self.round_dir(r) / name for name in _CONFIG_FILES]
        else:
            places = [self.round_dir(r) / _ROUND_FOLDERS[stage]]
        return [p for p in places if p.is_file() or (p.is_dir() and any(p.iterdir()))]

    def set_aside(self, paths: Iterable[Path]) -> Path | None:
        """Move ``paths`` (inside the run) to ``set_aside/N/`` under their relative names, N the first free
        number; returns that folder, or None when there was nothing to move. Nothing is deleted: what a
        stage wrote before it is redone stays readable, and no stage can resume from it."""
        paths = [p for p in paths if p.exists()]
        if not paths:
            return None
        n = 1
        while (self.root / SET_ASIDE / str(n)).exists():
            n += 1
        folder = self.root / SET_ASIDE / str(n)
        for p in paths:
            target = folder / self.rel(p)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, target)
        return folder

    # ledger ---------------------------------------------------------------------------------------------
    def read_ledger(self) -> tuple[list[LedgerEntry], list[tuple[int, str]]]:
        """Every valid ledger line in order, and ``(line number, what is wrong)`` for every other line.

        Damage is a line that is not JSON (except an unterminated last line: a writer killed mid-line,
        whose stage did not finish), a line that is not what :meth:`record` writes (:meth:`LedgerEntry.
        from_dict`), a second ``done`` line for a stage without a ``redo`` line between them, and a line
        recorded under another ``experiment.yaml`` than most lines (copied from another run).
        """
        if not self.ledger_path.exists():
            return [], []
        data = self.ledger_path.read_bytes()
        lines = data.splitlines()
        parsed: list[tuple[int, LedgerEntry]] = []
        problems: list[tuple[int, str]] = []
        for i, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                parsed.append((i, LedgerEntry.from_dict(json.loads(raw.decode("utf-8")))))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                if i == len(lines) and not data.endswith(b"\n"):
                    log.warning(
                        "%s:%d: ignoring a torn last line (a writer was killed mid-line)", self.ledger_path, i
                    )
                    continue
                problems.append((i, "torn or not JSON"))
            except ValueError as exc:
                problems.append((i, str(exc)))
        # the run's own experiment hash is the one most lines carry (a copied line is the odd one out)
        votes = Counter(e.hashes[EXPERIMENT] for _, e in parsed if EXPERIMENT in e.hashes).most_common(1)
        own = votes[0][0] if votes else None
        entries: list[LedgerEntry] = []
        seen: dict[tuple[int | None, str], int] = {}
        for i, entry in parsed:
            if entry.hashes.get(EXPERIMENT, own) != own:
                problems.append(
                    (i, f"recorded under another {EXPERIMENT} than the run's (a line of another run?)")
                )
            elif entry.status != "redo" and entry.key in seen:
                problems.append(
                    (i, f"repeats {_stage_label(entry)} (already recorded on line {seen[entry.key]})")
                )
            else:
                if entry.status == "redo":
                    seen.pop(entry.key, None)
                else:
                    seen[entry.key] = i
                entries.append(entry)
        problems.sort()
        return entries, problems

    def entries(self) -> list[LedgerEntry]:
        """Every ledger line, in order (a torn last line from a killed writer is ignored).

        Raises:
            DamagedRunError: a line is damaged (:meth:`read_ledger`); resume with ``--redo-damaged``
                (:meth:`repair_ledger`) or restore the ledger.
        """
        entries, problems = self.read_ledger()
        if problems:
            line, why = problems[0]
            more = f" (and {len(problems) - 1} more damaged lines)" if len(problems) > 1 else ""
            raise DamagedRunError(
                f"{self.ledger_path}:{line}: {why}{more}; restore the ledger, or resume with --redo-damaged "
                "to redo the stages from that line on"
            )
        return entries

    def repair_ledger(self) -> int:
        """Keep the ledger's lines before its first damaged line; the stages after it run again.

        The whole old ledger is kept as ``ledger.jsonl.damaged``. Returns how many valid lines were dropped.
        """
        entries, problems = self.read_ledger()
        if not problems:
            return 0
        first = problems[0][0]
        lines = self.ledger_path.read_bytes().splitlines(keepends=True)
        kept = b"".join(lines[: first - 1])
        backup = self.ledger_path.with_name(LEDGER + ".damaged")
        backup.write_bytes(self.ledger_path.read_bytes())
        atomic_write_text(self.ledger_path, kept.decode("utf-8"))
        dropped = len(entries) - len(self.read_ledger()[0])
        log.warning(
            "%s:%d: %s; kept the %d lines before it (the old ledger is %s); %d finished stages run again",
            self.ledger_path, first, problems[0][1], first - 1, backup.name, dropped,
        )  # fmt: skip
        return dropped

    def done(self) -> dict[tuple[int | None, str], LedgerEntry]:
        """Finished stages by ``(round, stage)``: a ``redo`` line drops the stage until its next record."""
        out: dict[tuple[int | None, str], LedgerEntry] = {}
        for e in self.entries():
            if e.status in ("done", "skipped"):
                out.setdefault(e.key, e)
            elif e.status == "redo":
                out.pop(e.key, None)
        return out

    def is_done(self, r: int | None, stage: str) -> bool:
        return (r, stage) in self.done()

    def record(
        self,
        r: int | None,
        stage: str,
        *,
        seconds: float,
        paths: dict[str, str | Path] | None = None,
        info: dict[str, Any] | None = None,
        status: str = "done",
    ) -> LedgerEntry:
        """Append one line to the ledger (flushed and fsynced before returning).

        The line records the content hash of each of ``paths`` that is a file, and of the run's fixed
        inputs (:data:`FIXED_INPUTS`) that exist.

        Raises:
            ConfigError: the stage is already recorded (a finished stage is never run twice; a ``redo``
                line first releases it).
        """
        if status != "redo" and self.is_done(r, stage):
            raise ConfigError(f"{self.ledger_path}: stage {stage!r} of round {r} is already recorded")
        hashes = {} if status == "redo" else self._hashes(paths or {})
        entry = LedgerEntry(
            round=r,
            stage=stage,
            status=status,
            time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            seconds=float(seconds),
            paths={k: self.rel(v) for k, v in (paths or {}).items()},
            info=dict(info or {}),
            hashes=hashes,
        )
        self.root.mkdir(parents=True, exist_ok=True)
        line = safe_text(json.dumps(entry.to_dict(), default=_json_default)) + "\n"
        self._drop_torn_tail()
        with open(self.ledger_path, "ab") as fh:
            fh.write(line.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        log.debug("ledger: round %s stage %s %s", r, stage, status)
        return entry

    def _drop_torn_tail(self) -> None:
        """A last line without its newline is a writer killed mid-line: move it to ``ledger.torn``."""
        if not self.ledger_path.exists():
            return
        data = self.ledger_path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with open(self.ledger_path.with_name("ledger.torn"), "ab") as fh:
            fh.write(data[cut:] + b"\n")
        with open(self.ledger_path, "r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
        log.warning("%s: a torn last line (a killed writer) moved to ledger.torn", self.ledger_path)

    def _hashes(self, paths: dict[str, str | Path]) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in [*(Path(p) for p in paths.values()), *(self.root / name for name in FIXED_INPUTS)]:
            if path.is_file():
                out[self.rel(path)] = file_digest(path)
        return out

    def iter_round_entries(self) -> Iterator[tuple[int, dict[str, LedgerEntry]]]:
        """Per round present in the ledger: ``(round, {stage: entry})``, rounds in order."""
        by_round: dict[int, dict[str, LedgerEntry]] = {}
        for (r, stage), e in self.done().items():
            if r is not None:
                by_round.setdefault(r, {})[stage] = e
        yield from sorted(by_round.items())
