"""The round loop's heavy stages as their own processes: commands, retries, and the loop end to end on CPU
through the same subprocess path (2 training processes under torchrun, evaluation in its own process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from envengineer.cli import main
from envengineer.loop import launch as stages
from envengineer.loop.experiment import Experiment, load_experiment

REPO = Path(__file__).resolve().parents[1]
GPU_EXPERIMENTS = sorted(
    p for p in (REPO / "experiments" / "gpu").glob("*.yaml") if not p.name.startswith("_")
)


def experiment(**over: Any) -> Experiment:
    return Experiment.model_validate({"name": "t", "samples_per_round": 8, **over})


def test_auto_keeps_cpu_runs_in_process_and_launches_gpu_runs() -> None:
    assert not stages.uses_subprocesses(experiment())
    assert stages.uses_subprocesses(experiment(launch={"processes": 2}))
    assert stages.uses_subprocesses(experiment(evaluation={"backend": "vllm"}))
    vllm = experiment(evaluation={"backend": "vllm"})
    assert stages.evaluates_in_subprocess(vllm) and stages.engineer_backend(vllm) == "hf"
    assert stages.engineer_backend(experiment()) == "hf" and not stages.evaluates_in_subprocess(experiment())
    assert not stages.uses_subprocesses(
        experiment(evaluation={"backend": "vllm"}, launch={"stages": "inprocess"})
    )


def test_launch_problems_are_found_before_the_run(tmp_path: Path) -> None:
    bad = experiment(launch={"deepspeed_config": str(tmp_path / "nope.json"), "launcher": "torchrun"})
    problems = stages.check_launch(bad)
    assert any("not a file" in p for p in problems) and any(
        "needs launcher 'accelerate'" in p for p in problems
    )
    assert stages.check_launch(experiment(launch={"processes": 2, "launcher": "python"}))
    assert stages.check_launch(experiment()) == []


def test_commands_name_launcher_config_and_processes(tmp_path: Path) -> None:
    exp = experiment(
        model="Qwen/Qwen3-4B",
        training={"preset": "gpu"},
        launch={"processes": 8, "accelerate_config": "configs/accelerate/zero3.yaml"},
    )
    cmd = stages.train_command(
        exp,
        "train",
        model="m",
        instances=Path("i.jsonl.gz"),
        out_dir=Path("o"),
        preset="gpu",
        seed=3,
        epochs=2,
    )
    assert Path(cmd[0]).name == "accelerate" and cmd[1] == "launch"
    joined = " ".join(cmd)
    assert "--config_file configs/accelerate/zero3.yaml --num_processes 8 -m envengineer.cli train" in joined
    assert "--instances i.jsonl.gz --out o --grpo gpu --seed 3 --model m --epochs 2" in joined
    torch = stages.launch_prefix(experiment(launch={"processes": 2}).launch)
    assert Path(torch[0]).name == "torchrun" and torch[1:4] == ["--standalone", "--nproc_per_node", "2"]
    assert stages.launch_prefix(experiment().launch) == [sys.executable, "-m"]


@pytest.mark.parametrize("path", GPU_EXPERIMENTS, ids=lambda p: p.stem)
def test_every_gpu_experiment_dry_run_prints_its_commands(path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["run", str(path.relative_to(REPO)), "--dry-run", "--out", "runs/x"]) == 0
    out = capsys.readouterr().out
    exp = load_experiment(path)
    if exp.trains and exp.rounds:
        assert "launch --config_file configs/accelerate/single_gpu.yaml --num_processes 1" in out
        assert f"round {exp.rounds - 1} train:" in out and "-m envengineer.cli train --instances" in out
    assert (
        "benchmark: " in out
        and "-m envengineer.loop.stages evaluate --experiment runs/x/experiment.yaml" in out
    )


def test_a_failed_stage_is_retried_then_reported(tmp_path: Path, monkeypatch) -> None:
    """The first attempt crashes, the second writes the round's metrics: the trainer returns them."""
    out = tmp_path / "round_00" / "train"
    marker = tmp_path / "crashed-once"
    script = (
        "import json, pathlib, sys\n"
        f"m = pathlib.Path({str(marker)!r}); o = pathlib.Path({str(out)!r})\n"
        "if not m.exists():\n    m.write_text('x'); print('simulated crash'); sys.exit(3)\n"
        "(o / 'metrics.json').write_text(json.dumps({'checkpoint': str(o / 'checkpoint'), 'steps': 2}))\n"
    )
    monkeypatch.setattr(stages, "train_command", lambda *a, **k: [sys.executable, "-c", script])
    from test_training import tiny_instances

    trainer = stages.SubprocessTrainer(experiment(launch={"stages": "subprocess", "retries": 1}))
    result = trainer(None, tiny_instances(), out_dir=out, preset="cpu", seed=0, max_steps=1, epochs=1)
    assert result["steps"] == 2 and result["checkpoint"].endswith("checkpoint")
    log = (out / "stage.log").read_text()
    assert "### attempt 1" in log and "simulated crash" in log and "### attempt 2" in log
    marker.unlink()
    never = stages.SubprocessTrainer(experiment(launch={"stages": "subprocess", "retries": 0}))
    monkeypatch.setattr(
        stages, "train_command", lambda *a, **k: [sys.executable, "-c", "print('boom'); exit(4)"]
    )
    with pytest.raises(stages.StageFailed, match=r"failed 1 time\(s\) \(exit code 4\).*boom.*--resume"):
        never(None, tiny_instances(), out_dir=out, preset="cpu", seed=0, max_steps=1)


