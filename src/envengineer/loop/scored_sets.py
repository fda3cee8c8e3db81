"""Which instances a run's scores are on, identified by content, and which arms ``compare`` may pair.

A scored set is named by :func:`envengineer.mapf.instance.instances_digest` (SHA-256 over ``id<TAB>board
hash`` lines sorted by id), so two sets are the same only when they hold the same ids on the same boards.
Where a run's set comes from, per split:

* ``scores.json``'s ``scored_set`` (:func:`envengineer.loop.records.scored_set`): the digest, the count, and
  for a benchmark its packaged version or its file;
* a validation scored before that field: the run's own ``validation_set.jsonl``, hashed (its ids must be
  the ids the scores' verdicts hold);
* a benchmark scored before that field: the ids its verdicts (else ``benchmark/responses.jsonl``) hold,
  looked up in what the experiment names: its ``benchmark_path`` file, its ``benchmark_version``, or, for an
  experiment from before that field, every packaged version. The set is known when every candidate that
  holds those ids gives them the same boards; otherwise it is unknown (v1 and v2 share every id, 60 of them
  on other boards): a missing field is never read as a version.

An unknown set is identical to none. ``compare --against`` pairs an arm with the reference only where both
were scored on one identical set (:func:`pairing`); an arm whose runs were scored on different sets is a
mixture.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import EnvEngineerError
from envengineer.loop.records import SCORED_SET
from envengineer.loop.report_data import RunRecord
from envengineer.loop.rundir import VALIDATION_SET
from envengineer.mapf.instance import instances_digest, load_instances

SPLITS = ("benchmark", "validation")
_VERB = {"benchmark": "benchmarked", "validation": "validated"}


@dataclass(frozen=True)
class ScoredSet:
    """The instances one ``scores.json`` scored: ``sha256`` None when they cannot be told."""

    sha256: str | None
    n: int | None
    name: str
    source: str

    def text(self) -> str:
        """``v2, 30 boards, sha256 1f0c…`` or ``unknown (why)``."""
        if self.sha256 is None:
            return f"unknown ({self.source})"
        return f"{self.name}, {self.n} boards, sha256 {self.sha256[:12]}"

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "n": self.n, "name": self.name, "source": self.source}


def _unknown(why: str) -> ScoredSet:
    return ScoredSet(None, None, "", why)


def split_scores(run: RunRecord, which: str) -> dict[str, Any] | None:
    """The scores ``compare`` reads: the benchmark's, or the last validated round's."""
    if which == "benchmark":
        return run.benchmark
    val = [r for r in run.rounds if r.validation]
    return val[-1].validation if val else None


def run_set(run: RunRecord, which: str) -> ScoredSet | None:
    """The set ``run``'s ``which`` scores are on; None when it has none."""
    scores = split_scores(run, which)
    if scores is None:
        return None
    rec = scores.get(SCORED_SET)
    if isinstance(rec, dict) and isinstance(rec.get("sha256"), str):
        name = rec.get("benchmark_version") or Path(str(rec.get("benchmark_path") or which)).name
        return ScoredSet(rec["sha256"], rec.get("n"), str(name), "recorded in scores.json")
    ids = _scored_ids(run, scores, which)
    if which == "validation":
        return _validation_from_file(run.root / VALIDATION_SET, ids)
    return _benchmark_from_ids(run, ids)


def _scored_ids(run: RunRecord, scores: Mapping[str, Any], which: str) -> list[str] | None:
    """The ids the scores' verdicts hold, else the benchmark's answers' ids; None when neither says."""
    verdicts = scores.get("verdicts")
    if isinstance(verdicts, list) and verdicts:
        return [str(v.get("id")) for v in verdicts if isinstance(v, dict)]
    if which == "benchmark":
        from envengineer.evaluation import read_records

        records, _ = read_records(run.root / "benchmark" / "responses.jsonl")
        return list(records) or None
    return None


def _validation_from_file(path: Path, ids: list[str] | None) -> ScoredSet:
    if not path.is_file():
        return _unknown(f"written before scores recorded their set, and {path.name} is missing")
    try:
        instances = load_instances(path)
    except (OSError, EnvEngineerError) as exc:
        return _unknown(f"{path.name} is unreadable: {str(exc)[:80]}")
    if ids is not None and sorted(ids) != sorted(i.id for i in instances):
        return _unknown(f"{path.name} holds other ids than the scores")
    return ScoredSet(
        instances_digest(instances), len(instances), path.name, f"hashed from the run's {path.name}"
    )


