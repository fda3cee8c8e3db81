"""``benchmarks/bench_teach.py --learner grpo``: guided GRPO sized in steps, scored as the others are."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts import each other
bench = importlib.import_module("bench_teach")


def test_the_grpo_learner_takes_its_steps_and_is_scored_on_the_held_out_set(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from envengineer.models.small_policy import init_policy

    policy = init_policy(tmp_path / "policy", size="tiny", seed=0)
    record = tmp_path / "grpo.json"
    argv = ["--model", str(policy), "--learner", "grpo", "--max-steps", "1", "--samples", "16"]
    argv += ["--sizes", "3", "--agents", "2", "--per-cell", "1", "--eval-agents", "2"]
    argv += ["--max-new-tokens", "32", "--out", str(tmp_path / "run"), "--json", str(record)]
    assert bench.main(argv) == 0
    rec = json.loads(record.read_text())
    assert rec["train"]["steps"] == 1 and rec["train"]["seconds"] > 0
    assert (tmp_path / "run" / "grpo" / "checkpoint" / "model.safetensors").exists()
    held_out = rec["sets"]["2"]
    assert len(held_out["valid_flags"]) == 18 and "diagnostic" in held_out
