"""``engineer.screen``: several proposals for a round, screened by a cheap probe of the current policy.

In a round after round 0 the stage ``config`` asks the engineer ``proposals`` times, each with its own
sampling seed (:func:`screen_seed`), and takes each answer through the same projection and trust region as a
single proposal. From each projected candidate ``boards`` probe boards are generated (the data stage's
generator and agent mix, never a held-out board; one board seed for every candidate, so two candidates that
agree on a size's knobs are probed on the same boards there), the current checkpoint answers them through
the loop's evaluator, and the candidate is scored by :func:`learnability`. The best is kept (ties: the first).

Written under ``round_XX/engineer/``: ``screen/candidate_I/`` (the proposal's ``decision.json``, the probe
boards' ``manifest.jsonl``, the evaluator's answers and ``scores.json``) and ``screen.json`` (every candidate:
its seed, configuration, per-size boards and valid rate, score; the index chosen).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.errors import ConfigError
from envengineer.loop.records import manifest_row, write_scores
from envengineer.loop.rundir import atomic_write_json, atomic_write_jsonl
from envengineer.loop.state import Loop
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import Instance

log = logging.getLogger(__name__)

#: The purpose code of the screen's seeds, beside :func:`envengineer.loop.seeds.round_seed`'s codes; its
#: tuples hold three numbers and these five, so the two never draw the same stream.
_SCREEN = 9
#: What a screen seed is for: an engineer's sampling, the probe boards, the policy's answers.
PROPOSAL, BOARDS, ANSWERS = 0, 1, 2

#: How the score is computed, written beside it.
SCORE_TEXT = "sum over sizes of (the size's share of the probe boards) x p (1 - p), p its valid rate"


@dataclass(frozen=True)
class Proposal:
    """One answer of the engineer for a round: the decision's record (``EngineerDecision.to_dict()``) and
    its configuration after projection and the trust region (``bounded``: what the region pulled back)."""

    record: dict[str, Any]
    config: RoundConfig
    bounded: dict[str, Any] | None


def screen_seed(base: int, part: int, r: int, i: int = 0) -> int:
    """A 31-bit seed for part ``part`` (:data:`PROPOSAL`, :data:`BOARDS`, :data:`ANSWERS`) of round ``r``'s
    screen, item ``i``, from the tuple ``(base, 9, part, r, i)``, never ``base + i``.

    >>> len({screen_seed(0, PROPOSAL, 1, i) for i in range(4)}), screen_seed(0, BOARDS, 1) < 2**31
    (4, True)
    """
    return int(np.random.SeedSequence((base, _SCREEN, part, r, i)).generate_state(1)[0] >> 1)


def learnability(boards: Mapping[int, int], valid: Mapping[int, float]) -> float:
    """How learnable a candidate's boards are for the policy: the sum over sizes of the size's share of the
    boards times ``p (1 - p)``, ``p`` the size's valid rate (a size without a rate counts as ``p = 0``).
    Largest (0.25) when every board sits on sizes the policy gets right half of the time; 0 when it gets
    each size always or never right.

    >>> learnability({3: 10}, {3: 0.5}), learnability({3: 10}, {3: 0.0}), learnability({3: 10}, {3: 1.0})
    (0.25, 0.0, 0.0)
    >>> learnability({3: 10, 4: 30}, {3: 0.5, 4: 1.0})
    0.0625
    >>> learnability({}, {})
    0.0
    """
    total = sum(boards.values())
    if total <= 0:
        return 0.0
    return sum(n / total * valid.get(s, 0.0) * (1.0 - valid.get(s, 0.0)) for s, n in boards.items())


def per_size(boards: Sequence[Instance], verdicts: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per map size of ``boards``: how many (``boards``) and the share of them answered validly (``valid``);
    a board without a verdict counts as not valid. ``verdicts``: the evaluator's rows, matched by id."""
    valid_ids = {row.get("id") for row in verdicts if isinstance(row, Mapping) and row.get("valid")}
    out: dict[int, dict[str, Any]] = {}
    for board in boards:
        cell = out.setdefault(board.size, {"boards": 0, "valid": 0})
        cell["boards"] += 1
        cell["valid"] += board.id in valid_ids
    for cell in out.values():
        cell["valid"] = cell["valid"] / cell["boards"]
    return dict(sorted(out.items()))


