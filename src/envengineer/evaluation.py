"""Evaluate a chat backend on MAPF-FrozenLake instances: responses on disk, scores from the testbed.

``evaluate`` asks the backend one batch at a time and appends each batch's records to
``out_dir/responses.jsonl`` (flushed and synced), one line per instance::

    {"id": "3agents_5x5_wr050_000012", "response": "<answer>…</answer>", "completion_tokens": 131,
     "error": null, "board_hash": "9f2c…"}

An interrupted evaluation resumes from that file: instances with a record are not asked again, a torn
last line (the process died mid-write, even inside a multi-byte character) is dropped, logged and asked
again, and records whose request failed (``error`` set) are asked again by default. A record answers the
board its ``board_hash`` names (:meth:`Instance.board_hash`): resuming onto a set whose instance of the same
id is another board (benchmark v1 and v2 share every id, 60 of them on other boards), or onto records
without a board hash, is refused with :class:`EvaluationError` naming the file, how many ids and the
first; answers are never matched by id alone. Every line is valid
UTF-8 whatever the model returned: lone surrogates are replaced by U+FFFD (counted in ``eval_info.json``)
and secrets the process holds (API keys, ``*_KEY`` / ``*_TOKEN`` variables) are replaced by ``***``
(:mod:`envengineer.sanitize`). The file never holds two lines for one id. The responses are then scored by the
testbed (:func:`envengineer.mapf.scoring.score`) and ``out_dir/scores.json`` holds ``report.to_json()``,
the same JSON ``envengineer score --json`` writes for the same responses. ``out_dir/eval_info.json``
records the backend, the sampling parameters, the throughput of the run and ``instances_sha256``, the
content digest of the instances scored (:func:`envengineer.mapf.instance.instances_digest`).
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
from envengineer.mapf.instance import Instance, instances_digest
from envengineer.models.base import ChatBackend, Completion, SamplingParams
from envengineer.sanitize import replace_surrogates, safe_text, scrub

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
    board_hash: str | None = None  # the board answered; None in files written before it was recorded

    def to_json(self) -> str:
        """One line of valid UTF-8: secrets scrubbed, lone surrogates replaced (see :func:`_record`)."""
        return safe_text(
            json.dumps(
                {
                    "id": self.id,
                    "response": self.response,
                    "completion_tokens": self.completion_tokens,
                    "error": self.error,
                    "board_hash": self.board_hash,
                },
                ensure_ascii=False,
            )
        )


def read_records(path: str | Path) -> tuple[dict[str, ResponseRecord], bool]:
    """Read a responses file, tolerating torn and damaged lines.

    The file is read as bytes and each line decoded on its own, so a last line cut inside a multi-byte
    character (a process killed mid-write, a full disk) is one unfinished record like any other torn
    line: it is dropped with a warning and its instance is asked again. A line that is not UTF-8, not
    JSON or not a record is dropped the same way wherever it is.

    Returns:
        The records by id (the last line wins for a repeated id) and whether the file needs rewriting
        (a torn or unreadable line, a repeated id, or a last line without its newline was found).
    """
    path = Path(path)
    records: dict[str, ResponseRecord] = {}
    if not path.exists():
        return records, False
    data = path.read_bytes()
    lines = data.split(b"\n")
    unterminated = bool(lines[-1])  # appending after a line without its newline would merge two lines
    dirty = unterminated
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            d = json.loads(raw.decode("utf-8"))
            rec = ResponseRecord(
                id=str(d["id"]),
                response=replace_surrogates(str(d.get("response") or ""))[0],
                completion_tokens=d.get("completion_tokens"),
                error=d.get("error"),
                board_hash=d["board_hash"] if isinstance(d.get("board_hash"), str) else None,
            )
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            torn = unterminated and lineno == len(lines)
            log.warning(
                "%s:%d is %s (%s); it is dropped and its instance asked again",
                path,
                lineno,
                "an unfinished last record (an interrupted write?)" if torn else "not a complete record",
                type(exc).__name__,
            )
            dirty = True
            continue
        if rec.id in records:
            dirty = True
        records[rec.id] = rec
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
    prompt_style: str | None = None,
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
        prompt_style: ``"full"`` or ``"compact"`` prompts; None: the style the backend's model records
            (a small policy's ``compact``), else ``full``.

    Returns:
        The testbed's :class:`~envengineer.mapf.scoring.ScoreReport`.

    Raises:
        EvaluationError: Bad arguments, or a backend that returns the wrong number of completions.
        InstanceFormatError: Two instances share an id.
    """
    from envengineer.mapf.prompt import build_messages
    from envengineer.mapf.scoring import score

    params = params or SamplingParams()
    ids = [inst.id for inst in instances]
    out = _checked_out_dir(ids, out_dir, batch_size)
    path = out / RESPONSES_FILE
    boards = {inst.id: inst.board_hash() for inst in instances}
    records = _records_to_keep(path, boards, resume=resume, retry_errors=retry_errors)

    todo = [inst for inst in instances if inst.id not in records]
    style = prompt_style or getattr(backend, "prompt_style", None) or "full"
    messages = {inst.id: build_messages(inst, style=style) for inst in todo}
    if sort_by_length:  # stable: equal lengths keep the set's order
        todo.sort(key=lambda inst: -sum(len(m["content"]) for m in messages[inst.id]))
    bar = _progress_bar(len(instances), len(instances) - len(todo), progress, backend.name)
    started = time.perf_counter()
    try:
        run = _ask(backend, todo, messages, params, batch_size, path, records, bar, boards)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - started

    responses = {i: records[i].response for i in ids}
    tokens = {i: records[i].completion_tokens for i in ids if records[i].completion_tokens is not None}
    report = score(instances, responses, tokens or None)
    _write_json(out / SCORES_FILE, report.to_json())  # byte for byte what `envengineer score --json` writes
    _write_info(out, backend, params, boards, records, run, seconds, batch_size)
    return report


