"""``benchmarks/bench_warm_start.py``: the training boards' hole ratios (``--holes``), ``--stop-at-step``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from envengineer.mapf.config import RoundConfig

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_DIR))  # the script imports common, the scripts' library beside it
_spec = importlib.util.spec_from_file_location("bench_warm_start", _DIR / "bench_warm_start.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
common = importlib.import_module("common")  # the training boards: common.training_boards, uniform_holes


def holes(inst) -> int:
    return sum(row.count("H") for row in inst.grid)


def test_holes_argument() -> None:
    assert bench.parse_args([]).holes == 0.25
    assert bench.parse_args(["--holes", "uniform"]).holes is None
    assert bench.parse_args(["--holes", "0.4"]).holes == 0.4
    for bad in ("1.0", "-0.1", "many"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            bench.hole_ratio(bad)


def test_a_fixed_ratio_gives_every_board_the_same_number_of_holes() -> None:
    boards = bench.training_boards([1, 2], [4, 6], 40, 0, frozenset(), 0.25)
    assert len(boards) == 40
    assert {(b.size, holes(b)) for b in boards} == {(4, 4), (6, 9)}  # round(0.25 * n * n)


def config(agents: int, sizes: list[int], count: int) -> RoundConfig:
    knobs = {"data_ratio": 1.0, "hole_ratio": 0.25, "wait_ratio": 0.5 if agents > 1 else 0.0}
    return RoundConfig.model_validate(
        {"sizes": {n: knobs for n in sizes}, "num_agents": agents, "num_samples": count}
    )


def test_uniform_holes_spreads_the_ratio_like_the_benchmark() -> None:
    boards = common.uniform_holes(config(2, [3, 4, 8], 10), seed=3, exclude=frozenset())
    # generate_round's counts: sizes in equal shares (the remainder to the first), half need a wait
    assert Counter(b.size for b in boards) == {3: 4, 4: 3, 8: 3}
    assert Counter((b.size, b.needs_wait) for b in boards)[(3, True)] == 2
    ratios = [holes(b) / b.size**2 for b in boards]
    assert all(0.0 <= r <= 0.5 for r in ratios)
    assert len({holes(b) for b in boards if b.size == 8}) > 1  # not one ratio for every board
    one = common.uniform_holes(config(1, [5], 6), seed=3, exclude=frozenset())
    assert not any(b.needs_wait for b in one)  # one agent never needs a wait


def test_uniform_holes_keep_the_held_out_boards_out() -> None:
    first = common.uniform_holes(config(1, [3], 20), seed=0, exclude=frozenset())
    banned = frozenset(b.board_hash() for b in first[:5])
    again = common.uniform_holes(config(1, [3], 20), seed=0, exclude=banned)
    assert not banned & {b.board_hash() for b in again}


def test_training_boards_mix_agent_counts_in_equal_shares() -> None:
    boards = bench.training_boards([1, 2, 3], [3, 4], 30, 1, frozenset(), None)
    assert Counter(b.num_agents for b in boards) == {1: 10, 2: 10, 3: 10}
    # shuffled together: the first ten are not all one count
    assert len({b.num_agents for b in boards[:10]}) > 1


def test_stop_at_step_ends_training_there_with_the_longer_schedule(tmp_path) -> None:
    """``--stop-at-step 2`` stops a 10-step schedule after its second step, whatever ``--minutes`` allows."""
    pytest.importorskip("envengineer.training.sft")
    record = tmp_path / "record.json"
    argv = ["--agents", "1", "--sizes", "3", "--samples", "64", "--steps", "10", "--minutes", "60"]
    argv += ["--per-cell", "1", "--eval-agents", "1", "--max-completion-length", "64"]
    argv += ["--stop-at-step", "2", "--out", str(tmp_path / "w"), "--json", str(record)]
    assert bench.main(argv) == 0
    rec = json.loads(record.read_text())
    assert rec["steps"] == 2 and rec["args"]["steps"] == "10"
