"""``benchmarks/bench_teach.py``: its scoring and its table without ``trl``; its ``grpo`` learner with it."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts' library
bench = importlib.import_module("bench_teach")
ROOT = Path(__file__).resolve().parents[1]


def test_describe_counts_verdicts_conflicts_and_uncopied_lines() -> None:
    """Board by board flags, the conflicts among failures, and answer lines without their scratchpad line."""
    from envengineer.mapf.instance import Instance

    inst = Instance.from_dict(
        {
            "id": "swap",
            "grid": ["...", "...", "..."],
            "starts": [[0, 0], [0, 2]],
            "goals": [[0, 2], [0, 0]],
            "optimal_soc": 6,
            "optimal_makespan": 4,
            "shortest_sum": 4,
        }
    )
    optimal = "<answer>\nA0: RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>"
    conflict = "<answer>\nA0: RIGHT RIGHT\nA1: LEFT LEFT\n</answer>"
    rec = bench.describe([inst, inst, inst], [optimal, conflict, "no plan"])
    assert rec["valid_flags"] == [1, 0, 0] and rec["optimal_flags"] == [1, 0, 0]
    assert rec["failures"] == {"vertex_conflict": 1, "parse_error": 1}
    assert rec["conflict_share"] == 0.5
    assert rec["miscopied_lines"] == 1.0  # no scratchpad at all: no answer line copies one


def test_table_pairs_the_runs_with_the_record_before(tmp_path: Path, capsys) -> None:
    before = {"sets": {"2": {"valid_flags": [0, 0, 1, 1], "optimal_flags": [0, 0, 0, 1]}}}
    after = {"sets": {"2": {"valid_flags": [1, 1, 1, 1], "optimal_flags": [0, 0, 0, 1]}}}
    files = []
    for name, rec in (("before", before), ("a", after), ("b", after)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(rec), encoding="utf-8")
    assert bench.main(["table", *map(str, files)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("2 agent(s): valid 50.0 -> 100.0: +50.0") and "optimal 25.0 -> 25.0: +0.0" in line


def test_the_script_and_its_none_learner_run_without_trl(tmp_path: Path) -> None:
    """Only the learners that train need ``trl``: the import and ``--learner none`` run with it blocked."""
    pytest.importorskip("transformers")
    code = (
        "import sys; sys.modules['trl'] = None; sys.path.insert(0, 'benchmarks')\n"
        "import bench_teach\n"
        "from envengineer.models.small_policy import init_policy\n"
        f"policy = init_policy({str(tmp_path / 'policy')!r}, size='tiny', seed=0)\n"
        "argv = ['--model', str(policy), '--learner', 'none', '--samples', '8', '--sizes', '3']\n"
        "argv += ['--agents', '2']\n"
        "argv += ['--per-cell', '1', '--eval-agents', '1', '--max-new-tokens', '8']\n"
        f"argv += ['--out', {str(tmp_path / 'run')!r}, '--json', {str(tmp_path / 'none.json')!r}]\n"
        "sys.exit(bench_teach.main(argv))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = json.loads((tmp_path / "none.json").read_text())
    assert "train" not in rec and len(rec["sets"]["1"]["valid_flags"]) == 18


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
