"""Every shipped preset builds the real TRL config with the pinned TRL; bad keys fail with their name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.training.presets import (
    GRPOPreset,
    SFTPreset,
    default_preset_name,
    load_preset,
    packaged_presets,
    preset_to_yaml,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(packaged_presets())


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_the_four_presets_are_shipped() -> None:
    assert {"grpo-cpu", "grpo-gpu", "sft-cpu", "sft-gpu"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_preset_builds_the_real_trl_config(name: str, tmp_path: Path) -> None:
    """A renamed or removed TRL option in a preset fails here, not in the middle of a run."""
    trl = pytest.importorskip("trl")
    kind = name.split("-")[0]
    preset = load_preset(name, kind)
    # bf16 presets need a GPU to pass TrainingArguments' device check; without one the options are still
    # all checked by constructing the config on the CPU.
    overrides = {"use_cpu": True} if preset.trl_options().get("bf16") and not _gpu() else {}
    config = preset.build_config(output_dir=tmp_path, seed=7, **overrides)
    assert isinstance(config, trl.GRPOConfig if kind == "grpo" else trl.SFTConfig)
    assert config.seed == 7 and config.output_dir == str(tmp_path)
    assert config.num_train_epochs == preset.epochs
    for key, value in preset.trl_options().items():
        if key not in ("model_init_kwargs", "report_to", "save_strategy", "lr_scheduler_type"):
            assert getattr(config, key) == value, key
    if kind == "grpo":
        assert config.max_completion_length == preset.max_completion_length
        assert config.chat_template_kwargs["enable_thinking"] is preset.thinking
        assert config.generation_batch_size % config.num_generations == 0
    else:
        assert config.max_length == preset.max_prompt_length + preset.max_completion_length


def test_cpu_preset_is_small_and_gpu_preset_is_shaped_like_the_paper() -> None:
    cpu, gpu = load_preset("grpo-cpu"), load_preset("grpo-gpu")
    assert cpu.model is None and cpu.lora.enabled and cpu.reward_shape == "dense"
    assert cpu.max_completion_length <= 128 and cpu.grpo["per_device_train_batch_size"] <= 8
    assert gpu.model == "Qwen/Qwen3-4B" and gpu.epochs == 2 and not gpu.lora.enabled
    assert gpu.grpo["use_vllm"] is True and gpu.grpo["vllm_mode"] == "colocate" and gpu.grpo["bf16"] is True


def test_aliases_and_defaults() -> None:
    assert load_preset("cpu", "grpo") == load_preset("grpo-cpu", "grpo")
    assert load_preset("gpu", "sft") == load_preset("sft-gpu", "sft")
    assert load_preset("grpo-cpu.yaml", "grpo") == load_preset("grpo-cpu", "grpo")
    assert default_preset_name("grpo", gpu=True) == "grpo-gpu"
    assert default_preset_name("sft", gpu=False) == "sft-cpu"


def test_preset_file_round_trips(tmp_path: Path) -> None:
    preset = load_preset("grpo-gpu")
    path = tmp_path / "p.yaml"
    path.write_text(preset_to_yaml(preset))
    assert load_preset(path, "grpo") == preset


def test_unknown_top_level_key_is_named() -> None:
    with pytest.raises(ConfigError, match="reward_shap"):
        load_preset({"reward_shap": "dense"}, "grpo")
    with pytest.raises(ConfigError, match=r"lora\.rank"):
        load_preset({"lora": {"rank": 8}}, "grpo")


def test_out_of_range_value_is_named() -> None:
    with pytest.raises(ConfigError, match="reward_shape"):
        load_preset({"reward_shape": "shaped"}, "grpo")
    with pytest.raises(ConfigError, match="epochs"):
        load_preset({"epochs": 0}, "sft")


def test_unknown_trl_option_is_named_with_a_suggestion(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    preset = load_preset({"grpo": {"num_generation": 4}}, "grpo")
    with pytest.raises(ConfigError, match=r"grpo\.num_generation .*did you mean 'num_generations'"):
        preset.build_config(output_dir=tmp_path)
    preset = load_preset({"sft": {"max_seq_length": 512}}, "sft")
    with pytest.raises(ConfigError, match=r"sft\.max_seq_length is not an option of SFTConfig"):
        preset.build_config(output_dir=tmp_path)


@pytest.mark.parametrize(
    ("section", "key", "hint"),
    [
        ("grpo", "seed", "--seed"),
        ("grpo", "output_dir", "--out"),
        ("grpo", "num_train_epochs", "epochs"),
        ("grpo", "max_completion_length", "max_completion_length"),
        ("sft", "max_length", "max_prompt_length"),
    ],
)
def test_options_we_set_ourselves_are_rejected(section: str, key: str, hint: str, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    preset = load_preset({section: {key: 1}}, section)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"{section}\.{key} is set by envengineer; use .*{hint}"):
        preset.build_config(output_dir=tmp_path)


def test_thinking_goes_through_the_top_level_key(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    preset = load_preset({"grpo": {"chat_template_kwargs": {"enable_thinking": True}}}, "grpo")
    with pytest.raises(ConfigError, match="thinking"):
        preset.build_config(output_dir=tmp_path)
    config = load_preset({"thinking": True, "grpo": {"use_cpu": True, "bf16": False}}, "grpo").build_config(
        output_dir=tmp_path
    )
    assert config.chat_template_kwargs == {"enable_thinking": True}


def test_wrong_kind_and_unknown_name() -> None:
    with pytest.raises(ConfigError, match="'sft' preset but a 'grpo' preset"):
        load_preset("sft-cpu", "grpo")
    with pytest.raises(ConfigError, match="grpo-cpu"):
        load_preset("no-such-preset", "grpo")
    with pytest.raises(ConfigError, match="expected a sft preset"):
        load_preset(GRPOPreset(), "sft")
    assert isinstance(load_preset(SFTPreset(), "sft"), SFTPreset)


def test_lora_settings_build_a_peft_config() -> None:
    pytest.importorskip("peft")
    lora = load_preset("grpo-cpu").lora.to_peft()
    assert lora.r == 16 and lora.lora_alpha == 32 and lora.task_type == "CAUSAL_LM"


def test_accelerate_and_deepspeed_configs_parse() -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    files = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))
    assert {f.stem for f in files} >= {"single_gpu", "multi_gpu", "zero2", "zero3", "multi_node_zero3"}
    stages = {}
    for f in files:
        config = load_config_from_file(str(f))
        ds_file = (config.deepspeed_config or {}).get("deepspeed_config_file")
        if ds_file:
            ds = json.loads((ROOT / ds_file).read_text())
            stages[f.stem] = ds["zero_optimization"]["stage"]
            assert ds["train_micro_batch_size_per_gpu"] == "auto" and ds["bf16"]["enabled"] == "auto"
            # accelerate refuses mixed_precision beside a deepspeed_config_file (the JSON has "auto")
            assert "mixed_precision" not in yaml.safe_load(f.read_text())
    assert stages == {"zero2": 2, "zero3": 3, "multi_node_zero3": 3}
    for f in (ROOT / "configs" / "deepspeed").glob("*.json"):
        json.loads(f.read_text())


def test_gpu_preset_keeps_64_completions_per_step_whatever_the_gpu_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bf16 weights, and per-device batch x accumulation x processes = 64 completions (8 prompts of 8)."""
    pytest.importorskip("trl")
    from envengineer.training import presets

    preset = load_preset("grpo-gpu")
    assert preset.grpo["model_init_kwargs"]["dtype"] == "bfloat16"
    assert preset.completions_per_step == 64 and "gradient_accumulation_steps" not in preset.grpo
    for world, shape in ((1, (8, 8)), (2, (8, 4)), (4, (8, 2)), (8, (8, 1)), (64, (1, 1))):
        assert preset.batch_shape(world) == shape
        if world > 8:  # TRL checks the group against the real (here single) process count
            continue
        monkeypatch.setattr(presets, "world_size", lambda w=world: w)
        overrides = {} if _gpu() else {"use_cpu": True}
        config = preset.build_config(output_dir=tmp_path, **overrides)
        assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == shape
        assert config.per_device_train_batch_size * config.gradient_accumulation_steps * world == 64
    with pytest.raises(ConfigError, match="does not split over 3 processes"):
        preset.batch_shape(3)
    with pytest.raises(ConfigError, match="remove one of them"):
        load_preset({"completions_per_step": 8, "grpo": {"gradient_accumulation_steps": 2}}).batch_shape(1)


