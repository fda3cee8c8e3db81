"""The loop's third round learner, ``training.learner: sft``: each round is supervised fine-tuning on the
exact solver's optimal plans of that round's boards, with ``training.preset`` read as an SFT preset."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError
from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.plan import plan, preflight
from envengineer.loop.rundir import read_json, read_jsonl
from envengineer.loop.runner import run_experiment
from small_sets import dotted_experiment, small_overrides, write_small_sets


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 41)


def sft_experiment(sets: dict[str, Path], **over: Any) -> Experiment:
    """Two rounds of the small policy with the SFT learner and the fixed engineer on the small sets."""
    data: dict[str, Any] = {"name": "t-sft", "model": "policy:tiny", "engineer": {"kind": "fixed"}}
    small = {
        **small_overrides(sets),
        "rounds": 2,
        "training.learner": "sft",
        "training.preset": "sft-small",
        "training.max_steps": 7,
        "epochs_per_round": 1.5,
        **over,
    }
    return dotted_experiment(data, small)


def greedy(model: Any, instances: Any, *, out_dir: Path, **_: Any) -> Any:
    from envengineer.evaluation import evaluate
    from envengineer.models import load_backend

    return evaluate(load_backend("scripted", "greedy", instances=instances), instances, out_dir=out_dir)


def must_not_run(name: str) -> Any:
    def fail(*a: Any, **k: Any) -> Any:
        raise AssertionError(f"the {name} ran under learner: sft")

    return fail


def prepare(run: Path, sets: dict[str, Path]) -> Path:
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    return run


def fake_launches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Stage processes that are never started: each command is recorded and its round written as done
    (5 steps); returns the list the commands go to."""
    from envengineer.loop import launch

    launched: list[list[str]] = []

    def fake_stage(cmd: list[str], *, log_path: Path, retries: int, what: str) -> None:
        launched.append(list(cmd))
        out = log_path.parent
        (out / "metrics.json").write_text(json.dumps({"checkpoint": str(out / "checkpoint"), "steps": 5}))

    monkeypatch.setattr(launch, "run_stage", fake_stage)
    return launched


def test_a_loop_with_the_sft_learner_trains_each_round_on_its_boards(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    calls: list[dict[str, Any]] = []

    def sft_trainer(model, instances, *, out_dir, preset, epochs, seed, max_steps):
        calls.append(
            {
                "model": model,
                "boards": [i.board_hash() for i in instances],
                "preset": preset,
                "epochs": epochs,
                "seed": seed,
                "max_steps": max_steps,
            }
        )
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 7, "seconds": 0.5, "metrics": {}}

    exp = sft_experiment(sets)
    run = prepare(tmp_path / "run", sets)
    comps = Components(
        trainer=must_not_run("GRPO trainer"),
        teacher=must_not_run("teacher"),
        sft_trainer=sft_trainer,
        evaluator=greedy,
    )
    run_experiment(exp, run, components=comps)
    assert [c["model"] for c in calls] == ["policy:tiny", str(run / "round_00" / "train" / "checkpoint")]
    for r, call in enumerate(calls):
        manifest = read_jsonl(run / f"round_{r:02d}" / "dataset" / "manifest.jsonl")
        assert call["boards"] == [row["board_hash"] for row in manifest] and len(call["boards"]) == 8
        assert (call["preset"], call["epochs"], call["max_steps"]) == ("sft-small", 1.5, 7)
        record = read_json(run / f"round_{r:02d}" / "train" / "metrics.json")
        assert record["preset"] == "sft-small" and record["steps"] == 7 and record["epochs"] == 1.5
        assert record["seed"] == call["seed"]
    assert calls[0]["seed"] != calls[1]["seed"]
    assert read_json(run / "round_01" / "train" / "metrics.json")["model_in"] == calls[1]["model"]


def test_the_sft_learner_gets_an_sft_preset_when_trackers_are_named(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    """With ``report_to`` the preset is loaded to set it: as an SFT preset, or the round would fail."""
    from envengineer.training.presets import SFTPreset

    seen: list[Any] = []

    def sft_trainer(model, instances, *, out_dir, preset, epochs, seed, max_steps):
        seen.append(preset)
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 1, "seconds": 0.0, "metrics": {}}

    exp = sft_experiment(sets, rounds=1, **{"training.report_to": ["none"]})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(sft_trainer=sft_trainer, evaluator=greedy))
    assert len(seen) == 1 and isinstance(seen[0], SFTPreset)
    assert seen[0].sft["report_to"] == ["none"] and seen[0].sft["per_device_train_batch_size"] == 32


