"""Real GRPO and SFT rounds through TRL on a tiny model built in memory (no downloads, CPU, seconds).

The tiny model is a one-layer Qwen2-style network with hidden size 16 over a character-level (byte-level,
no merges) ``tokenizers`` vocabulary with a ChatML chat template, saved to a temporary folder so that the
trainers load it by path exactly as they load a real checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from envengineer.errors import ConfigError, EnvEngineerError  # noqa: E402
from envengineer.mapf.instance import Instance  # noqa: E402
from envengineer.training import grpo as grpo_module  # noqa: E402
from envengineer.training.dataset import prompt_dataset, sft_rows, write_manifest  # noqa: E402
from envengineer.training.grpo import train_round  # noqa: E402
from envengineer.training.sft import sft  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CPU = {
    "bf16": False,
    "use_cpu": True,
    "activation_checkpointing": False,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


def build_tiny_model(folder: Path) -> Path:
    """Save a one-layer Qwen2-style causal LM and a character-level tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # one token per byte: a character-level vocabulary
    vocab = {token: i for i, token in enumerate(specials + alphabet)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_instances() -> list[Instance]:
    """Hand-written solved 3x3 boards (SPEC §2.3 and two more)."""
    return [
        Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4),
        Instance("follow", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2),
        Instance("hole", ("...", ".H.", "..."), ((0, 0), (2, 2)), ((2, 0), (0, 2)), 4, 2, 4),
        Instance("corner", ("...", "...", "..."), ((0, 0), (2, 2)), ((2, 2), (0, 0)), 8, 4, 8),
    ]


def write_tiny_grpo_preset(path: Path) -> Path:
    """A GRPO preset file for the tiny model: full training, dense reward, 2 completions per step."""
    import yaml

    path.write_text(yaml.safe_dump({
        "kind": "grpo", "reward_shape": "dense", "max_prompt_length": None, "max_completion_length": 8,
        "lora": {"enabled": False},
        "grpo": {"learning_rate": 1e-2, "per_device_train_batch_size": 2, "num_generations": 2, **_CPU},
    }))  # fmt: skip
    return path


def grpo_preset(*, lora: bool) -> dict:
    return {
        "reward_shape": "dense",
        "max_prompt_length": None,
        "max_completion_length": 8,
        "lora": {"enabled": lora, "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
        "grpo": {
            "learning_rate": 1e-2,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_steps": 2,
            **_CPU,
        },
    }


def uppercase_reward(completions: list, **kwargs: object) -> list[float]:
    """Counts capital letters: varies between samples of a random model, so advantages are non-zero.

    A random tiny model never writes a parseable answer, so the testbed's reward alone is the same for every
    sample and GRPO's group-normalised advantage (hence the gradient) would be zero.
    """
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(sum(ch.isupper() for ch in t)) for t in texts]


