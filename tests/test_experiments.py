"""Every experiment file validates; the schema documents itself; errors name the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from envengineer.errors import ConfigError
from envengineer.loop.context_settings import CONTEXT_VARIANTS, ContextSettings
from envengineer.loop.demo import DEMO, demo_experiment
from envengineer.loop.experiment import Experiment, load_experiment, parse_override
from envengineer.loop.plan import plan, preflight

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.yaml"))
SCALES = ("cpu", "gpu")
#: The files each scale must have (SPEC §5 and issue 4 item 6).
REQUIRED = (
    "main-base", "main-fixed", "main-self",
    *(f"ablation-v{i}" for i in range(1, 7)),
    "details-bookkeeping", "details-full",
    "engineer-self", "engineer-base", "engineer-openai",
    "baseline-random", "baseline-threshold",
)  # fmt: skip


def test_experiment_files_exist() -> None:
    for scale in SCALES:
        names = {p.stem for p in (ROOT / "experiments" / scale).glob("*.yaml")}
        missing = set(REQUIRED) - names
        assert not missing, f"experiments/{scale} lacks {sorted(missing)}"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: str(p.relative_to(ROOT / "experiments")))
def test_every_experiment_file_validates(path: Path) -> None:
    exp = load_experiment(path)
    preflight(exp)  # presets, context variant, engineer options, files
    p = plan(exp)
    assert p["rounds"] == exp.rounds
    scale = path.parent.name
    if not path.stem.startswith("_") and not path.stem.startswith("demo"):
        assert exp.name == f"{scale}-{path.stem}", "name the run after its file: {scale}-{stem}"
    if scale == "gpu":
        assert exp.model == "Qwen/Qwen3-4B" and exp.samples_per_round == 4000 and exp.epochs_per_round == 2
        assert exp.evaluation.benchmark_per_cell is None
        nothink = "nothink" in path.stem
        assert exp.training.preset == ("gpu" if nothink else "gpu-thinking")
        assert exp.evaluation.enable_thinking is (not nothink)
    elif exp.model == "policy:trainee":  # the small-policy family: the packaged trainee, a separate engineer
        assert exp.training.learner == "sft" and exp.training.preset == "sft-round"
        assert not exp.warm_start.enabled  # the trainee is warm-started; from scratch is one option away
        assert (
            exp.warm_start.preset == "sft-small" and exp.warm_start.seed is not None and exp.warm_start.cache
        )
        assert exp.engineer.kind != "self"
    else:
        assert exp.model is None and exp.samples_per_round <= 256
        assert exp.evaluation.benchmark_per_cell is not None or exp.evaluation.benchmark_limit is not None
    # what each file tests
    stem = path.stem
    if stem.startswith("ablation-v"):
        assert exp.engineer.kind == "self" and exp.engineer.context.variant == f"V{stem[-1]}"
    if stem == "details-full":
        assert exp.engineer.context.switches()["T"] == "full"
    if stem in ("details-bookkeeping", "main-self", "engineer-self"):
        assert exp.engineer.kind == "self" and exp.engineer.context.switches() == CONTEXT_VARIANTS["V6"]
    if stem == "main-base":
        assert exp.rounds == 0
    for kind in ("fixed", "random", "threshold", "base", "openai"):
        if stem != "main-base" and stem.endswith(kind):
            assert exp.engineer.kind == kind


def test_names_are_unique() -> None:
    names = [load_experiment(p).name for p in EXPERIMENTS]
    assert len(names) == len(set(names))


def test_same_budget_and_seeds_within_a_scale() -> None:
    """Runs of one scale differ only in what they test: same schedule, validation, evaluation, seeds."""
    for scale in SCALES:
        exps = [
            load_experiment(p)
            for p in (ROOT / "experiments" / scale).glob("*.yaml")
            if p.stem in REQUIRED and p.stem != "main-base"
        ]
        keys = {
            (
                e.rounds,
                e.samples_per_round,
                e.epochs_per_round,
                e.training,
                e.validation,
                e.evaluation,
                e.seeds,
                e.warm_start,
            )
            for e in exps
        }
        assert len(keys) == 1, scale


def test_demo_files_match_the_demo_command() -> None:
    demo, smollm2 = demo_experiment(), demo_experiment(smollm2=True)
    assert load_experiment(ROOT / "experiments" / "cpu" / "demo.yaml") == demo
    assert load_experiment(ROOT / "experiments" / "cpu" / "demo-smollm2.yaml") == smollm2
    assert demo.model == "policy:trainee" and not demo.warm_start.enabled
    assert demo.training.learner == "sft" and demo.training.preset == "sft-round"
    assert demo.engineer.kind == "base" and demo.engineer.model == "embedded"
    assert smollm2.engineer.kind == "self" and smollm2.rounds == 3
    assert DEMO["name"] == "cpu-demo"
    # The demo is the LLM-engineer arm of the small-policy comparison (its seed 0), nothing else.
    arm = load_experiment(ROOT / "experiments" / "cpu" / "policy-main-llm.yaml")
    assert demo.model_copy(update={"name": arm.name, "description": arm.description}) == arm
    assert arm.validation.max_size == 10 and arm.training.agents == (2, 3)


def test_context_variants_match_the_engineer() -> None:
    from envengineer.engineer.context import VARIANTS

    for name, switches in CONTEXT_VARIANTS.items():
        assert VARIANTS[name].switches() == switches, name
    full = ContextSettings.model_validate({"variant": "V6", "T": "full"}).switches()
    assert VARIANTS["V6-full"].switches() == full


def test_every_field_has_a_description() -> None:
    schema = Experiment.model_json_schema()

    def walk(node: dict[str, Any], where: str) -> None:
        for name, prop in node.get("properties", {}).items():
            assert prop.get("description"), f"{where}.{name} has no description"

    walk(schema, "Experiment")
    for name, sub in schema.get("$defs", {}).items():
        walk(sub, name)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "round": 3}, "round"),
        ({"name": "x", "engineer": {"kind": "oracle"}}, "engineer.kind"),
        ({"name": "x", "engineer": {"kind": "openai"}}, "base_url"),
        ({"name": "x", "engineer": {"kind": "self", "base_url": "http://x"}}, "'openai' only"),
        ({"name": "x", "engineer": {"context": "V7"}}, "context.variant"),
        ({"name": "x", "engineer": {"context": {"variant": "V6", "T": "some"}}}, "context.T"),
        ({"name": "x", "policy": "scripted:perfect"}, "policy"),
        ({"name": "x", "samples_per_round": 0}, "samples_per_round"),
        ({"name": "has space"}, "name"),
        ({"rounds": 3}, "name"),
        ({"name": "x", "validation": {"per_cell": 0}}, "validation.per_cell"),
    ],
)
def test_bad_experiments_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Experiment.from_dict(data)


def test_preflight_catches_what_the_schema_cannot(tmp_path: Path) -> None:
    bad = Experiment.model_validate(
        {
            "name": "x",
            "training": {"preset": "no-such-preset"},
            "engineer": {"kind": "threshold", "options": {"speed": 3}},
            "evaluation": {"benchmark_path": str(tmp_path / "missing.jsonl")},
        }
    )
    with pytest.raises(ConfigError) as info:
        preflight(bad)
    text = str(info.value)
    assert "training.preset" in text and "speed" in text and "benchmark_path" in text
    with pytest.raises(ConfigError, match="threshold"):
        preflight(
            Experiment.model_validate({"name": "x", "engineer": {"kind": "fixed", "options": {"a": 1}}})
        )
    scripted = Experiment.model_validate(
        {
            "name": "x",
            "policy": "scripted:greedy",
            "training": {"preset": "no-such-preset"},
            "engineer": {"kind": "fixed"},
        }
    )
    preflight(scripted)  # nothing is trained: the preset is not needed


def test_base_files_merge_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "_base.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "base",
                "rounds": 2,
                "engineer": {"kind": "self", "retries": 4},
                "validation": {"per_cell": 2},
            }
        )
    )
    (tmp_path / "child.yaml").write_text(
        yaml.safe_dump({"base": "_base.yaml", "name": "child", "engineer": {"kind": "fixed"}})
    )
    exp = load_experiment(tmp_path / "child.yaml", dict([parse_override("validation.seed=9")]))
    assert (exp.name, exp.rounds, exp.engineer.kind, exp.engineer.retries) == ("child", 2, "fixed", 4)
    assert (exp.validation.per_cell, exp.validation.seed) == (2, 9)
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: b\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_experiment(tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("rounds")
    # the resolved experiment round-trips through YAML (the run directory's experiment.yaml)
    again = Experiment.model_validate(yaml.safe_load(exp.to_yaml()))
    assert again == exp


def test_context_settings_forms() -> None:
    assert ContextSettings.model_validate("V3").switches() == CONTEXT_VARIANTS["V3"]
    sw = ContextSettings.model_validate({"variant": "V4", "S": True}).switches()
    assert sw == CONTEXT_VARIANTS["V5"]


def test_a_small_policy_cannot_be_its_own_engineer() -> None:
    base = {"name": "p", "model": "policy:tiny", "samples_per_round": 8}
    for engineer in ({"kind": "self"}, {"kind": "base"}):
        exp = Experiment.model_validate({**base, "engineer": engineer})
        with pytest.raises(ConfigError, match="cannot write"):
            preflight(exp)
    preflight(Experiment.model_validate({**base, "engineer": {"kind": "base", "model": "embedded"}}))
    preflight(Experiment.model_validate({**base, "engineer": {"kind": "fixed"}}))


def test_run_seed_sets_the_arm_seeds_and_names_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from envengineer.cli import main

    path = ROOT / "experiments" / "cpu" / "policy-main-fixed.yaml"
    assert main(["run", str(path), "--seed", "2", "--dry-run"]) == 0
    assert "cpu-policy-main-fixed-s2 -> runs/cpu-policy-main-fixed-s2" in capsys.readouterr().out
    assert main(["run", str(path), "--seed", "-1", "--dry-run"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err


def test_gpu_thinking_matches_the_paper_lengths() -> None:
    """Thinking on: budgets above the paper's 7,464-token base answers (eval) and 3,512-token plans (train);
    training and evaluation agree on the switch; the thinking-off variant keeps the short answers."""
    from envengineer.training.presets import load_preset

    for path in sorted((ROOT / "experiments" / "gpu").glob("*.yaml")):
        exp = load_experiment(path)
        preset = load_preset(exp.training.preset, "grpo")
        assert preset.thinking is exp.evaluation.enable_thinking, path.name
        assert exp.evaluation.max_new_tokens >= preset.max_completion_length
        if preset.thinking:
            assert exp.evaluation.max_new_tokens > 2 * 7464 and preset.max_completion_length > 2 * 3512
            assert preset.grpo["vllm_max_model_length"] >= preset.max_completion_length + 1024
            assert exp.engineer.max_new_tokens >= 8192
        else:
            assert exp.evaluation.max_new_tokens == preset.max_completion_length == 1024
