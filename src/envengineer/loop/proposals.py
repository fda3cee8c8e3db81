"""How often an arm's engineer wrote a degenerate proposal: one setting repeated for every map size.

A proposal that gives every size the same data, hole and wait ratio ignores the per-size failures the
engineer was shown (:func:`envengineer.engineer.proposal.repeats_one_setting`). ``envengineer compare``
counts them per arm over the rounds an engineer proposed (rounds 1 and on), from each round's
``projection.json`` (its raw proposal, so runs from before the field count too). A moves answer
(``engineer.answer: moves``) counts when its moves are the same for every size it names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envengineer.engineer.proposal import repeats_one_setting
from envengineer.loop.report_data import RunRecord


def proposal_counts(runs: Sequence[RunRecord]) -> dict[str, int]:
    """``{"proposals", "repeating"}`` over the engineer's rounds of ``runs`` (a rule's proposals count too:
    a rule that writes one setting for every size is as blind to the sizes).

    >>> proposal_counts([])
    {'proposals': 0, 'repeating': 0}
    """
    proposals = repeating = 0
    for run in runs:
        for rec in run.rounds:
            p = rec.projection
            if (
                rec.index == 0
                or not isinstance(p, dict)
                or not str(p.get("source", "")).startswith("engineer:")
            ):
                continue
            proposals += 1
            repeating += bool(repeats_one_setting(p.get("raw")))  # type: ignore[union-attr]
    return {"proposals": proposals, "repeating": repeating}


def proposals_markdown(arms: Sequence[Any]) -> str:
    """A table of each arm's proposals and how many repeat one setting for every size ('' without any)."""
    rows = [(arm.name, proposal_counts(arm.runs)) for arm in arms]
    rows = [(name, c) for name, c in rows if c["proposals"]]
    if not rows:
        return ""
    lines = [
        "## Degenerate proposals",
        "",
        "| arm | proposals | one setting for every size |",
        "|---|---|---|",
    ]
    for name, c in rows:
        share = 100.0 * c["repeating"] / c["proposals"]
        lines.append(f"| {name} | {c['proposals']} | {c['repeating']} ({share:.0f} %) |")
    return "\n".join(lines) + "\n"
