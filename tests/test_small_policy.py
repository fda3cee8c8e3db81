"""The small from-scratch policy: tokenizer round trip, folder, prompt style, SFT and GRPO through TRL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from envengineer.errors import ConfigError  # noqa: E402
from envengineer.mapf.benchmark import load_benchmark  # noqa: E402
from envengineer.mapf.policies import respond  # noqa: E402
from envengineer.mapf.prompt import build_messages, render_compact  # noqa: E402
from envengineer.mapf.validator import format_answer, validate  # noqa: E402
from envengineer.models.small_policy import (  # noqa: E402
    DEFAULT_FORMAT,
    POLICY_SIZES,
    PROMPT_STYLE_KEY,
    build_tokenizer,
    init_policy,
    is_small_policy,
    named_policy_path,
    parse_policy_name,
    prompt_style_of,
)

ACTIONS = ("UP", "DOWN", "LEFT", "RIGHT", "WAIT")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_policy(tmp_path_factory.mktemp("policy") / "tiny", size="tiny", seed=0)


def _sample(step: int = 7) -> list:
    return load_benchmark()[::step]


def test_every_prompt_round_trips_exactly(tokenizer) -> None:
    for inst in _sample():
        for style in ("full", "compact"):
            for message in build_messages(inst, style=style):
                text = message["content"]
                ids = tokenizer.encode(text)
                assert tokenizer.unk_token_id not in ids, (inst.id, style)
                assert tokenizer.decode(ids) == text, (inst.id, style)


def test_every_valid_answer_round_trips_and_actions_are_single_tokens(tokenizer) -> None:
    rng = np.random.default_rng(0)
    for inst in _sample(11):
        for policy in ("optimal", "greedy"):
            text = respond(policy, inst, rng)
            assert tokenizer.decode(tokenizer.encode(text)) == text
            if policy == "optimal":
                assert validate(inst, tokenizer.decode(tokenizer.encode(text))).optimal
    plan = [list(ACTIONS), ["WAIT"] * 3, ["RIGHT"]]
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode(format_answer(plan)))
    for action in ACTIONS:
        assert f" {action}" in pieces
    assert "<answer>" in pieces and "</answer>" in pieces


def test_cells_are_single_tokens_and_bigger_ones_fall_back_to_characters(tokenizer) -> None:
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("H (0,1) (15,15)")) == ["H", " (0,1)", " (15,15)"]
    text = "(16,3) (2,20)"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.unk_token_id not in tokenizer.encode(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("\n\t")))
def test_any_ascii_text_round_trips(tokenizer, text: str) -> None:
    # The chat template's markers (<|user|>, <|end|>, ...) are read as special tokens wherever they appear,
    # so a text spelling one out is a marker, not ASCII to round-trip (found by this test: '<|unk|>').
    assume(not any(special in text for special in tokenizer.all_special_tokens))
    ids = tokenizer.encode(text)
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text


def test_chat_template_wraps_messages_and_ends_with_eos(tokenizer) -> None:
    inst = _sample()[0]
    messages = build_messages(inst, style="compact")
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == f"<|user|>{render_compact(inst)}<|end|><|assistant|>"
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": "x"}], tokenize=False)
    assert full.startswith(prompt) and full.endswith("x<|end|>")
    assert tokenizer.eos_token == "<|end|>"


def test_compact_prompts_are_short(tokenizer) -> None:
    longest = max(
        len(tokenizer.apply_chat_template(build_messages(i, style="compact"), add_generation_prompt=True))
        for i in load_benchmark()
        if i.size == 10 and i.num_agents == 5
    )
    assert longest <= 256  # the sft-small / grpo-small presets' max_prompt_length


def test_policy_folder_loads_and_records_its_prompt_style(policy: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(policy)
    tok = AutoTokenizer.from_pretrained(policy)
    n = sum(p.numel() for p in model.parameters())
    assert n == POLICY_SIZES["tiny"].parameters(len(tok))
    assert 0.5e6 < n < 2e6
    assert getattr(model.config, PROMPT_STYLE_KEY) == "compact"
    assert prompt_style_of(policy) == "compact" and is_small_policy(policy)
    assert tok.decode(tok.encode("A0: RIGHT")) == "A0: RIGHT"


def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a = load_file(init_policy(tmp_path / "a", seed=1) / "model.safetensors")
    b = load_file(init_policy(tmp_path / "b", seed=1) / "model.safetensors")
    c = load_file(init_policy(tmp_path / "c", seed=2) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown policy size"):
        init_policy(tmp_path / "x", size="huge")
    with pytest.raises(ConfigError, match="prompt style"):
        init_policy(tmp_path / "x", prompt_style="verbose")  # type: ignore[arg-type]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("keep")
    with pytest.raises(ConfigError, match="not empty"):
        init_policy(tmp_path / "full")
    with pytest.raises(ConfigError, match="unknown policy size"):
        parse_policy_name("policy:giant")
    with pytest.raises(ConfigError, match="bad seed"):
        parse_policy_name("policy:tiny@x")


def test_named_policy_is_created_once_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envengineer.models import resolve_model

    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path))
    path = Path(resolve_model("policy:tiny@5"))
    assert path == tmp_path / "policies" / f"tiny-{DEFAULT_FORMAT}-seed5" and is_small_policy(path)
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert named_policy_path("policy:tiny@5") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list((tmp_path / "policies").glob(".*tmp*"))


def test_hf_backend_and_evaluation_use_the_recorded_compact_prompt(policy: Path, tmp_path: Path) -> None:
    from envengineer.evaluation import evaluate
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    backend = HFBackend(str(policy))
    assert backend.prompt_style == "compact"
    seen: list[str] = []
    generate = backend.generate

    def spy(conversations, params):
        seen.extend(c[-1]["content"] for c in conversations)
        return generate(conversations, params)

    backend.generate = spy  # type: ignore[method-assign]
    instances = _sample(300)[:3]
    report = evaluate(
        backend,
        instances,
        out_dir=tmp_path,
        params=SamplingParams(temperature=0.0, max_new_tokens=8),
        progress=False,
    )
    assert sorted(seen) == sorted(render_compact(i) for i in instances)
    assert report.to_json()["summary"]["n"] == 3


def _solved_two_agent_instances(n: int) -> list:
    from envengineer.mapf.config import RoundConfig
    from envengineer.mapf.generator import generate_round

    config = RoundConfig.model_validate(
        {
            "sizes": {s: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.5} for s in (3, 4)},
            "num_agents": 2,
            "num_samples": n,
        }
    )
    return generate_round(config, 0)


_CPU = {"use_cpu": True, "logging_steps": 1, "disable_tqdm": True, "report_to": "none", "save_strategy": "no"}


def test_warm_start_lowers_the_loss(policy: Path, tmp_path: Path) -> None:
    from envengineer.training.presets import load_preset
    from envengineer.training.sft import sft

    preset = load_preset("sft-small", "sft").model_dump(mode="json")
    preset["sft"].update(_CPU, max_steps=30, warmup_steps=5, per_device_train_batch_size=16)
    result = sft(str(policy), _solved_two_agent_instances(480), out_dir=tmp_path, preset=preset)
    losses = [e["loss"] for e in result.metrics["log_history"] if "loss" in e]
    assert len(losses) == 30
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses
    assert result.metrics["prompt_style"] == "compact"
    assert prompt_style_of(result.checkpoint) == "compact"  # the trained folder still records it


def test_two_grpo_steps_change_a_fresh_policy(policy: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from envengineer.training.grpo import train_round
    from envengineer.training.presets import load_preset

    def length_reward(completions: list, **kwargs: object) -> list[float]:
        # A fresh policy never writes a valid plan: the length varies between samples, so GRPO's
        # group-normalised advantage is non-zero and the update has a gradient.
        return [float(len(c[-1]["content"] if isinstance(c, list) else c)) for c in completions]

    preset = load_preset("grpo-small", "grpo").model_dump(mode="json")
    preset["grpo"].update(_CPU, max_steps=2)
    preset["max_completion_length"] = 16
    result = train_round(
        str(policy),
        _solved_two_agent_instances(16),
        out_dir=tmp_path,
        preset=preset,
        reward_funcs=[length_reward],
    )
    assert result.steps == 2
    before = load_file(policy / "model.safetensors")
    after = load_file(result.checkpoint / "model.safetensors")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == len(before)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["prompt_style"] == "compact"
    assert prompt_style_of(result.checkpoint) == "compact"


def test_cli_policy_init(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envengineer.cli import main

    assert main(["policy", "init", "--size", "tiny", "--out", str(tmp_path / "p"), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "M parameters" in out and "compact prompts" in out
    assert main(["policy", "init", "--out", str(tmp_path / "p")]) == 2  # not empty: one-line error
    assert "not empty" in capsys.readouterr().err