def _benchmark_from_ids(run: RunRecord, ids: list[str] | None) -> ScoredSet:
    """An old benchmark's set: its ids looked up in each benchmark the experiment may have used."""
    if not ids:
        return _unknown("written before scores recorded their set, and no verdict names its ids")
    ev = run.experiment.get("evaluation")
    ev = ev if isinstance(ev, dict) else {}
    if ev.get("benchmark_path"):
        candidates = {Path(str(ev["benchmark_path"])).name: str(ev["benchmark_path"])}
    elif ev.get("benchmark_version"):
        candidates = {str(ev["benchmark_version"]): None}
    else:  # the experiment predates benchmark versions: which one scored it is read from the boards
        from envengineer.mapf.benchmark import VERSIONS

        candidates = dict.fromkeys(VERSIONS)
    digests: dict[str, list[str]] = {}
    for name, path in candidates.items():
        boards = _boards(path or name, path is not None)
        if boards is not None and all(i in boards for i in ids):
            digests.setdefault(instances_digest((i, boards[i]) for i in ids), []).append(name)
    if len(digests) == 1:
        ((digest, names),) = digests.items()
        source = "its ids looked up in " + " and ".join(names) + " (the same boards in each)"
        return ScoredSet(digest, len(ids), " = ".join(names), source)
    if not digests:
        return _unknown(f"its ids are not all in {' or '.join(candidates)}")
    return _unknown(
        "written before scores recorded their set; its ids are in "
        + " and ".join(n for ns in digests.values() for n in ns)
        + " on other boards"
    )


@functools.lru_cache(maxsize=8)
def _boards(name: str, is_path: bool) -> dict[str, str] | None:
    """Board hash by id of a packaged benchmark version or an instance file; None when unreadable."""
    try:
        if is_path:
            instances = load_instances(name)
        else:
            from envengineer.mapf.benchmark import load_benchmark

            instances = load_benchmark(name)
    except (OSError, EnvEngineerError):
        return None
    return {i.id: i.board_hash() for i in instances}


# -- pairing arms ----------------------------------------------------------------------------------------
@dataclass
class Pairing:
    """Each arm's sets per split, what ``compare`` says about them, and the differences it leaves out."""

    sets: dict[str, dict[str, list[ScoredSet]]]
    notes: list[str] = field(default_factory=list)
    mixtures: list[str] = field(default_factory=list)  # arms whose runs were scored on different sets
    unpaired: dict[tuple[str, str], str] = field(default_factory=dict)  # (arm, split) -> why

    def to_json(self) -> dict[str, Any]:
        return {
            arm: {w: [s.to_json() for s in ss] for w, ss in per.items()} for arm, per in self.sets.items()
        }


def _distinct(sets: Iterable[ScoredSet | None]) -> list[ScoredSet]:
    out: list[ScoredSet] = []
    for s in sets:
        if s is not None and s not in out and (s.sha256 is None or s.sha256 not in {o.sha256 for o in out}):
            out.append(s)
    return out


def _texts(sets: Sequence[ScoredSet]) -> str:
    return " and ".join(s.text() for s in sets)


def _identical(a: Sequence[ScoredSet], b: Sequence[ScoredSet]) -> bool:
    return len(a) == len(b) == 1 and a[0].sha256 is not None and a[0].sha256 == b[0].sha256


def pairing(arms: Mapping[str, Sequence[RunRecord]], against: str | None) -> Pairing:
    """Each arm's scored sets; arms on different sets named; with ``against``, the (arm, split) pairs that
    were not scored on the reference's one set, each with a note (their difference is left out)."""
    sets = {arm: {w: _distinct(run_set(r, w) for r in runs) for w in SPLITS} for arm, runs in arms.items()}
    out = Pairing(sets)
    for w in SPLITS:
        for arm, per in sets.items():
            known = [s for s in per[w] if s.sha256 is not None]
            if len(known) > 1:
                out.mixtures.append(
                    f"arm {arm!r}: its runs were {_VERB[w]} on different sets ({_texts(known)})"
                )
        shown = {arm: per[w] for arm, per in sets.items() if per[w]}
        if against is None and len({_texts(ss) for ss in shown.values()}) > 1:
            out.notes.append(
                f"the arms were {_VERB[w]} on different sets: "
                + "; ".join(f"{arm!r} on {_texts(ss)}" for arm, ss in shown.items())
            )
    if against is None:
        return out
    ref = sets.get(against, {})
    for arm, per in sets.items():
        for w in SPLITS:
            if arm == against or not per[w] or not ref.get(w) or _identical(per[w], ref[w]):
                continue
            out.unpaired[(arm, w)] = (
                f"arm {arm!r} was {_VERB[w]} on {_texts(per[w])}, the reference {against!r} on "
                f"{_texts(ref[w])}: its {w} difference is left out"
            )
    out.notes += list(out.unpaired.values())
    return out


def sets_markdown(p: Pairing) -> str:
    """A table of each arm's validation and benchmark set."""
    if not any(ss for per in p.sets.values() for ss in per.values()):
        return ""
    lines = ["## Scored sets", "", "| arm | validation | benchmark |", "|---|---|---|"]
    for arm, per in p.sets.items():
        lines.append(f"| `{arm}` | {_texts(per['validation'])} | {_texts(per['benchmark'])} |")
    lines += [
        "",
        "A set is its instances' ids and board hashes (sha256, sorted by id); arms are compared with "
        "`--against` only on identical sets.",
    ]
    return "\n".join(lines)
