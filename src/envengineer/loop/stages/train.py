"""Stage ``train``: one training round from the previous checkpoint, by ``training.learner``: ``grpo`` (a
GRPO round through TRL, the default), ``sft`` (supervised fine-tuning on the exact solver's optimal plans of
the round's boards, the warm-start's learner) or ``teach`` (the solver teaching the policy on its own
answers); skipped for a scripted policy. A ``teach`` round stops on optimizer steps, never on the wall
clock: :func:`~envengineer.training.teach.round_steps` turns its settings' ``minutes`` (and
``training.max_steps``) into a step count once, recorded as ``planned_steps`` in ``metrics.json`` and in
the ledger, so how long a round trains does not depend on the machine's load.

Before an ``sft`` round trains, the checkpoint it starts from answers ``training.probe`` of the round's boards
(:func:`probe`), and the round records per map size what it got right under ``metrics.json["metrics"]
["sampled"]``, in the units GRPO's own samples are recorded in (envengineer.training.diagnostics), so the
learnability curriculum, the engineer's L module and the report read an SFT round as they read a GRPO one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from envengineer.integrations.trackers import preset_with_report_to
from envengineer.loop.components import release_shared_backend
from envengineer.loop.records import train_record, write_scores
from envengineer.loop.rundir import atomic_write_json
from envengineer.loop.seeds import round_seed
from envengineer.loop.stages.data import instances
from envengineer.loop.state import Loop, RoundState
from envengineer.mapf.instance import Instance
from envengineer.mapf.rewards import score_verdict
from envengineer.mapf.validator import Verdict
from envengineer.training.teach import round_steps


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any], str]:
    r = state.index
    d = loop.rd.round_dir(r) / "train"
    exp = loop.exp
    if not exp.trains:
        reason = (
            "scripted policy: nothing to train" if exp.scripted else "training disabled in the experiment"
        )
        state.checkpoint = state.model_in
        atomic_write_json(
            d / "metrics.json",
            {
                "skipped": reason,
                "checkpoint": state.checkpoint,
                "model_in": state.model_in,
                "metrics": {},
                "steps": 0,
                "seconds": 0.0,
            },
        )
        return (
            {"metrics": d / "metrics.json"},
            {"skipped": reason, "checkpoint": state.checkpoint},
            "skipped",
        )
    seed = round_seed(exp.seeds.training, "training", r)
    boards = instances(loop, r)
    sampled = (
        probe(loop, state.model_in, boards, d / "probe", seed) if exp.training.learner == "sft" else None
    )
    release_shared_backend()
    planned = None
    if exp.training.learner == "teach":
        # a teach round stops on steps: its minutes turned into a step count here, once, and recorded
        planned = round_steps(exp.training.teach, exp.training.max_steps)
        result = loop.comps.teacher(
            state.model_in,
            boards,
            out_dir=d,
            settings=exp.training.teach,
            seed=seed,
            max_steps=planned,
        )
    else:
        learn = loop.comps.sft_trainer if exp.training.learner == "sft" else loop.comps.trainer
        result = learn(
            state.model_in,
            boards,
            out_dir=d,
            preset=preset_with_report_to(
                exp.training.preset, exp.training.report_to, exp.training.preset_kind
            ),
            epochs=exp.epochs_per_round,
            seed=seed,
            max_steps=exp.training.max_steps,
        )
    record = train_record(
        result,
        model_in=state.model_in,
        seed=seed,
        preset="teach" if exp.training.learner == "teach" else exp.training.preset,
        epochs=exp.epochs_per_round,
    )
    if sampled:
        record["metrics"] = {**record["metrics"], "sampled": sampled}
    info: dict[str, Any] = {"steps": record["steps"]}
    if planned is not None:
        record["planned_steps"] = info["planned_steps"] = planned
    checkpoint = record["checkpoint"]
    atomic_write_json(d / "metrics.json", record)
    state.checkpoint = checkpoint
    return (
        {"metrics": d / "metrics.json", "checkpoint": checkpoint},
        {"checkpoint": checkpoint, **info},
        "done",
    )


def load(loop: Loop, state: RoundState, entry: Any) -> None:
    state.checkpoint = entry.info.get("checkpoint", state.model_in)


def probe(loop: Loop, model: str | None, boards: Sequence[Instance], out: Path, seed: int) -> dict[str, Any]:
    """``model``'s answers to ``training.probe`` of ``boards`` (:func:`probe_boards`), asked of the loop's
    evaluator into ``out`` (resumed there when the round is redone), as :func:`sampled_of` counts them;
    ``{}`` when ``training.probe`` is 0."""
    picked = probe_boards(boards, loop.exp.training.probe)
    if not picked:
        return {}
    report = loop.comps.evaluator(model, picked, out_dir=out, experiment=loop.exp, seed=seed, progress=False)
    scores = write_scores(out / "scores.json", report)
    return sampled_of(picked, scores.get("verdicts") or [])


def probe_boards(boards: Sequence[Instance], n: int) -> list[Instance]:
    """``n`` of ``boards`` spread over their map sizes: the first of each size (smallest size first), then
    the second of each, ..., each size's boards in the order they come; all of them when ``n`` is larger.

    >>> from types import SimpleNamespace as B
    >>> boards = [B(id=f"{s}-{i}", size=s) for s, i in ((3, 0), (3, 1), (3, 2), (5, 0), (4, 0), (4, 1))]
    >>> [b.id for b in probe_boards(boards, 5)]
    ['3-0', '4-0', '5-0', '3-1', '4-1']
    >>> len(probe_boards(boards, 99)), probe_boards(boards, 0)
    (6, [])
    """
    by_size: dict[int, list[Instance]] = defaultdict(list)
    for board in boards:
        by_size[board.size].append(board)
    queues = [by_size[size] for size in sorted(by_size)]
    picked: list[Instance] = []
    for i in range(max((len(q) for q in queues), default=0)):
        picked += [q[i] for q in queues if i < len(q)]
    return picked[: max(n, 0)]


_VERDICT_FIELDS = tuple(f.name for f in fields(Verdict))


def sampled_of(boards: Sequence[Instance], verdicts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per map size (``"3"``, ``"4"``, ...) of ``boards``: the answers judged (``completions``), the shares
    of them that were valid and optimal, and their mean graded reward (the testbed's default reward,
    ``envengineer.mapf.rewards``; left out of a size whose verdicts lack the fields it needs), the keys and
    units of a GRPO round's ``metrics.json["sampled"]``; ``zero_std`` is None (no GRPO groups).

    ``verdicts``: the evaluator's per-answer rows (``ScoreReport.to_json()["verdicts"]``), matched by id.
    """
    by_id = {b.id: b for b in boards}
    rows: dict[int, list[tuple[Instance, Mapping[str, Any]]]] = defaultdict(list)
    for row in verdicts:
        board = by_id.get(row.get("id")) if isinstance(row, Mapping) else None
        if board is not None:
            rows[board.size].append((board, row))
    out: dict[str, Any] = {}
    for size, judged in sorted(rows.items()):
        n = len(judged)
        stats: dict[str, Any] = {
            "completions": n,
            "valid": round(sum(bool(v.get("valid")) for _, v in judged) / n, 4),
            "optimal": round(sum(bool(v.get("optimal")) for _, v in judged) / n, 4),
        }
        if all(all(k in v for k in _VERDICT_FIELDS) for _, v in judged):
            rewards = [
                score_verdict(Verdict(**{k: v[k] for k in _VERDICT_FIELDS}), b.num_agents) for b, v in judged
            ]
            stats["reward"] = round(sum(rewards) / n, 4)
        stats["zero_std"] = None
        out[str(size)] = stats
    return out
