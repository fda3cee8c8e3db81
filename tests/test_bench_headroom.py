"""``bench_headroom.py --summary``: the oracle's and each candidate's gain over the fixed arm, over seeds."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
bench = importlib.import_module("bench_headroom")


def _cand(valid: float, optimal: float = 0.0) -> dict:
    return {"vs_fixed_report": {"valid": {"mean": valid}, "optimal": {"mean": optimal}}}


def test_the_oracle_is_the_chosen_candidate_of_each_seed() -> None:
    records = [
        {
            "rounds": [
                {"round": 1, "chosen": "climb", "candidates": {"climb": _cand(2.0), "fixed": _cand(0.0)}}
            ]
        },
        {
            "rounds": [
                {"round": 1, "chosen": "fixed", "candidates": {"climb": _cand(-1.0), "fixed": _cand(0.0)}}
            ]
        },
    ]
    text = bench.summary(records)
    assert "round 1: chosen climb, fixed" in text
    # the oracle takes +2.0 from seed 0 and 0.0 from seed 1: mean +1.00, resampled means 0, 1 or 2
    assert "| oracle | +1.00 [+0.00, +2.00] | +0.00 [+0.00, +0.00] |" in text
    assert "| climb | +0.50 [-1.00, +2.00] |" in text
    assert "| hindsight | +1.00 [+0.00, +2.00] |" in text  # the best on the report half: climb, then fixed
