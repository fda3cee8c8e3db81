"""The paired gains, pinned: one implementation (:mod:`envengineer.loop.intervals`) gives every figure the
three copies before it gave, to the last printed digit.

The expected values below were computed by the code before the merge (issue 60, item 3) on these inputs:
``bench_grpo.paired_gain`` (now :func:`~envengineer.loop.intervals.paired_seed_gain`),
``envengineer.loop.report_data.paired_gain`` (its own ``bootstrap_mean`` of the boards' differences, now
through :func:`~envengineer.loop.intervals.paired_board_gain`) and ``bench_round.py table`` and
``bench_teach.py table`` (their printed lines). The same random numbers are drawn in the same order, so
the seeded figures match exactly; a change here changes published tables.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from envengineer.loop.intervals import paired_board_gain, paired_seed_gain
from envengineer.loop.report_data import paired_gain as report_gain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts' library


def flags(seed: int, boards: list[int], p: float) -> list[list[int]]:
    """Per seed, 0/1 flags on ``boards[s]`` boards, each 1 with probability ``p`` (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    return [(rng.random(b) < p).astype(int).tolist() for b in boards]


BEFORE = flags(11, [40] * 3, 0.4)
AFTER = flags(12, [40] * 3, 0.55)
OWN_BEFORE = flags(13, [30, 25, 40, 12], 0.4)
OWN_AFTER = flags(14, [30, 25, 40, 12], 0.6)
SHARED = {"seeds": 3, "boards": [40, 40, 40], "warm_pct": 48.33, "after_pct": 50.83}
SHARED_GAIN = {**SHARED, "per_seed": [12.5, -12.5, 7.5], "mean": 2.5}
OWN = {"seeds": 4, "boards": [30, 25, 40, 12], "warm_pct": 33.67, "after_pct": 57.71}
OWN_GAIN = {**OWN, "per_seed": [23.33, 12.0, 27.5, 33.33], "mean": 24.04}


@pytest.mark.parametrize(
    ("shared", "options", "expected"),
    [
        (True, {}, {**SHARED_GAIN, "low": -18.33, "high": 23.33}),
        (True, {"resamples": 500, "seed": 7}, {**SHARED_GAIN, "low": -17.5, "high": 22.5}),
        (False, {}, {**OWN_GAIN, "low": 8.5, "high": 40.21}),
        (False, {"resamples": 500, "seed": 7}, {**OWN_GAIN, "low": 10.39, "high": 40.11}),
    ],
)
def test_the_seed_gain_is_the_benchmarks_old_one(shared: bool, options: dict, expected: dict) -> None:
    before, after = (BEFORE, AFTER) if shared else (OWN_BEFORE, OWN_AFTER)
    assert paired_seed_gain(before, after, shared_boards=shared, **options) == expected


def test_one_seed_has_the_old_mean_and_no_interval() -> None:
    assert paired_seed_gain(BEFORE[:1], AFTER[:1], shared_boards=True) == {
        "seeds": 1,
        "boards": [40],
        "warm_pct": 42.5,
        "after_pct": 55.0,
        "per_seed": [12.5],
        "mean": 12.5,
        "low": None,
        "high": None,
    }


def test_the_reports_gain_over_the_starting_model_is_the_old_one() -> None:
    before = {
        "verdicts": [
            {"id": f"b{i}", "valid": bool(v), "optimal": bool(v and i % 3)} for i, v in enumerate(BEFORE[0])
        ]
    }
    after = {
        "verdicts": [
            {"id": f"b{i}", "valid": bool(v), "optimal": bool(v and i % 2)} for i, v in enumerate(AFTER[0])
        ]
    }
    after["verdicts"].append({"id": "extra", "valid": True})  # scored on one side only: left out
    assert report_gain(before, after) == {
        "n": 40,
        "valid": {"n": 40, "mean": 12.5, "low": -10.0, "high": 35.0},
        "optimal": {"n": 40, "mean": -5.0, "low": -22.5, "high": 12.5},
    }


def test_the_board_gain_is_the_bootstrap_of_the_old_differences() -> None:
    assert paired_board_gain(BEFORE[1], AFTER[1]) == {"n": 40, "mean": -12.5, "low": -32.5, "high": 7.5}


def _write(path: Path, record: dict) -> str:
    path.write_text(json.dumps(record))
    return str(path)


def test_the_round_and_teach_tables_print_the_old_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sizes = {str(n): 10.0 * (n - 2) for n in range(3, 11)}

    def record(steps: str, f2: list[int], f3: list[int]) -> dict:
        args = {"steps": steps, "agents": "2,3", "sizes": "3,10", "lr": "0.0003"}
        return {
            "args": args,
            "2": {"valid": 100 * sum(f2) / len(f2), "by_size": sizes, "flags": f2},
            "3": {"valid": 100 * sum(f3) / len(f3), "by_size": sizes, "flags": f3},
        }

    bench_round = importlib.import_module("bench_round")
    paths = [
        _write(tmp_path / "none.json", record("0", BEFORE[0], BEFORE[1])),
        _write(tmp_path / "a.json", record("300", AFTER[0], AFTER[1])),
    ]
    assert bench_round.main(["table", *paths]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| no training | 42.5 (35.0 · 75.0) | 57.5 (35.0 · 75.0) | +0.00 [+0.00, +0.00] |",
        "| agents 2,3, sizes 3,10, lr 0.0003, 300 steps | 55.0 (35.0 · 75.0) | 45.0 (35.0 · 75.0) "
        "| +0.00 [-15.00, +15.00] |",
    ]
    bench_teach = importlib.import_module("bench_teach")
    files = [
        _write(
            tmp_path / "before.json", {"sets": {"2": {"valid_flags": BEFORE[0], "optimal_flags": BEFORE[1]}}}
        )
    ]
    for s in range(3):
        rec = {"sets": {"2": {"valid_flags": AFTER[s], "optimal_flags": AFTER[(s + 1) % 3]}}}
        files.append(_write(tmp_path / f"t{s}.json", rec))
    assert bench_teach.main(["table", *files]) == 0
    assert capsys.readouterr().out.strip() == (
        "2 agent(s): valid 42.5 -> 50.8: +8.3 [-11.7, +27.5] [12.5, 2.5, 10.0]; "
        "optimal 57.5 -> 50.8: -6.7 [-25.8, +14.2] [-12.5, -5.0, -2.5]"
    )