def test_plan_counts_the_same_steps_on_one_and_eight_gpus() -> None:
    """1,000 steps per round (2 epochs x 4,000 prompts / 8 per step) on 1 or 8 GPUs; 3 GPUs are refused."""
    from envengineer.loop.experiment import load_experiment
    from envengineer.loop.plan import grpo_steps, preflight

    exp = load_experiment(Path(__file__).parents[1] / "experiments" / "gpu" / "main-self.yaml")
    for processes in (1, 2, 8):
        launch = {**exp.launch.model_dump(), "processes": processes}
        e = Experiment.model_validate({**exp.model_dump(), "launch": launch})
        steps, batch = grpo_steps(e)
        assert (
            steps == 1000 and batch["completions_per_step"] == 64 and batch["prompts_used_per_epoch"] == 4000
        )
    old = {
        "grpo": {"per_device_train_batch_size": 16, "num_generations": 8, "gradient_accumulation_steps": 4}
    }
    e = Experiment.model_validate(
        {**exp.model_dump(), "training": {"preset": "x"}, "launch": {"processes": 8}}
    )
    import envengineer.training.presets as presets_module

    real = presets_module.load_preset
    try:
        presets_module.load_preset = lambda *a, **k: real(old, "grpo")
        steps, batch = grpo_steps(e)
    finally:
        presets_module.load_preset = real
    assert steps == 124 and batch["prompts_used_per_epoch"] == 3968  # 8 GPUs before: partial batch dropped
    three = Experiment.model_validate(
        {**exp.model_dump(), "launch": {**exp.launch.model_dump(), "processes": 3}}
    )
    with pytest.raises(ConfigError, match="does not split over 3 processes"):
        preflight(three)


def test_memory_is_pinned_only_where_an_accelerator_takes_the_copies(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    for kind, name in (("sft", "sft-small"), ("grpo", "grpo-small")):
        config = load_preset(name, kind).build_config(output_dir=tmp_path / name)
        assert config.dataloader_pin_memory is torch.accelerator.is_available(), name
    pinned = load_preset({"kind": "sft", "sft": {"dataloader_pin_memory": True, "bf16": False}}, "sft")
    assert pinned.build_config(output_dir=tmp_path / "p").dataloader_pin_memory is True  # a preset's own word