def test_the_schema_and_preflight_refuse_a_wrong_learner_or_preset() -> None:
    with pytest.raises(ConfigError, match=r"training\.learner"):
        Experiment.from_dict({"name": "x", "training": {"learner": "ppo"}})
    sft = Experiment.from_dict({"name": "x", "training": {"learner": "sft", "preset": "sft-small"}})
    assert sft.training.preset_kind == "sft"
    preflight(sft)  # an SFT preset for the SFT learner
    preflight(Experiment.from_dict({"name": "x", "training": {"learner": "teach", "preset": "sft-small"}}))
    for learner, preset in (("sft", "grpo-small"), ("grpo", "sft-small")):
        exp = Experiment.from_dict({"name": "x", "training": {"learner": learner, "preset": preset}})
        with pytest.raises(ConfigError, match=r"training\.preset") as info:
            preflight(exp)
        assert ("learner 'sft' reads training.preset as an SFT preset" in str(info.value)) == (
            learner == "sft"
        )


def test_the_plan_counts_sft_steps_for_the_sft_learner() -> None:
    from envengineer.loop.plan import SMALL_POLICY_CPU_RATES

    base = {
        "name": "p",
        "model": "policy:tiny",
        "rounds": 3,
        "samples_per_round": 640,
        "epochs_per_round": 1,
        "engineer": {"kind": "fixed"},
        "training": {"learner": "sft", "preset": "sft-small"},
    }
    p = plan(Experiment.from_dict(base))
    assert (p["sft_steps_per_round"], p["sft_steps"]) == (20, 60)  # 640 boards / batch 32
    assert (p["grpo_steps_per_round"], p["grpo_steps"], p["training"]) == (0, 0, "SFT")
    assert p["probe_responses"] == 3 * 128  # training.probe's default, before each round
    unprobed = plan(Experiment.from_dict({**base, "training": {**base["training"], "probe": 0}}))
    assert unprobed["probe_responses"] == 0
    assert p["eval_responses"] == unprobed["eval_responses"] + 3 * 128
    r = SMALL_POLICY_CPU_RATES  # policy:tiny with sft-small: the small policy's measured rates
    want = 60 * r["sft_step"] + p["eval_responses"] * r["eval_answer"] + 3 * r["round_overhead"]
    assert p["cpu_seconds"] == pytest.approx(want)
    capped = plan(Experiment.from_dict({**base, "training": {**base["training"], "max_steps": 5}}))
    assert (capped["sft_steps_per_round"], capped["sft_steps"]) == (5, 15)
    longer = plan(Experiment.from_dict({**base, "epochs_per_round": 2.5, "samples_per_round": 650}))
    assert longer["sft_steps_per_round"] == math.ceil(2.5 * 21)  # a short last batch is a step
    grpo = plan(Experiment.from_dict({**base, "training": {"preset": "grpo-small"}}))
    assert grpo["grpo_steps_per_round"] == 80 and grpo["sft_steps"] == 0 and grpo["training"] == "GRPO"


