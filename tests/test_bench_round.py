"""``benchmarks/bench_round.py``: its table of one round's effect, by hand on tiny records."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts' library
bench = importlib.import_module("bench_round")


def record(steps: str, flags2: list[int], flags3: list[int], by2: dict, by3: dict) -> dict:
    args = {"steps": steps, "agents": "2,3", "sizes": "3,9", "lr": "0.0003"}
    return {
        "args": args,
        "2": {"valid": 100 * sum(flags2) / len(flags2), "by_size": by2, "flags": flags2},
        "3": {"valid": 100 * sum(flags3) / len(flags3), "by_size": by3, "flags": flags3},
    }


def test_table_pairs_boards_with_the_first_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sizes = {str(n): 0.0 for n in range(3, 11)}
    before = record("0", [1, 0, 0, 0], [1, 1, 0, 0], sizes, sizes)
    # one two-agent board more solved, the same three-agent ones: +1 board of 8 = +12.5 points, every
    # resample of the differences [0, 100, 0, 0, 0, 0, 0, 0] averages between 0 and 100
    after = record("300", [1, 1, 0, 0], [1, 1, 0, 0], {**sizes, "9": 50.0, "10": 0.0}, sizes)
    paths = []
    for name, rec in (("before", before), ("after", after)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(rec))
    assert bench.main(["table", *map(str, paths)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2] == "| no training | 25.0 (0.0 · 0.0) | 50.0 (0.0 · 0.0) | +0.00 [+0.00, +0.00] |"
    name, two, three, diff = [c.strip() for c in rows[3].strip("|").split("|")]
    assert (name, two, three) == (
        "agents 2,3, sizes 3,9, lr 0.0003, 300 steps",
        "50.0 (0.0 · 25.0)",
        "50.0 (0.0 · 0.0)",
    )
    assert diff.startswith("+12.50 [+0.00, +")


def test_summary_splits_the_trainees_sizes_from_the_new_ones() -> None:
    rec = {"valid": 30.0, "by_size": {str(n): (60.0 if n < 9 else 0.0) for n in range(3, 11)}}
    assert bench.summary(rec).startswith("valid 30.0 (sizes 3-8 60.0, 9-10 0.0)")


def test_the_round_trains_with_the_packaged_sft_round_preset() -> None:
    """``sft-round`` read from the package is the ``sft-small`` + overrides the script built before: every
    setting the same, only the preset's description differs; ``--lr`` still sets the rate."""
    from envengineer.training.presets import load_preset

    rebuilt = load_preset("sft-small", "sft").model_dump(mode="json")
    rebuilt["max_completion_length"] = bench.TOKENS
    rebuilt["sft"].update(learning_rate=3e-4, warmup_steps=10, disable_tqdm=True)
    packaged = bench.round_preset(3e-4)
    assert packaged == {**rebuilt, "description": packaged["description"]}
    assert packaged["description"] != rebuilt["description"]
    assert bench.round_preset(1e-4)["sft"] == {**packaged["sft"], "learning_rate": 1e-4}
