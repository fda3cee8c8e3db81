"""Trackers: report_to passes from experiment files and the CLI to TRL; the loop's metrics in TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError
from envengineer.integrations import MissingDependency
from envengineer.integrations.trackers import (
    log_round,
    loop_trackers,
    normalize_report_to,
    preset_with_report_to,
    round_scalars,
)
from envengineer.loop.experiment import Experiment, load_experiment
from small_sets import write_small_sets

pytest.importorskip("tensorboard")
pytest.importorskip("trl")


def _events(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _text(acc: Any, tag: str) -> list[str]:
    return [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(f"{tag}/text_summary")]


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 21)


def _experiment(sets: dict[str, Path], **training: Any) -> dict[str, Any]:
    return {
        "name": "t-trackers",
        "policy": "scripted:greedy",
        "rounds": 2,
        "samples_per_round": 8,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
        "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
        "engineer": {"kind": "random"},
        "training": training,
    }


def test_normalize_report_to():
    assert normalize_report_to(None) is None
    assert normalize_report_to("TensorBoard") == ["tensorboard"]
    assert normalize_report_to(["wandb", "mlflow", "wandb"]) == ["wandb", "mlflow"]
    for bad, needle in (("tensorbored", "unknown tracker"), ("none,wandb", "stand alone"), ("", "empty")):
        with pytest.raises(ConfigError, match=needle):
            normalize_report_to(bad)


def test_experiment_field_validates_and_round_trips(tmp_path, sets):
    exp = Experiment.model_validate(_experiment(sets, report_to="tensorboard"))
    assert exp.training.report_to == ["tensorboard"]
    assert Experiment.model_validate(_experiment(sets)).training.report_to is None
    f = tmp_path / "e.yaml"
    f.write_text(exp.to_yaml())
    assert load_experiment(f).training.report_to == ["tensorboard"]
    with pytest.raises(ConfigError, match=r"training\.report_to.*unknown tracker 'tb'"):
        load_experiment(f, {"training.report_to": "tb"})


def test_report_to_reaches_trls_configs(tmp_path):
    assert preset_with_report_to("grpo-cpu", None) == "grpo-cpu"
    grpo = preset_with_report_to("grpo-cpu", "tensorboard")
    assert grpo.grpo["report_to"] == ["tensorboard"]
    assert grpo.build_config(output_dir=tmp_path / "g").report_to == ["tensorboard"]  # trl.GRPOConfig
    sft = preset_with_report_to("sft-cpu", ["tensorboard"], "sft")
    assert sft.build_config(output_dir=tmp_path / "s").report_to == ["tensorboard"]  # trl.SFTConfig
    assert preset_with_report_to("grpo-cpu", "none").build_config(output_dir=tmp_path / "n").report_to == []


def test_a_tracker_that_is_not_installed_names_the_package():
    import importlib.util

    missing = next(n for n in ("wandb", "mlflow", "trackio") if importlib.util.find_spec(n) is None)
    with pytest.raises(MissingDependency, match=f"pip install {missing}"):
        preset_with_report_to("grpo-cpu", missing)


def test_round_scalars_and_which_trackers_get_loop_metrics(tmp_path):
    scores = {
        "summary": {"valid": 40.0, "optimal": 20.0, "makespan_optimal": 10.0},
        "table": {"3": {"sizes": {"3": {"n": 2, "valid": 50.0, "optimal": 0.0}}, "sum": {"valid": 50.0}}},
        "failures": {"3": {"3": {"hole": 1}, "4": {"hole": 2, "parse_error": 1}}},
    }
    s = round_scalars(scores, {"sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.5}}})
    assert s["validation/valid"] == 40.0 and s["validation/3agents/3x3/valid"] == 50.0
    assert s["failures/hole"] == 3.0 and s["failures/3agents_4x4/parse_error"] == 1.0
    assert s["config/3x3/hole_ratio"] == 0.2 and s["validation/3agents/sum/valid"] == 50.0
    assert loop_trackers(None) == [] and loop_trackers(["none"]) == [] and loop_trackers(["wandb"]) == []
    assert loop_trackers(["all"]) == loop_trackers(["tensorboard", "wandb"]) == ["tensorboard"]
    assert log_round(None, "/nonexistent", 0, scores) is None  # nothing asked for, nothing written
    config = {"sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.5}}}
    folder = log_round(["tensorboard"], tmp_path, 4, scores, config, "more holes on 3x3")
    acc = _events(folder)
    assert _text(acc, "engineer/rationale") == ["more holes on 3x3"]
    assert [(e.step, e.value) for e in acc.Scalars("failures/hole")] == [(4, 3.0)]


def test_loop_writes_per_round_metrics_read_back_from_event_files(tmp_path, sets):
    import yaml

    from envengineer.loop.components import Components
    from envengineer.loop.runner import run_experiment

    seen: list[Any] = []

    def trainer(model, instances, *, out_dir, preset, epochs, seed, max_steps):
        seen.append(preset)
        return {"checkpoint": model, "steps": 1, "seconds": 0.0, "metrics": {}}

    exp = Experiment.model_validate(
        {**_experiment(sets, report_to=["tensorboard"]), "policy": None, "model": "scripted:greedy"}
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    run_experiment(exp, run, components=Components(trainer=trainer))
    assert [p.grpo["report_to"] for p in seen] == [["tensorboard"], ["tensorboard"]]  # reaches TRL's config

    acc = _events(run / "tensorboard")
    for r in (0, 1):
        scores = json.loads((run / f"round_{r:02d}" / "validation" / "scores.json").read_text())
        assert acc.Scalars("validation/valid")[r].step == r
        assert acc.Scalars("validation/valid")[r].value == pytest.approx(scores["summary"]["valid"])
        assert acc.Scalars("validation/3agents/sum/optimal")[r].value == pytest.approx(
            scores["table"]["3"]["sum"]["optimal"]
        )
        for cat, n in scores["failures"]["3"]["5"].items():
            assert acc.Scalars(f"failures/3agents_5x5/{cat}")[r].value == n
        applied = yaml.safe_load((run / f"round_{r:02d}" / "config.applied.yaml").read_text())
        for size, knobs in applied["sizes"].items():
            assert acc.Scalars(f"config/{size}x{size}/hole_ratio")[r].value == pytest.approx(
                knobs["hole_ratio"]
            )
    assert "hole_ratio" in _text(acc, "config")[1]


def test_cli_run_report_to_and_bad_names(tmp_path, sets, capsys):
    from envengineer.cli import main

    f = tmp_path / "e.yaml"
    f.write_text(Experiment.model_validate(_experiment(sets)).to_yaml())
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    argv = ["run", str(f), "--out", str(run), "--report-to", "tensorboard", "--no-progress", "--no-report"]
    assert main(argv) == 0
    assert "report_to:\n  - tensorboard" in (run / "experiment.yaml").read_text()
    assert len(_events(run / "tensorboard").Scalars("validation/optimal")) == 2
    capsys.readouterr()
    assert main(["run", str(f), "--report-to", "tensorboard,wandb", "--dry-run"]) == 0
    assert "trackers:    tensorboard, wandb" in capsys.readouterr().out
    assert main(["run", str(f), "--report-to", "tensorbored", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown tracker 'tensorbored'" in err and err.count("\n") == 1


def test_cli_train_report_to_tensorboard_writes_trls_events(tmp_path, capsys):
    """One real GRPO step on the tiny in-memory model; TRL's TensorBoard events land under the output."""
    import yaml

    from envengineer.cli import main
    from test_training import build_tiny_model, grpo_preset

    model = build_tiny_model(tmp_path / "tiny")
    (tmp_path / "round.yaml").write_text(
        yaml.safe_dump(
            {"num_samples": 4, "sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.0, "wait_ratio": 0.5}}}
        )
    )
    preset = grpo_preset(lora=False)
    preset["grpo"]["max_steps"] = 1
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(preset))  # says report_to: none
    out = str(tmp_path / "out")
    argv = ["train", "--model", str(model), "--round", str(tmp_path / "round.yaml"), "--grpo",
            str(tmp_path / "tiny.yaml"), "--out", out, "--report-to", "tensorboard"]  # fmt: skip
    assert main(argv) == 0
    runs = list((tmp_path / "out" / "trainer" / "runs").iterdir())
    assert len(runs) == 1
    tags = _events(runs[0]).Tags()["scalars"]
    assert any(t.startswith("train/") and "reward" in t for t in tags), tags