def test_the_dry_run_prints_the_sft_steps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from envengineer.cli import main

    path = tmp_path / "sft.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "sft-dry",
                "model": "policy:tiny",
                "rounds": 2,
                "samples_per_round": 640,
                "epochs_per_round": 1,
                "engineer": {"kind": "fixed"},
                "training": {"learner": "sft", "preset": "sft-small"},
            }
        )
    )
    assert main(["run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "(SFT)" in out and "40 SFT steps on the solver's plans (20 per round)" in out
    assert "GRPO steps" not in out


def test_subprocess_stages_launch_envengineer_sft_each_round(
    tmp_path: Path, sets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import envengineer.loop.launch as launch

    exp = sft_experiment(sets, **{"launch.stages": "subprocess", "training.max_steps": 5})
    assert launch.check_launch(exp) == []
    planned = dict(launch.planned_commands(exp, tmp_path / "planned"))
    for r in range(2):
        cmd = planned[f"round {r} train"]
        assert " envengineer.cli sft --instances " in cmd and "--grpo" not in cmd
        assert "--preset sft-small" in cmd and "--epochs 1.5" in cmd and "--max-steps 5" in cmd
    assert f"--model {tmp_path / 'planned' / 'round_00' / 'train' / 'checkpoint'}" in planned["round 1 train"]

    launched = fake_launches(monkeypatch)
    run = prepare(tmp_path / "run", sets)
    # no sft_trainer given: the run fills in the launched one
    comps = Components(trainer=must_not_run("GRPO trainer"), evaluator=greedy)
    run_experiment(exp, run, components=comps)
    assert [c[c.index("envengineer.cli") + 1] for c in launched] == ["sft", "sft"]
    assert launched[1][launched[1].index("--model") + 1] == str(run / "round_00" / "train" / "checkpoint")
    assert read_json(run / "round_01" / "train" / "metrics.json")["steps"] == 5


def test_preflight_refuses_length_grouped_sft_over_several_processes(sets: dict[str, Path]) -> None:
    """sft-small orders the batches of one process: several launched processes are refused before the run,
    not in its first round."""
    over = {"launch.stages": "subprocess", "launch.launcher": "torchrun", "launch.processes": 2}
    with pytest.raises(ConfigError, match=r"training\.preset: length_group_batches .*launch\.processes=2"):
        preflight(sft_experiment(sets, **over))
    preflight(sft_experiment(sets, **{**over, "launch.processes": 1}))  # one process: fine


def test_launched_rounds_take_the_trackers_as_a_preset_file(
    tmp_path: Path, sets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With training.report_to, a subprocess round gets its preset as a file with the trackers in it (a
    preset object cannot go on a command line)."""
    import yaml

    over = {"launch.stages": "subprocess", "training.max_steps": 5, "training.report_to": ["tensorboard"]}
    exp = sft_experiment(sets, **over)
    launched = fake_launches(monkeypatch)
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(trainer=must_not_run("GRPO trainer"), evaluator=greedy))
    for r, cmd in enumerate(launched):
        path = Path(cmd[cmd.index("--preset") + 1])
        assert path == run / f"round_{r:02d}" / "train" / "preset.in.yaml"
        written = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert written["kind"] == "sft" and written["sft"]["report_to"] == ["tensorboard"]
        assert written["sft"]["learning_rate"] == 2.0e-3  # the experiment's sft-small, defaults written out


def test_training_details_describe_the_learner(tmp_path: Path, sets: dict[str, Path]) -> None:
    from types import SimpleNamespace

    from envengineer.loop.stages.config import training_details

    def details(**over: Any) -> dict[str, Any]:
        return training_details(SimpleNamespace(exp=sft_experiment(sets, **over)), 0)  # type: ignore[arg-type]

    sft = details()
    assert "SFTTrainer" in sft["algorithm"] and "cross-entropy" in sft["objective"] and "reward" not in sft
    assert sft["hyperparameters"]["learning_rate"] == 2.0e-3 and sft["hyperparameters"]["max_steps"] == 7
    assert sft["hyperparameters"]["per_device_train_batch_size"] == 32
    grpo = details(**{"training.learner": "grpo", "training.preset": "grpo-small"})
    assert grpo["algorithm"].startswith("GRPO") and grpo["reward"].startswith("sparse")
    teach = details(**{"training.learner": "teach", "training.teach": {"rollout_batch": 8}})
    assert "DAgger" in teach["algorithm"] and "reward" not in teach and "GRPO" not in teach["algorithm"]
    assert teach["hyperparameters"]["rollout_batch"] == 8 and teach["hyperparameters"]["max_steps"] == 7
    assert "epochs" not in teach and sft["epochs"] == 1.5  # teach ignores epochs_per_round


@pytest.mark.slow
def test_a_real_sft_round_on_a_tiny_policy(tmp_path: Path, sets: dict[str, Path]) -> None:
    import torch
    import yaml
    from safetensors.torch import load_file

    from envengineer.models.small_policy import init_policy
    from envengineer.training.presets import load_preset

    policy = init_policy(tmp_path / "policy", size="tiny", seed=0)
    preset = load_preset("sft-small", "sft").model_dump(mode="json")
    preset["sft"].update(use_cpu=True, logging_steps=1, disable_tqdm=True, warmup_steps=0)
    preset["sft"]["per_device_train_batch_size"] = 4
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(preset))
    exp = sft_experiment(
        sets,
        model=str(policy),
        rounds=1,
        **{"training.preset": str(tmp_path / "sft.yaml"), "training.max_steps": 2},
    )
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(trainer=must_not_run("GRPO trainer"), evaluator=greedy))
    record = read_json(run / "round_00" / "train" / "metrics.json")
    assert record["steps"] == 2 and record["metrics"]["kind"] == "sft"
    before = load_file(str(policy / "model.safetensors"))
    after = load_file(str(Path(record["checkpoint"]) / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_the_plan_counts_the_screens_answers_and_probe_boards():
    """engineer.screen with 4 proposals of 48 boards, 3 rounds: 2 engineer calls ask 8 answers, and the
    policy answers 2 x 4 x 48 = 384 probe boards besides the rounds' own probes (3 x 128)."""
    base = {
        "name": "p",
        "model": "policy:trainee",
        "rounds": 3,
        "samples_per_round": 640,
        "engineer": {"kind": "base", "model": "embedded"},
        "training": {"learner": "sft", "preset": "sft-round"},
    }
    plain = plan(Experiment.from_dict(base))
    screened = plan(
        Experiment.from_dict(
            {**base, "engineer": {**base["engineer"], "screen": {"proposals": 4, "boards": 48}}}
        )
    )
    assert (plain["engineer_calls"], plain["engineer_answers"]) == (2, 2)
    assert (screened["engineer_calls"], screened["engineer_answers"]) == (2, 8)
    assert screened["probe_responses"] == plain["probe_responses"] + 384 == 3 * 128 + 384
    from envengineer.loop.plan import SMALL_POLICY_CPU_RATES as r

    extra = 6 * r["engineer_answer"] + 384 * r["eval_answer"]
    assert screened["cpu_seconds"] == pytest.approx(plain["cpu_seconds"] + extra)
