"""``scripts/package_trainee.py``: the manifest says what the training run recorded, or nothing is copied."""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from envengineer.models.trainee import trainee_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
package = importlib.import_module("package_trainee")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
VERSIONS = {
    "python": "3.0.1",
    "envengineer": "0.0.9",
    "torch": "9.9.9",
    "transformers": "0.0.1",
    "trl": "1.2",
}
WAITS = {"1": 0.0, "2": 0.5, "3": 0.5}


def rates(valid: float) -> dict[str, Any]:
    head = {"valid": valid, "optimal": valid - 1}
    return {"by_size": {"3": {"boards": 10}, "4": {"boards": 6}}, "sizes_3_8": head}


def fake_record() -> dict[str, Any]:
    """A training run's record as the current ``bench_warm_start.py`` writes it (values unlike today's)."""
    args = {"format": "free-moves", "agents": "1,2,3", "sizes": "3,4", "samples": "96", "holes": "0.25"}
    args |= {"seed": "7", "minutes": "2.0", "max_completion_length": "640", "steps": "12"}
    args |= {"length_groups": "2", "save_every": "0", "preset": "sft-small"}
    return {
        "args": args,
        "commit": COMMIT,
        "versions": VERSIONS,
        "data": {
            "agents": [1, 2, 3],
            "sizes": [3, 4],
            "samples": 96,
            "hole_ratio": 0.25,
            "wait_ratio": WAITS,
        },
        "format": "free-moves",
        "steps": 12,
        "train_minutes": 0.5,
        "final_loss": 0.25,
        "sets": {
            "1": {"policy": rates(90.0), "greedy": rates(100.0)},
            "2": {"policy": rates(40.0), "greedy": rates(45.0)},
        },
    }


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run folder: its record and a checkpoint (the shipped trainee's files) with its metrics.json."""
    folder = tmp_path / "run"
    checkpoint = folder / "sft" / "checkpoint"
    shutil.copytree(trainee_path(), checkpoint)
    (checkpoint / "manifest.json").unlink()
    (folder / "sft" / "metrics.json").write_text(json.dumps({"steps": 12}), encoding="utf-8")
    (folder / "record.json").write_text(json.dumps(fake_record()), encoding="utf-8")
    monkeypatch.setattr(package, "answer_checks", lambda out: [])  # the model's answers: another test's
    return folder


def test_the_manifest_takes_the_build_from_the_training_record(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "trainee"
    assert package.main([str(run), "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert m["data"]["wait_ratio"] == WAITS  # one agent never waits: not a 0.5 written by the packager
    assert m["versions"] == VERSIONS  # the versions that trained, not those that package
    assert m["commit"] == COMMIT and m["seed"] == 7 and m["steps"] == 12
    assert "--agents 1,2,3 --seed 7 --minutes 2.0" in m["rebuild"][0] and "--samples 96" in m["rebuild"][0]
    assert m["held_out"]["2"] == {"boards": 16, "valid": 40.0, "optimal": 39.0, "greedy_valid": 45.0}
    weights = (out / "model.safetensors").read_bytes()
    assert m["files"]["model.safetensors"]["sha256"] == hashlib.sha256(weights).hexdigest()


@pytest.mark.parametrize(
    "path", ["versions", "versions.torch", "data.wait_ratio", "commit", "steps", "args.seed"]
)
def test_a_record_without_a_field_is_refused_and_nothing_is_copied(
    run: Path, tmp_path: Path, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = copy.deepcopy(fake_record())
    *parents, last = path.split(".")
    holder = record
    for key in parents:
        holder = holder[key]
    del holder[last]
    (run / "record.json").write_text(json.dumps(record), encoding="utf-8")
    out = tmp_path / "trainee"
    out.mkdir()
    (out / "kept.txt").write_text("the package before", encoding="utf-8")
    assert package.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"lacks {path}" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]


def test_a_checkpoint_of_another_run_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run / "sft" / "metrics.json").write_text(json.dumps({"steps": 6000}), encoding="utf-8")
    assert package.main([str(run), "--out", str(tmp_path / "trainee")]) == 2
    assert "counts 6000 steps but the training record" in capsys.readouterr().err
    assert not (tmp_path / "trainee").exists()
