"""Resume verifies what it reuses: content hashes in the ledger, checked before a stage is skipped.

Every ledger line carries ``hashes``: the SHA-256 of each file the stage wrote (its ``paths`` that are
files; checkpoint folders are the trainer's and are not hashed) and of the run's fixed inputs as they
were when the stage finished (``experiment.yaml`` and ``validation_set.jsonl``). A resumed run checks
them before it trusts anything:

* ``experiment.yaml`` must be the file the run started with: an edited one (3 -> 4 rounds) is refused,
  always; the run is what its experiment says.
* ``validation_set.jsonl`` and every finished stage's files must be intact. A file that changed, was
  truncated or is missing stops the resume with a one-line :class:`DamagedRunError` naming it, unless
  the run is resumed with ``redo_damaged`` (``--redo-damaged``): then the stage that wrote it runs again
  (a damaged validation set is rebuilt, and every stage redone), and when the redone stage's files
  differ from what the ledger recorded, every later finished stage is redone too, since it was built on
  the old ones.

A stage to be redone gets a ``redo`` line in the ledger (the old line stays, for the record), which
:meth:`envengineer.loop.rundir.RunDir.done` reads as "not finished"; its new ``done`` line follows when
it has run again. The later stages a changed stage invalidates get their ``redo`` lines at once, so a
run killed in the middle of redoing still knows, on the next resume, what it must not reuse. A stage's
old outputs are moved to ``set_aside/N/`` before it is redone, except the files its ledger line still
vouches for when only its own files were damaged (answers whose scores were edited are rescored); a
stage redone because what it was built on changed starts from nothing.

Only the ledger vouches: outputs of a stage it does not record as finished (a deleted or emptied ledger,
lines cut from its end) are refused, except those of the first unfinished stage, which a kill leaves
(:meth:`Verifier.check_unvouched`); ``redo_damaged`` sets them aside and runs those stages again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from envengineer.loop.rundir import DamagedRunError, LedgerEntry, RunDir, file_digest

__all__ = ["DamagedRunError", "Verifier", "check_experiment", "latest_hash"]

log = logging.getLogger(__name__)


def latest_hash(rd: RunDir, name: str) -> tuple[str, LedgerEntry] | None:
    """The last hash the ledger holds for ``name`` (a path relative to the run) and the line holding it."""
    found = None
    for entry in rd.entries():
        if name in entry.hashes:
            found = (entry.hashes[name], entry)
    return found


def check_experiment(rd: RunDir) -> None:
    """Refuse a resume whose ``experiment.yaml`` is not the one the run's finished stages ran under.

    Raises:
        DamagedRunError: the file changed since the ledger's last line recorded it.
    """
    from envengineer.loop.rundir import EXPERIMENT

    recorded = latest_hash(rd, EXPERIMENT)
    if recorded is None or not rd.experiment_path.exists():
        return  # nothing finished yet (or a run from before hashes: nothing to compare)
    if file_digest(rd.experiment_path) != recorded[0]:
        raise DamagedRunError(
            f"{rd.experiment_path} changed since the run started (its hash differs from the ledger's); "
            "a run is what its experiment says: restore the file, or start a new run with the edited one"
        )


class Verifier:
    """Checks finished stages before a resumed run skips them; decides what ``redo_damaged`` reruns."""

    def __init__(self, rd: RunDir, *, redo_damaged: bool = False) -> None:
        self.rd = rd
        self.redo_damaged = redo_damaged
        self._digests: dict[Path, str | None] = {}

    def damage(self, entry: LedgerEntry, *, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        """``(relative path, "changed" | "missing")`` for each recorded file that is not as recorded."""
        out = []
        for name, digest in entry.hashes.items():
            if name in skip:
                continue
            path = self.rd.abs(name)
            now = self._digest(path)
            if now is None:
                out.append((name, "missing"))
            elif now != digest:
                out.append((name, "changed"))
        return out

    def check_validation_set(self, name: str) -> bool:
        """Whether the validation set is as the ledger recorded it; False: rebuild it (redo_damaged).

        Raises:
            DamagedRunError: it is damaged and ``redo_damaged`` is off.
        """
        recorded = latest_hash(self.rd, name)
        if recorded is None:
            return True
        digest, entry = recorded
        now = self._digest(self.rd.abs(name))
        if now == digest:
            return True
        state = "is missing" if now is None else "changed (edited or truncated)"
        if not self.redo_damaged:
            raise DamagedRunError(
                f"{self.rd.abs(name)} {state} since {_label(entry)} finished; restore it, or resume with "
                "--redo-damaged to rebuild it and redo the stages that used it"
            )
        log.warning("%s %s: rebuilding it; the stages that used it will be redone", name, state)
        for e in sorted(self.rd.done().values(), key=_order):
            self._redo(e, f"{name} is rebuilt")
        return False

    def usable(self, entry: LedgerEntry) -> bool:
        """Whether a finished stage can be skipped; False: run it again (damaged, with redo_damaged).

        Raises:
            DamagedRunError: one of its files is damaged and ``redo_damaged`` is off.
        """
        from envengineer.loop.rundir import EXPERIMENT

        damaged = self.damage(entry, skip=(EXPERIMENT,))
        if not damaged:
            return True
        name, kind = damaged[0]
        state = "is missing" if kind == "missing" else "changed (edited or truncated)"
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        if not self.redo_damaged:
            raise DamagedRunError(
                f"{self.rd.abs(name)} {state}{more} since {_label(entry)} finished; restore it, or resume "
                "with --redo-damaged to run that stage again"
            )
        # its other files are as recorded: an evaluation whose scores were edited rescores its answers
        intact = [k for k in entry.hashes if k not in {d for d, _ in damaged}]
        self._redo(entry, f"{name} {state}{more}", keep=intact)
        return False

    def redone(self, old: LedgerEntry, new: LedgerEntry) -> None:
        """After a redone stage: if its files differ from the old ones, every later stage is redone."""
        from envengineer.loop.rundir import EXPERIMENT

        def own(e: LedgerEntry) -> dict[str, str]:
            return {k: v for k, v in e.hashes.items() if k != EXPERIMENT}

        if own(old) == own(new):
            return
        later = [e for e in self.rd.done().values() if _order(e) > _order(new)]
        if later:
            log.warning(
                "%s gave other files than before: %d later stages will be redone", _label(new), len(later)
            )
        for e in sorted(later, key=_order):
            self._redo(e, f"built on {_label(new)}, which was redone with other results")

    def check_unvouched(self, planned: Sequence[tuple[int | None, str]]) -> None:
        """Outputs of stages the ledger does not record as finished: refused, or set aside (redo_damaged).

        A kill leaves the partial outputs of one stage, the first unfinished one, which a plain resume
        continues (an evaluation resumes its answers). Outputs of any later unfinished stage come from
        where the ledger cannot say (a deleted or emptied ledger, lines cut from its end, another run):
        reusing them would mix runs, and rerunning over them silently would hide the damage. With
        ``redo_damaged`` every unfinished stage's outputs are set aside, the first one's too (its ledger
        line may be one that was cut), and the stages run from their start.

        Raises:
            DamagedRunError: such outputs are there and ``redo_damaged`` is off.
        """
        done = self.rd.done()
        unfinished = [key for key in planned if key not in done]
        suspect = unfinished if self.redo_damaged else unfinished[1:]
        found = {key: self.rd.stage_outputs(*key) for key in suspect}
        found = {key: paths for key, paths in found.items() if paths}
        if not found:
            return
        paths = [p for ps in found.values() for p in ps]
        names = ", ".join(self.rd.rel(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
        if not self.redo_damaged:
            ledger = (
                "a ledger that does not record them as finished"
                if done
                else f"no ledger ({self.rd.ledger_path.name} is missing or empty)"
            )
            stages = f"{len(found)} stage" + ("s" if len(found) > 1 else "")
            raise DamagedRunError(
                f"{self.rd.root} holds outputs of {stages} ({names}) but {ledger}, so nothing vouches for "
                "them; resume with --redo-damaged to set them aside and run those stages again, or start a "
                "new run in another directory"
            )
        aside = self.rd.set_aside(paths)
        log.warning(
            "%d stages hold outputs no ledger line vouches for (%s): moved to %s; they run again",
            len(found), names, aside,
        )  # fmt: skip

    def _redo(self, entry: LedgerEntry, why: str, *, keep: Sequence[str] = ()) -> None:
        """Record that ``entry``'s stage runs again, its outputs set aside but for ``keep`` (files, relative
        to the run, that the ledger still vouches for and that were made from the same inputs)."""
        log.warning("%s runs again: %s", _label(entry), why)
        # no stage resumes what no ledger line vouches for (an evaluation's edited answers, answers of an
        # old checkpoint); set aside before the redo line: a kill in between leaves files missing, which
        # resume refuses
        aside = self.rd.set_aside(self._outputs_but(entry, keep))
        if aside is not None:
            log.info("%s: its old outputs moved to %s", _label(entry), aside)
        self.rd.record(entry.round, entry.stage, seconds=0.0, info={"reason": why}, status="redo")
        self._digests.clear()

    def _outputs_but(self, entry: LedgerEntry, keep: Sequence[str]) -> list[Path]:
        outputs = self.rd.stage_outputs(entry.round, entry.stage)
        if not keep:
            return outputs
        kept = {self.rd.abs(k) for k in keep}
        files = [f for p in outputs for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if not f.is_dir()]
        return [f for f in files if f not in kept]

    def _digest(self, path: Path) -> str | None:
        if path not in self._digests:
            self._digests[path] = file_digest(path) if path.is_file() else None
        return self._digests[path]


def _order(entry: LedgerEntry) -> tuple[int, int]:
    """Where a stage runs: the warm-start and the starting model's validation first, then each round's
    stages in order, the benchmark last."""
    from envengineer.loop.rundir import ROUND_STAGES

    if entry.round is None:
        first = {"warm_start": (-1, 0), "start_validation": (-1, 1)}
        return first.get(entry.stage, (1 << 30, 0))
    index = ROUND_STAGES.index(entry.stage) if entry.stage in ROUND_STAGES else len(ROUND_STAGES)
    return (entry.round, index)


def _label(entry: LedgerEntry) -> str:
    return f"stage {entry.stage!r}" + (f" of round {entry.round}" if entry.round is not None else "")


# -- reading a finished stage's scores back (report, compare) ----------------------------------------------
def scores_problem(data: object) -> str | None:
    """What is wrong with a ``scores.json``'s shape for the tables that read it, or None.

    >>> scores_problem({"summary": {"n": 1, "valid": 0, "optimal": 0}, "table": [1, 2]})
    'table is not a mapping of agent counts'
    """
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    summary = data.get("summary")
    if not isinstance(summary, dict) or not all(_is_percent(summary.get(k)) for k in ("valid", "optimal")):
        return "summary is not a mapping with valid and optimal percentages"
    if not isinstance(summary.get("n"), int) or isinstance(summary.get("n"), bool) or summary["n"] < 0:
        return "summary.n is not a count"
    table = data.get("table", {})
    if not isinstance(table, dict):
        return "table is not a mapping of agent counts"
    for agents, row in table.items():
        if not str(agents).isdigit() or not isinstance(row, dict):
            return f"table entry {str(agents)[:20]!r} is not an agent count with its sizes"
        sizes, total = row.get("sizes"), row.get("sum")
        if not isinstance(sizes, dict) or not all(str(n).isdigit() for n in sizes):
            return f"table[{agents}].sizes is not a mapping of map sizes"
        for cell in [*sizes.values(), total]:
            if not isinstance(cell, dict) or not all(_is_percent(cell.get(k)) for k in ("valid", "optimal")):
                return f"table[{agents}] holds a cell without valid and optimal percentages"
    return None


def _is_percent(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 100


def verified_scores(rd: RunDir, entry: LedgerEntry, path: Path) -> tuple[dict | None, str | None]:
    """A finished stage's ``scores.json`` read through the check ``--resume`` makes: ``(scores, None)``, or
    ``(None, what is wrong)`` when the file changed since the stage recorded it, is gone, is not JSON or
    not of the scores' shape (a damaged file is reported, never averaged in)."""
    import json

    rel = rd.rel(path)
    if not path.is_file():
        return None, f"{rel} is missing"
    recorded = entry.hashes.get(rel)
    if recorded is not None and file_digest(path) != recorded:
        return None, f"{rel} changed since {_label(entry)} finished (its hash differs from the ledger's)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, f"{rel} is not JSON"
    problem = scores_problem(data)
    return (None, f"{rel}: {problem}") if problem else (data, None)
