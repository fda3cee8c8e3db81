"""Degenerate proposals: one setting written for every map size, counted per arm by ``compare``."""

from __future__ import annotations

from pathlib import Path

from envengineer.engineer.proposal import repeats_one_setting
from envengineer.loop.compare import Arm
from envengineer.loop.proposals import proposal_counts, proposals_markdown
from envengineer.loop.report_data import RoundRecord, RunRecord

SAME = {"data_ratio": 1.0, "hole_ratio": 0.5, "wait_ratio": 0.1}


def test_one_setting_for_every_size_is_degenerate_and_any_difference_is_not() -> None:
    assert repeats_one_setting({"sizes": {str(n): dict(SAME) for n in range(3, 11)}}) is True
    for knob in SAME:
        other = {**SAME, knob: 0.3}
        assert repeats_one_setting({"sizes": {"3": SAME, "4": SAME, "5": other}}) is False
    assert repeats_one_setting({"sizes": {"3": SAME}}) is None  # one size says nothing
    assert repeats_one_setting({"sizes": [SAME, SAME]}) is None
    assert repeats_one_setting(None) is None


def _run(*raws: object, source: str = "engineer:base") -> RunRecord:
    rounds = [RoundRecord(index=0, projection={"source": "round0", "raw": {"sizes": {"3": SAME, "4": SAME}}})]
    rounds += [
        RoundRecord(index=i + 1, projection={"source": source, "raw": raw}) for i, raw in enumerate(raws)
    ]
    return RunRecord(root=Path("r"), experiment={"name": "x"}, rounds=rounds)


def test_compare_counts_an_arms_degenerate_proposals() -> None:
    degenerate = {"sizes": {"3": SAME, "4": SAME}}
    varied = {"sizes": {"3": SAME, "4": {**SAME, "hole_ratio": 0.2}}}
    runs = [_run(degenerate, varied), _run(degenerate, "not a configuration")]
    # round 0's random default is never counted: only the engineer's rounds
    assert proposal_counts(runs) == {"proposals": 4, "repeating": 2}
    assert proposal_counts([_run(degenerate, source="branch:x")]) == {"proposals": 0, "repeating": 0}

    assert "| llm | 4 | 2 (50 %) |" in proposals_markdown([Arm("llm", runs)])
    assert proposals_markdown([]) == ""