def _params(path: str | Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path))
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def full_round(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> grpo_module.TrainResult:
    out = tmp_path_factory.mktemp("grpo_full")
    return train_round(
        str(tiny_model),
        tiny_instances(),
        out_dir=out,
        preset=grpo_preset(lora=False),
        seed=0,
        reward_funcs=[uppercase_reward],
    )


def test_tiny_tokenizer_round_trips_and_reloads(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    text = "<answer>\nA0: RIGHT × (0,1)\n</answer>"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )


def test_prompt_dataset_has_prompt_and_instance_columns() -> None:
    ds = prompt_dataset(tiny_instances())
    assert set(ds.column_names) >= {"prompt", "instance", "id"}
    row = ds[0]
    assert row["prompt"][-1]["role"] == "user"
    assert Instance.from_dict(json.loads(row["instance"])) == tiny_instances()[0]


def test_manifest_lines(tmp_path: Path) -> None:
    path = write_manifest(tiny_instances(), tmp_path / "manifest.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["swap", "follow", "hole", "corner"]
    assert lines[0]["board_hash"] == tiny_instances()[0].board_hash()


def test_grpo_round_full_finetune_changes_weights(
    tiny_model: Path, full_round: grpo_module.TrainResult
) -> None:
    result = full_round
    assert result.steps == 2
    before, after = _params(tiny_model), _params(result.checkpoint)
    assert before.keys() == after.keys()
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert len(changed) == len(before), f"unchanged: {sorted(set(before) - set(changed))}"

    metrics = json.loads((result.checkpoint.parent / "metrics.json").read_text())
    logged = {k for entry in metrics["log_history"] for k in entry}
    testbed = [k for k in logged if k.startswith("rewards/mapf_") and k.endswith("/mean")]
    assert testbed, logged
    assert metrics["timing"]["reward_calls"] >= 2 and metrics["timing"]["steps"] == 2
    assert 0 <= metrics["timing"]["outside_model_share"] < 1
    assert (result.checkpoint.parent / "preset.yaml").is_file()
    assert metrics["memory"]["rss_gb"] > 0.05 and "gpu_reserved_gb" in metrics["memory"]


def test_grpo_checkpoint_loads_and_generates(full_round: grpo_module.TrainResult) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(full_round.checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(full_round.checkpoint))
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "go"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_grpo_round_lora_continues_from_previous_round(
    full_round: grpo_module.TrainResult, tmp_path: Path
) -> None:
    result = train_round(
        str(full_round.checkpoint),  # the next round starts from the previous round's checkpoint
        tiny_instances(),
        out_dir=tmp_path,
        preset=grpo_preset(lora=True),
        seed=1,
        reward_funcs=[uppercase_reward],
    )
    assert result.steps == 2
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    before, after = _params(full_round.checkpoint), _params(result.checkpoint)
    assert before.keys() == after.keys()  # merged: a plain model, no LoRA parameters left
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all("q_proj" in n or "v_proj" in n for n in changed), changed
    assert any("q_proj.weight" in n for n in changed) and any("v_proj.weight" in n for n in changed)


def test_sft_two_steps(tiny_model: Path, tmp_path: Path) -> None:
    preset = {
        "max_prompt_length": None,
        "max_completion_length": 64,
        "sft": {"learning_rate": 1e-2, "per_device_train_batch_size": 2, "max_steps": 2, **_CPU},
    }
    result = sft(str(tiny_model), tiny_instances(), out_dir=tmp_path, preset=preset, seed=0)
    assert result.steps == 2
    before, after = _params(tiny_model), _params(result.checkpoint)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    losses = [e["loss"] for e in result.metrics["log_history"] if "loss" in e]
    assert losses and all(loss == loss for loss in losses)  # logged and not NaN


def test_sft_targets_are_optimal_answers() -> None:
    from envengineer.mapf.validator import validate

    for inst, row in zip(tiny_instances(), sft_rows(tiny_instances()), strict=True):
        verdict = validate(inst, row["completion"][0]["content"])
        assert verdict.valid and verdict.optimal, (inst.id, verdict)


def test_prompt_longer_than_preset_limit_stops_before_training(tiny_model: Path, tmp_path: Path) -> None:
    preset = {**grpo_preset(lora=False), "max_prompt_length": 32}
    with pytest.raises(ConfigError, match="max_prompt_length=32"):
        train_round(str(tiny_model), tiny_instances(), out_dir=tmp_path, preset=preset)
    assert not (tmp_path / "checkpoint").exists()


def test_unsolved_instances_are_rejected(tiny_model: Path, tmp_path: Path) -> None:
    inst = Instance("u", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)))
    with pytest.raises(ConfigError, match="envengineer solve"):
        train_round(str(tiny_model), [inst], out_dir=tmp_path, preset=grpo_preset(lora=False))


def test_missing_training_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpo_module, "_TRAIN_MODULES", ("torch", "envengineer_no_such_module"))
    with pytest.raises(EnvEngineerError, match=r"pip install 'envengineer\[train\]'"):
        grpo_module.require_train_deps()


def test_the_deprecated_checkpointing_property_trl_reads_stays_quiet() -> None:
    """TRL reads transformers' deprecated ``is_gradient_checkpointing`` at every GRPO generation; the
    training module silences exactly that FutureWarning (a fresh process: pytest resets filters per test)."""
    import subprocess
    import sys

    code = """
import warnings
import envengineer.training.grpo
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl.models.utils import disable_gradient_checkpointing
config = Qwen2Config(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                     num_attention_heads=1, num_key_value_heads=1)
with disable_gradient_checkpointing(Qwen2ForCausalLM(config)):  # TRL's call, as in every GRPO step
    pass
warnings.warn("another FutureWarning", FutureWarning)
"""
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "another FutureWarning" in done.stderr  # other warnings still show
    assert "is_gradient_checkpointing" not in done.stderr