def choose(loop: Loop, r: int, propose: Callable[[int], Proposal]) -> tuple[Proposal, dict[str, Any]]:
    """Round ``r``'s proposal by the screen: ``propose(seed)`` asked once per proposal, each candidate probed
    and scored; returns the chosen one and ``projection.json``'s ``screened`` entry."""
    settings = loop.exp.engineer.screen
    if settings is None:
        raise ConfigError("the screen runs only with engineer.screen set; set it or ask the engineer once")
    d = loop.rd.round_dir(r) / "engineer" / "screen"
    shutil.rmtree(d, ignore_errors=True)  # asked afresh: no answer to another candidate's boards is resumed
    seeds = [screen_seed(loop.exp.seeds.evaluation, PROPOSAL, r, i) for i in range(settings.proposals)]
    proposals = [propose(seed) for seed in seeds]
    model = loop.rounds[r - 1].checkpoint
    board_seed = screen_seed(loop.exp.seeds.data, BOARDS, r)
    answer_seed = screen_seed(loop.exp.seeds.evaluation, ANSWERS, r)
    candidates = []
    for i, (seed, proposal) in enumerate(zip(seeds, proposals, strict=True)):
        out = d / f"candidate_{i}"
        atomic_write_json(out / "decision.json", proposal.record)
        sizes = probe(loop, proposal.config, model, out, board_seed, answer_seed)
        candidates.append(_candidate(i, seed, proposal, sizes))
    scores = [c["score"] for c in candidates]
    chosen = scores.index(max(scores))  # ties: the first proposal
    log.info("round %d: screen kept proposal %d of %d (learnability %s)", r, chosen, len(scores), scores)
    atomic_write_json(
        d.parent / "screen.json",
        {
            "proposals": settings.proposals,
            "boards": settings.boards,
            "model": model,
            "board_seed": board_seed,
            "answer_seed": answer_seed,
            "score": SCORE_TEXT,
            "candidates": candidates,
            "chosen": chosen,
        },
    )
    return proposals[chosen], {"proposals": settings.proposals, "chosen": chosen, "scores": scores}


def probe(
    loop: Loop, config: RoundConfig, model: str | None, out: Path, board_seed: int, answer_seed: int
) -> dict[int, dict[str, Any]]:
    """``engineer.screen.boards`` boards from ``config`` (the data stage's generator and agent mix, no
    held-out board) answered by ``model`` into ``out``, counted per size (:func:`per_size`)."""
    from envengineer.loop.stages.data import boards as round_boards

    settings = loop.exp.engineer.screen
    n = settings.boards if settings is not None else config.num_samples
    cfg = RoundConfig.model_validate({**config.model_dump(), "num_samples": n})
    picked = round_boards(loop, cfg, board_seed)
    if {b.board_hash() for b in picked} & loop.exclude:
        raise ConfigError(f"{out}: a probe board is a validation or benchmark board; fix the generator")
    atomic_write_jsonl(out / "manifest.jsonl", (manifest_row(b) for b in picked))
    report = loop.comps.evaluator(
        model, picked, out_dir=out, experiment=loop.exp, seed=answer_seed, progress=False
    )
    scores = write_scores(out / "scores.json", report)
    return per_size(picked, scores.get("verdicts") or [])


def _candidate(
    i: int, seed: int, proposal: Proposal, sizes: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    """One candidate's line in ``screen.json``."""
    from envengineer.engineer.proposal import repeats_one_setting

    counts = {s: c["boards"] for s, c in sizes.items()}
    score = learnability(counts, {s: c["valid"] for s, c in sizes.items()})
    return {
        "index": i,
        "seed": seed,
        "fell_back": bool(proposal.record.get("fell_back")),
        "repeats_one_setting": repeats_one_setting(proposal.record.get("raw_proposal")),
        "config": proposal.config.model_dump(mode="json"),
        "sizes": {str(s): dict(c) for s, c in sizes.items()},
        "score": round(score, 6),
    }


def paths(loop: Loop, r: int) -> dict[str, Path]:
    """The screen's files the ledger hashes: ``screen.json`` and each candidate's ``scores.json``."""
    settings = loop.exp.engineer.screen
    if settings is None:
        return {}
    d = loop.rd.round_dir(r) / "engineer"
    out = {"screen": d / "screen.json"}
    for i in range(settings.proposals):
        out[f"screen_{i}"] = d / "screen" / f"candidate_{i}" / "scores.json"
    return out
