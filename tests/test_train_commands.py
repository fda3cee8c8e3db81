"""`train`, `sft` and `teach` go one way from their arguments to the trainer, whichever the data source:
every option reaches the trainer the same with `--round` as with `--instances` (issue 43).

The trainers and the round's generation are replaced by recorders; a round "generates" the boards of the
instances file, so the two sources hand the trainer the same boards and should hand it the same options.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from envengineer.cli import main
from envengineer.mapf.benchmark import load_benchmark
from envengineer.mapf.config import round0_config
from envengineer.mapf.instance import load_instances
from small_sets import write_small_sets

grpo = pytest.importorskip("envengineer.training.grpo")
sft_module = pytest.importorskip("envengineer.training.sft")
teach_module = pytest.importorskip("envengineer.training.teach")
presets = pytest.importorskip("envengineer.training.presets")

PRESET = {"train": ["--grpo", "grpo-cpu"], "sft": ["--preset", "sft-cpu"], "teach": ["--model", "policy"]}
KIND = {"train": "grpo", "sft": "sft"}
#: Every option of each command that is not the data source, the output or the preset.
OPTIONS = {
    "train": ["--epochs", "2", "--max-steps", "3", "--seed", "5", "--reward-shape", "sparse",
              "--report-to", "tensorboard"],
    "sft": ["--epochs", "2", "--max-steps", "3", "--seed", "5", "--report-to", "tensorboard"],
    "teach": ["--minutes", "2", "--max-steps", "3", "--seed", "5", "--temperature", "0.5",
              "--learning-rate", "0.001"],
}  # fmt: skip


@pytest.fixture
def seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the trainers and the round's generation received, by name; ``files`` the files to train on."""
    sets = write_small_sets(tmp_path, 67)
    round_file = tmp_path / "round.yaml"
    round_file.write_text(yaml.safe_dump(round0_config(0).model_dump(mode="json")))
    boards = load_instances(sets["validation"])
    record: dict[str, Any] = {"files": {"round": round_file, "instances": sets["validation"], **sets}}

    def generate(config: Any, out: Path, **kw: Any) -> tuple[list, float]:
        record["generate"] = (out, kw)
        return list(boards), 0.5

    def trainer(name: str, result: Any) -> Any:
        def run(model: Any, instances: Any, **kw: Any) -> Any:
            record[name] = (model, [i.id for i in instances], kw)
            return result

        return run

    trained = SimpleNamespace(checkpoint=Path("ckpt"), metrics={}, steps=0, seconds=0.0)
    taught = {"history": [], "steps": 0, "rollins": 0, "seconds": 0.0, "checkpoint": "ckpt"}
    monkeypatch.setattr(grpo, "require_train_deps", lambda: None)
    monkeypatch.setattr(grpo, "generate_round_data", generate)
    monkeypatch.setattr(grpo, "train_round", trainer("train", trained))
    monkeypatch.setattr(sft_module, "sft", trainer("sft", trained))
    monkeypatch.setattr(teach_module, "teach", trainer("teach", taught))
    return record


def _run(seen: dict[str, Any], command: str, source: str, *extra: str) -> tuple[Any, list[str], dict]:
    out = seen["files"]["round"].parent / f"out-{command}-{source}"
    argv = [command, f"--{source}", str(seen["files"][source]), *PRESET[command], "--out", str(out), *extra]
    assert main(argv) == 0
    model, ids, kw = seen.pop(command)
    return model, ids, {**kw, "out_dir": Path(kw["out_dir"]).name}


@pytest.mark.parametrize("source", ["round", "instances"])
@pytest.mark.parametrize("command", ["train", "sft"])
def test_report_to_reaches_the_trainer_from_either_source(
    seen: dict[str, Any], command: str, source: str
) -> None:
    pytest.importorskip("tensorboard")
    _, _, kw = _run(seen, command, source, "--report-to", "tensorboard")
    preset = presets.load_preset(kw["preset"], KIND[command])
    assert preset.model_dump(mode="json")[KIND[command]]["report_to"] == ["tensorboard"]


@pytest.mark.parametrize("command", ["train", "sft", "teach"])
def test_both_sources_hand_the_trainer_the_same_options(seen: dict[str, Any], command: str) -> None:
    if "--report-to" in OPTIONS[command]:
        pytest.importorskip("tensorboard")
    model, ids, from_round = _run(seen, command, "round", *OPTIONS[command])
    model_i, ids_i, from_file = _run(seen, command, "instances", *OPTIONS[command])
    assert (model, ids) == (model_i, ids_i)
    if command != "teach":  # the generation's seconds go into the trainer's timing; a file's took none
        assert (from_round.pop("_generate_seconds"), from_file.pop("_generate_seconds", 0.0)) == (0.5, 0.0)
    assert (from_round.pop("out_dir"), from_file.pop("out_dir")) == (
        f"out-{command}-round",
        f"out-{command}-instances",
    )
    assert from_round == from_file


def test_a_round_is_generated_from_its_seed_without_held_out_boards(seen: dict[str, Any]) -> None:
    files = seen["files"]
    val = {i.board_hash() for i in load_instances(files["validation"])}
    bench = {i.board_hash() for i in load_benchmark()}
    for command, extra, seed in [
        ("train", ["--seed", "5"], 5),
        ("train", ["--seed", "5", "--data-seed", "9"], 9),
        ("sft", ["--seed", "5", "--data-seed", "9"], 9),
        ("teach", ["--seed", "5"], 5),  # teach has no --data-seed: its generator takes --seed
    ]:
        _run(seen, command, "round", *extra, "--exclude", str(files["validation"]))
        out, kw = seen.pop("generate")
        assert out.name == f"out-{command}-round"
        assert kw["seed"] == seed and kw["exclude"] == bench | val, command