def _checked_out_dir(ids: list[str], out_dir: str | Path, batch_size: int) -> Path:
    """Check the arguments ``evaluate`` gets and create its output folder."""
    if batch_size < 1:
        raise EvaluationError(f"batch_size must be >= 1, got {batch_size}")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InstanceFormatError(f"instance id {dup!r} appears twice; ids must be unique to evaluate")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EvaluationError(f"the output folder {out} is a file; name a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _records_to_keep(
    path: Path, boards: dict[str, str], *, resume: bool, retry_errors: bool
) -> dict[str, ResponseRecord]:
    """The records of an earlier run to keep (failed ones dropped when retried), the file made to match.

    ``boards``: the board hash of each instance to answer, by id, in the set's order.

    Raises:
        EvaluationError: a kept record answers another board than the instance of its id, or names none.
    """
    if not resume:
        if path.exists():
            path.unlink()
        return {}
    records, dirty = read_records(path)
    ids = list(boards)
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
    _check_boards(path, records, boards)
    if dirty:
        write_records(path, list(records.values()))
    if records:
        log.info(
            "resuming: %d of %d instances already answered in %s",
            sum(i in records for i in wanted),
            len(ids),
            path,
        )
    return records


def _check_boards(path: Path, records: dict[str, ResponseRecord], boards: dict[str, str]) -> None:
    """Refuse to resume onto records of other boards: an answer is the answer to one board, not to an id.

    Raises:
        EvaluationError: a record of an id in ``boards`` names another board hash, or none.
    """
    other = [i for i in boards if i in records and records[i].board_hash not in (None, boards[i])]
    if other:
        first = other[0]
        raise EvaluationError(
            f"{path} holds answers to other boards for {len(other)} ids (first: {first!r}, board "
            f"{records[first].board_hash!s:.12} there, {boards[first]:.12} here); use another --out or "
            "delete it"
        )
    unknown = [i for i in boards if i in records and records[i].board_hash is None]
    if unknown:
        raise EvaluationError(
            f"{path} holds {len(unknown)} answers that name no board (first: {unknown[0]!r}; written before "
            "answers recorded their board), so they cannot be matched to these boards; use another --out "
            "or delete it"
        )


@dataclass
class _Asked:
    """What one ``evaluate`` call asked for: the counts its ``eval_info.json`` reports."""

    done: int = 0
    tokens: int = 0
    errors: int = 0
    surrogates: int = 0


def _ask(
    backend: ChatBackend,
    todo: list[Instance],
    messages: dict[str, Any],
    params: SamplingParams,
    batch_size: int,
    path: Path,
    records: dict[str, ResponseRecord],
    bar: Any,
    boards: dict[str, str],
) -> _Asked:
    """Ask for ``todo`` batch by batch; each record goes into ``records`` and ``path`` (synced per batch),
    with the board hash ``boards`` gives its id."""
    run = _Asked()
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
                rec, replaced = _record(inst.id, comp, boards[inst.id])
                run.surrogates += replaced
                records[inst.id] = rec
                fh.write(rec.to_json() + "\n")
                run.tokens += rec.completion_tokens or 0
                run.errors += rec.error is not None
            fh.flush()
            os.fsync(fh.fileno())
            run.done += len(batch)
            if bar is not None:
                bar.update(len(batch))
                bar.set_postfix(tok_per_resp=f"{run.tokens / run.done:.0f}", errors=run.errors, refresh=False)
    return run


def _write_info(
    out: Path,
    backend: ChatBackend,
    params: SamplingParams,
    boards: dict[str, str],
    records: dict[str, ResponseRecord],
    run: _Asked,
    seconds: float,
    batch_size: int,
) -> None:
    """Write ``eval_info.json`` and warn about replaced surrogates and failed requests."""
    ids = list(boards)
    info = {
        "backend": backend.name,
        "params": params.to_dict(),
        "instances": len(ids),
        "instances_sha256": instances_digest(boards.items()),
        "asked_this_run": run.done,
        "errors": sum(records[i].error is not None for i in ids),
        "seconds_this_run": round(seconds, 3),
        "responses_per_second": round(run.done / seconds, 4) if run.done and seconds > 0 else None,
        "tokens_per_second": round(run.tokens / seconds, 2) if run.tokens and seconds > 0 else None,
        "batch_size": batch_size,
        "surrogates_replaced_this_run": run.surrogates,
    }
    if run.surrogates:
        log.warning("%d lone surrogates in the answers were replaced by U+FFFD", run.surrogates)
    _write_json(out / INFO_FILE, info)
    if info["errors"]:
        first = next(records[i].error for i in ids if records[i].error is not None)
        log.warning(
            "%d of %d requests failed (scored as empty responses); first error: %s",
            info["errors"],
            len(ids),
            first,
        )


def _record(instance_id: str, comp: Completion, board: str | None = None) -> tuple[ResponseRecord, int]:
    """The record of one answer, as it will be scored and stored, and how many surrogates it had.

    The text is cleaned here, before scoring, so the scores describe exactly what the file holds.
    """
    if not isinstance(comp, Completion):
        raise EvaluationError(f"a backend returned {type(comp).__name__}, not a Completion")
    tokens = comp.completion_tokens if isinstance(comp.completion_tokens, int) else None
    text, replaced = replace_surrogates(scrub(comp.text or ""))
    error = None if comp.error is None else safe_text(str(comp.error))
    rec = ResponseRecord(
        id=instance_id, response=text, completion_tokens=tokens, error=error, board_hash=board
    )
    return rec, replaced


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


def _progress_bar(total: int, initial: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="resp", dynamic_ncols=True)
