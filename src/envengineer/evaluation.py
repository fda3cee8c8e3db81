"""Evaluate a chat backend on MAPF-FrozenLake instances: responses on disk, scores from the testbed.

``evaluate`` asks the backend one batch at a time and appends each batch's records to
``out_dir/responses.jsonl`` (flushed and synced), one line per instance::

    {"id": "3agents_5x5_wr050_000012", "response": "<answer>…</answer>", "completion_tokens": 131,
     "error": null}

An interrupted evaluation resumes from that file: instances with a record are not asked again, a torn
last line (the process died mid-write) is dropped, and records whose request failed (``error`` set) are
asked again by default. The file never holds two lines for one id. The responses are then scored by the
testbed (:func:`envengineer.mapf.scoring.score`) and ``out_dir/scores.json`` holds ``report.to_json()``,
the same JSON ``envengineer score --json`` writes for the same responses. ``out_dir/eval_info.json``
records the backend, the sampling parameters and the throughput of the run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envengineer.errors import EnvEngineerError, InstanceFormatError
from envengineer.mapf.instance import Instance
from envengineer.models.base import ChatBackend, Completion, SamplingParams

if TYPE_CHECKING:
    from envengineer.mapf.scoring import ScoreReport

log = logging.getLogger(__name__)

RESPONSES_FILE = "responses.jsonl"
SCORES_FILE = "scores.json"
INFO_FILE = "eval_info.json"


class EvaluationError(EnvEngineerError):
    """An evaluation cannot run as asked (bad output folder, a backend that breaks its contract)."""


@dataclass(frozen=True)
class ResponseRecord:
    """One line of ``responses.jsonl``."""

    id: str
    response: str
    completion_tokens: int | None = None
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "response": self.response,
                "completion_tokens": self.completion_tokens,
                "error": self.error,
            },
            ensure_ascii=False,
        )


def read_records(path: str | Path) -> tuple[dict[str, ResponseRecord], bool]:
    """Read a responses file, tolerating a torn last line.

    Returns:
        The records by id (the last line wins for a repeated id) and whether the file needs rewriting
        (a torn or unreadable line, or a repeated id, was found).
    """
    path = Path(path)
    records: dict[str, ResponseRecord] = {}
    dirty = False
    if not path.exists():
        return records, dirty
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                rec = ResponseRecord(
                    id=str(d["id"]),
                    response=str(d.get("response") or ""),
                    completion_tokens=d.get("completion_tokens"),
                    error=d.get("error"),
                )
            except (json.JSONDecodeError, KeyError, TypeError):
                log.warning(
                    "%s:%d is not a complete record (an interrupted write?); it is dropped", path, lineno
                )
                dirty = True
                continue
            if rec.id in records:
                dirty = True
            records[rec.id] = rec
    with open(path, "rb") as raw:  # appending after a last line without its newline would merge two lines
        raw.seek(0, os.SEEK_END)
        if raw.tell() > 0:
            raw.seek(-1, os.SEEK_END)
            dirty = dirty or raw.read(1) != b"\n"
    return records, dirty


def write_records(path: Path, records: Sequence[ResponseRecord]) -> None:
    """Write a whole responses file atomically (temporary file + rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(rec.to_json() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def stratified_subset(instances: Sequence[Instance], limit: int | None) -> list[Instance]:
    """``limit`` instances drawn by :func:`envengineer.mapf.benchmark.draw_subset` (all if None).

    The draw is seeded and stratified over (agents, size, wait subset, needs a wait): the (agents, size)
    cells get shares as even as ``limit`` allows, the wait subsets take turns inside them, and every cell
    keeps the set's share of instances that need a wait to within one instance. The result keeps file
    order and is the same in every call.

    >>> from envengineer.mapf.instance import Instance
    >>> g = ("...", "...", "...")
    >>> a = [Instance(f"a{i}", g, ((0, 0), (0, 2)), ((0, 2), (0, 0))) for i in range(3)]
    >>> b = [Instance(f"b{i}", g, ((0, 0), (1, 1), (2, 2)), ((2, 2), (0, 0), (1, 1))) for i in range(3)]
    >>> len(stratified_subset(a + b, 4)), {i.num_agents for i in stratified_subset(a + b, 4)}
    (4, {2, 3})
    """
    if limit is None or limit >= len(instances):
        return list(instances)
    if limit < 0:
        raise EvaluationError(f"limit must be >= 0, got {limit}")
    from envengineer.mapf.benchmark import draw_subset

    return draw_subset(instances, limit=limit)


def evaluate(
    backend: ChatBackend,
    instances: Sequence[Instance],
    *,
    out_dir: str | Path,
    params: SamplingParams | None = None,
    batch_size: int = 8,
    resume: bool = True,
    retry_errors: bool = True,
    sort_by_length: bool = True,
    progress: bool = True,
) -> ScoreReport:
    """Ask ``backend`` about every instance, store the responses and score them.

    Args:
        backend: Any :class:`~envengineer.models.ChatBackend`.
        instances: The instances to evaluate (ids must be unique).
        out_dir: Folder for ``responses.jsonl``, ``scores.json`` and ``eval_info.json`` (created).
        params: Sampling parameters (default :class:`SamplingParams()`).
        batch_size: Conversations per ``backend.generate`` call; records are saved after each batch.
        resume: Keep the records already in ``responses.jsonl`` and ask only for the rest; when False the
            file is started afresh.
        retry_errors: On resume, ask again for instances whose earlier request failed.
        sort_by_length: Batch prompts of similar length together (longest first), so a left-padded
            batch wastes little on padding and a batch that does not fit in memory fails first. The
            order of the batches changes nothing else: records are keyed by id, scores follow ``instances``.
        progress: Show a progress bar (tqdm, on stderr) with the mean tokens per response.

    Returns:
        The testbed's :class:`~envengineer.mapf.scoring.ScoreReport`.

    Raises:
        EvaluationError: Bad arguments, or a backend that returns the wrong number of completions.
        InstanceFormatError: Two instances share an id.
    """
    from envengineer.mapf.prompt import build_messages
    from envengineer.mapf.scoring import score

    params = params or SamplingParams()
    if batch_size < 1:
        raise EvaluationError(f"batch_size must be >= 1, got {batch_size}")
    ids = [inst.id for inst in instances]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InstanceFormatError(f"instance id {dup!r} appears twice; ids must be unique to evaluate")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EvaluationError(f"the output folder {out} is a file; name a folder")
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESPONSES_FILE

    records: dict[str, ResponseRecord] = {}
    if resume:
        records, dirty = read_records(path)
        wanted = set(ids)
        extra = [i for i in records if i not in wanted]
        if extra:
            log.warning(
                "%s holds %d ids that are not in this set (e.g. %r); they are kept but not scored",
                path,
                len(extra),
                extra[0],
            )
        failed = [i for i, r in records.items() if r.error is not None and i in wanted]
        if failed and retry_errors:
            log.info("asking again for %d instances whose earlier request failed", len(failed))
            for i in failed:
                del records[i]
            dirty = True
        if dirty:
            write_records(path, list(records.values()))
        if records:
            log.info(
                "resuming: %d of %d instances already answered in %s",
                sum(i in records for i in wanted),
                len(ids),
                path,
            )
    elif path.exists():
        path.unlink()

    todo = [inst for inst in instances if inst.id not in records]
    messages = {inst.id: build_messages(inst) for inst in todo}
    if sort_by_length:  # stable: equal lengths keep the set's order
        todo.sort(key=lambda inst: -sum(len(m["content"]) for m in messages[inst.id]))
    bar = _progress_bar(len(instances), len(instances) - len(todo), progress, backend.name)
    started = time.perf_counter()
    new_tokens = 0
    new_done = 0
    errors = 0
    try:
        with open(path, "a", encoding="utf-8") as fh:
            for lo in range(0, len(todo), batch_size):
                batch = todo[lo : lo + batch_size]
                completions = backend.generate([messages[inst.id] for inst in batch], params)
                if len(completions) != len(batch):
                    raise EvaluationError(
                        f"backend {backend.name} returned {len(completions)} completions for "
                        f"{len(batch)} conversations"
                    )
                for inst, comp in zip(batch, completions, strict=True):
                    rec = _record(inst.id, comp)
                    records[inst.id] = rec
                    fh.write(rec.to_json() + "\n")
                    new_tokens += rec.completion_tokens or 0
                    errors += rec.error is not None
                fh.flush()
                os.fsync(fh.fileno())
                new_done += len(batch)
                if bar is not None:
                    bar.update(len(batch))
                    bar.set_postfix(tok_per_resp=f"{new_tokens / new_done:.0f}", errors=errors, refresh=False)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - started

    responses = {i: records[i].response for i in ids}
    tokens = {i: records[i].completion_tokens for i in ids if records[i].completion_tokens is not None}
    report = score(instances, responses, tokens or None)
    _write_json(out / SCORES_FILE, report.to_json())  # byte for byte what `envengineer score --json` writes
    info = {
        "backend": backend.name,
        "params": params.to_dict(),
        "instances": len(ids),
        "asked_this_run": new_done,
        "errors": sum(records[i].error is not None for i in ids),
        "seconds_this_run": round(seconds, 3),
        "responses_per_second": round(new_done / seconds, 4) if new_done and seconds > 0 else None,
        "tokens_per_second": round(new_tokens / seconds, 2) if new_tokens and seconds > 0 else None,
        "batch_size": batch_size,
    }
    _write_json(out / INFO_FILE, info)
    if info["errors"]:
        first = next(records[i].error for i in ids if records[i].error is not None)
        log.warning(
            "%d of %d requests failed (scored as empty responses); first error: %s",
            info["errors"],
            len(ids),
            first,
        )
    return report


def _record(instance_id: str, comp: Completion) -> ResponseRecord:
    if not isinstance(comp, Completion):
        raise EvaluationError(f"a backend returned {type(comp).__name__}, not a Completion")
    tokens = comp.completion_tokens if isinstance(comp.completion_tokens, int) else None
    return ResponseRecord(
        id=instance_id, response=comp.text or "", completion_tokens=tokens, error=comp.error
    )


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


def _progress_bar(total: int, initial: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="resp", dynamic_ncols=True)
