"""Stages ``validation`` (each round's checkpoint) and ``start_validation`` (the starting model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envengineer.integrations.trackers import log_round
from envengineer.loop.records import read_scores, scored_set, write_scores
from envengineer.loop.seeds import round_seed
from envengineer.loop.state import Loop, RoundState


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
    r = state.index
    files, scores = validate(loop, state.checkpoint, loop.rd.round_dir(r) / "validation", "validation", r)
    state.validation = scores
    log_round(loop.exp.training.report_to, loop.rd.root, r, scores, state.config, state.rationale)
    return files, dict(scores.get("summary", {}))


def run_start(loop: Loop) -> tuple[dict[str, Any], dict[str, Any]]:
    """The starting model (the warm-start checkpoint, else the experiment model) on the validation set."""
    files, scores = validate(
        loop, loop.start_model, loop.rd.root / "start" / "validation", "start_validation", 0
    )
    return files, dict(scores.get("summary", {}))


def validate(
    loop: Loop, model: str | None, d: Path, purpose: str, r: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Answer the validation set with ``model`` into ``d``; the stage's files and the scores."""
    report = loop.comps.evaluator(
        model,
        loop.validation_set,
        out_dir=d,
        experiment=loop.exp,
        seed=round_seed(loop.exp.seeds.evaluation, purpose, r),
        progress=loop.progress,
    )
    scores = write_scores(d / "scores.json", report, scored_set(loop.validation_set))
    return {"scores": d / "scores.json", "responses": d / "responses.jsonl"}, scores


def load(loop: Loop, state: RoundState) -> None:
    state.validation = read_scores(loop.rd.round_dir(state.index) / "validation" / "scores.json")
