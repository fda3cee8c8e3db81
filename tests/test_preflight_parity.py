"""A file that dry-runs clean starts: `run --dry-run` refuses what the real run refuses before its first
stage, with the same one line (issue 17, case 6: the red-team's eight cases)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml

from envengineer.cli import main
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pf")
    good = write_small_sets(d, 53)["benchmark"]
    raw = good.read_bytes()
    (d / "latin1.jsonl").write_bytes(raw[:50] + b"\xff\xfe" + raw[50:])
    (d / "cut.jsonl").write_bytes(raw[: len(raw) // 2])
    (d / "cut.jsonl.gz").write_bytes(gzip.compress(raw)[:200])
    return {"good": good, "latin1": d / "latin1.jsonl", "cut": d / "cut.jsonl", "cutgz": d / "cut.jsonl.gz"}


def _file(tmp_path: Path, bench: Path, **extra: Any) -> Path:
    data = {
        "name": "t-preflight",
        "policy": "scripted:greedy",
        "rounds": 1,
        "samples_per_round": 4,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
        "evaluation": {"batch_size": 4, "benchmark_path": str(bench)},
        "engineer": {"kind": "fixed"},
        **extra,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


VAL = {"per_cell": 1, "max_size": 4}
CASES = [
    ("agents [0]", {"validation": {**VAL, "agents": [0]}}, "good", "greater than or equal to 1"),
    ("agents [-2]", {"validation": {**VAL, "agents": [-2]}}, "good", "greater than or equal to 1"),
    ("agents [true]", {"validation": {**VAL, "agents": [True]}}, "good", "valid integer (got true)"),
    ("agents [1]", {"validation": {**VAL, "agents": [1]}}, "good", "1 agents do not fit on a 1x1 grid"),
    ("9 agents", {"num_agents": 9}, "good", "num_agents: 9 agents do not fit on a 3x3 grid"),
    ("self + scripted", {"engineer": {"kind": "self"}, "rounds": 2}, "good", "needs a language model"),
    ("not UTF-8", {}, "latin1", "not UTF-8 text"),
    ("truncated", {}, "cut", "not valid JSON"),
    ("truncated gz", {}, "cutgz", "not a complete gzip file"),
]


@pytest.mark.parametrize("case, extra, which, message", CASES, ids=[c[0] for c in CASES])
def test_dry_run_refuses_what_the_run_refuses(
    tmp_path: Path,
    bench: dict[str, Path],
    case: str,
    extra: dict[str, Any],
    which: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _file(tmp_path, bench[which], **extra)
    out = tmp_path / "run"
    assert main(["run", str(path), "--dry-run", "--out", str(out)]) == 2
    dry = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in dry
    assert main(["run", str(path), "--out", str(out), "--no-report", "--no-progress"]) == 2
    real = capsys.readouterr().err.strip().splitlines()[-1]
    assert real == dry and not out.exists()  # refused before the run directory is made


def test_a_clean_dry_run_starts(tmp_path: Path, bench: dict[str, Path]) -> None:
    path = _file(tmp_path, bench["good"])
    assert main(["run", str(path), "--dry-run", "--out", str(tmp_path / "run")]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-report", "--no-progress"]) == 0