@pytest.mark.slow
def test_loop_end_to_end_through_subprocesses_with_two_torchrun_processes(tmp_path: Path) -> None:
    """Two rounds: each trains under ``torchrun --nproc_per_node 2`` on a tiny model, each validation and
    the benchmark run in their own process; the second round starts from the first round's checkpoint."""
    pytest.importorskip("trl")
    import os

    from envengineer.loop.components import Components
    from envengineer.loop.rundir import RunDir, read_json
    from envengineer.loop.runner import run_experiment
    from envengineer.mapf.config import ConfigSpace
    from small_sets import write_small_sets
    from test_training import build_tiny_model, write_tiny_grpo_preset

    sets = write_small_sets(tmp_path, 11)
    model = build_tiny_model(tmp_path / "tiny")
    preset = write_tiny_grpo_preset(tmp_path / "grpo-tiny.yaml")
    exp = Experiment.model_validate({
        "name": "t-stages", "model": str(model), "rounds": 2, "samples_per_round": 4,
        "training": {"preset": str(preset), "max_steps": 1},
        "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
        "evaluation": {"batch_size": 4, "max_new_tokens": 8, "benchmark_path": str(sets["benchmark"]),
                       "benchmark_limit": 2},
        "engineer": {"kind": "fixed"},
        "launch": {"stages": "subprocess", "processes": 2, "evaluation": "subprocess", "retries": 0},
    })  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    summary = run_experiment(exp, run, components=Components(space=ConfigSpace(sizes=(3, 4))))
    assert summary["n"] == 2 and RunDir(run).is_done(None, "benchmark")
    m0 = read_json(run / "round_00" / "train" / "metrics.json")
    m1 = read_json(run / "round_01" / "train" / "metrics.json")
    assert m0["steps"] == 1 and Path(m0["checkpoint"]).is_dir() and m1["model_in"] == m0["checkpoint"]
    assert "torchrun --standalone --nproc_per_node 2 -m envengineer.cli train" in m0["metrics"]["command"]
    epochs = [e["epoch"] for e in m0["metrics"]["log_history"] if "loss" in e]
    assert epochs == [0.5]  # 2 prompts per step, one per process: half of the round's 4 prompts
    log = (run / "round_00" / "train" / "stage.log").read_text()
    assert log.count("checkpoint:") == 1  # rank 0 reports once
    validation = len((run / "validation_set.jsonl").read_text().splitlines())
    for d, n in (("round_00/validation", validation), ("round_01/validation", validation), ("benchmark", 2)):
        scores = json.loads((run / d / "scores.json").read_text())
        assert scores["summary"]["n"] == n and "evaluate --experiment" in (run / d / "stage.log").read_text()


def test_evaluation_memory_settings_reach_the_vllm_engine_only() -> None:
    from envengineer.loop.components import _model_options

    exp = experiment(evaluation={"backend": "vllm", "gpu_memory_utilization": 0.6, "max_model_len": 4096})
    assert _model_options(exp, "vllm") == {"gpu_memory_utilization": 0.6, "max_model_len": 4096}
    assert _model_options(exp, "hf") == {}  # the engineer's hf backend takes no vLLM options