def test_cli_train_end_to_end(tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from envengineer.cli import main

    round_file = tmp_path / "round.yaml"
    round_file.write_text(
        yaml.safe_dump(
            {"num_samples": 4, "sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.0, "wait_ratio": 0.5}}}
        )
    )
    preset_file = tmp_path / "tiny.yaml"
    preset = grpo_preset(lora=False)
    preset["grpo"]["max_steps"] = 1
    preset_file.write_text(yaml.safe_dump(preset))
    out = tmp_path / "run"
    code = main(
        ["train", "--model", str(tiny_model), "--round", str(round_file), "--grpo", str(preset_file),
         "--seed", "3", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert "checkpoint:" in capsys.readouterr().out
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(manifest) == 4 and all(len(x["board_hash"]) == 64 for x in manifest)
    assert (out / "checkpoint" / "config.json").is_file() and (out / "round.yaml").is_file()


def test_cli_reports_a_bad_preset_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envengineer.cli import main

    round_file = tmp_path / "round.yaml"
    round_file.write_text("num_samples: 2\nsizes: {3: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0}}\n")
    preset_file = tmp_path / "bad.yaml"
    preset_file.write_text("grpo:\n  num_generation: 4\n")
    code = main(
        ["train", "--round", str(round_file), "--grpo", str(preset_file), "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "num_generation" in err and "num_generations" in err


@pytest.mark.slow
def test_two_processes_under_torchrun_train_one_model(tiny_model: Path, tmp_path: Path) -> None:
    """``torchrun -m envengineer.cli train`` with 2 CPU processes: data-parallel steps, files written once."""
    import os
    import shutil
    import subprocess
    import sys

    import yaml

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    round_file = tmp_path / "round.yaml"
    round_file.write_text("num_samples: 8\nsizes: {3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.5}}\n")
    preset_file = tmp_path / "tiny.yaml"
    preset_file.write_text(yaml.safe_dump(grpo_preset(lora=True)))
    out = tmp_path / "run"
    cmd = [torchrun, "--nproc_per_node", "2", "-m", "envengineer.cli", "train", "--model", str(tiny_model),
           "--round", str(round_file), "--grpo", str(preset_file), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("checkpoint:") == 1  # only rank 0 reports
    assert proc.stderr.count("merged LoRA adapter") == 1  # only rank 0 merges
    metrics = json.loads((out / "metrics.json").read_text())
    epochs = [e["epoch"] for e in metrics["log_history"] if "loss" in e]
    assert epochs == [0.25, 0.5]  # 2 prompts per step: one per process
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 8


def test_sft_length_grouped_batches(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envengineer.training import batching

    orders: list[list[int]] = []
    lengths: list[list[int]] = []

    class Recording(batching.LengthGroupedSampler):
        def __iter__(self):
            order = list(super().__iter__())
            orders.append(order)
            lengths.append(self.lengths)
            return iter(order)

    monkeypatch.setattr(batching, "LengthGroupedSampler", Recording)
    preset = {
        "max_prompt_length": None,
        "max_completion_length": 64,
        "length_group_batches": 2,
        "sft": {"learning_rate": 1e-2, "per_device_train_batch_size": 2, "max_steps": 2, **_CPU},
    }
    result = sft(str(tiny_model), tiny_instances(), out_dir=tmp_path, preset=preset, seed=0)
    assert result.steps == 2
    assert len(orders) == 1 and sorted(orders[0]) == [0, 1, 2, 3]  # the trainer drew its batches from it
    # The lengths are the tokenized rows the trainer pads (prompt, answer and the template's tokens); the one
    # group of two batches splits them into the two shorter and the two longer rows.
    first, second = orders[0][:2], orders[0][2:]
    short, long = sorted([first, second], key=lambda b: max(lengths[0][i] for i in b))
    assert max(lengths[0][i] for i in short) <= min(lengths[0][i] for i in long)
    assert len(set(lengths[0])) > 1


def test_length_grouped_batches_refuse_a_second_order() -> None:
    from envengineer.training.presets import load_preset

    preset = load_preset(
        {"kind": "sft", "length_group_batches": 4, "sft": {"train_sampling_strategy": "random"}}, "sft"
    )
    with pytest.raises(ConfigError, match="length_group_batches"):
        preset.trl_options()
