"""Backends: the interface, the scripted policies, vLLM's absence, transformers on a tiny in-memory model."""

from __future__ import annotations

import json
import logging
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.mapf.instance import Instance
from envengineer.models import ChatBackend, Completion, ModelError, SamplingParams, load_backend

# -- SamplingParams and load_backend ---------------------------------------------------------------------


def test_sampling_params_defaults_and_validation() -> None:
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.max_new_tokens, p.seed, p.json_schema) == (0.7, 1.0, 512, 0, None)
    assert SamplingParams(temperature=0).greedy
    for bad in (
        {"temperature": -1},
        {"temperature": float("nan")},
        {"top_p": 0},
        {"top_p": 1.5},
        {"max_new_tokens": 0},
        {"max_new_tokens": 2.5},
        {"seed": -1},
        {"json_schema": "{}"},
    ):
        with pytest.raises(ModelError):
            SamplingParams(**bad)
    assert issubclass(ModelError, EnvEngineerError)


def test_load_backend_rejects_unknown_kind_and_option() -> None:
    with pytest.raises(ModelError, match="unknown backend"):
        load_backend("llamafile", "x")
    with pytest.raises(ModelError, match="no option"):
        load_backend("scripted", "optimal", base_url="http://x")


def test_vllm_missing_names_the_gpu_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(ModelError, match=r"envengineer\[gpu\]"):
        load_backend("vllm", "/some/local/model")


def test_importing_models_loads_no_heavy_library() -> None:
    import subprocess

    code = (
        "import sys, envengineer.models, envengineer.evaluation, envengineer.cli.eval; "
        "print(sorted(m for m in ('torch', 'transformers', 'openai', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- scripted ----------------------------------------------------------------------------------------------
SWAP = Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
FOLLOW = Instance("follow", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)


def test_scripted_backend_answers_known_prompts_only() -> None:
    prompt = pytest.importorskip("envengineer.mapf.prompt")
    from envengineer.mapf.validator import validate

    backend = load_backend("scripted", "optimal", instances=[SWAP, FOLLOW])
    assert isinstance(backend, ChatBackend) and backend.name == "scripted:optimal"
    convs = [
        prompt.build_messages(FOLLOW),
        prompt.build_messages(SWAP),
        [{"role": "user", "content": "what is MAPF?"}],
    ]
    out = backend.generate(convs, SamplingParams())
    assert validate(FOLLOW, out[0].text).optimal and validate(SWAP, out[1].text).optimal
    assert out[2].text == "" and out[2].error is not None


def test_scripted_random_is_deterministic_per_instance_and_seed() -> None:
    prompt = pytest.importorskip("envengineer.mapf.prompt")
    backend = load_backend("scripted", "random", instances=[SWAP, FOLLOW])
    a = backend.generate([prompt.build_messages(SWAP), prompt.build_messages(FOLLOW)], SamplingParams(seed=1))
    b = backend.generate([prompt.build_messages(FOLLOW)], SamplingParams(seed=1))
    assert a[1] == b[0]  # independent of the batch
    seeds = {
        backend.generate([prompt.build_messages(SWAP)], SamplingParams(seed=s))[0].text for s in range(8)
    }
    assert len(seeds) > 1


def test_scripted_unknown_policy() -> None:
    with pytest.raises(ModelError, match="optimal"):
        load_backend("scripted", "clever")


# -- hf on a tiny in-memory model ---------------------------------------------------------------------------
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def tiny_model(vocab_chars: str = string.printable) -> tuple[Any, Any]:
    """A character-level tokenizer and a one-layer Llama-style model, built in memory.

    Llama rather than Qwen2: transformers 5 reloads any ``qwen2`` checkpoint's tokenizer as
    ``Qwen2Tokenizer`` (byte-level BPE), which would not round-trip a character-level vocabulary.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(vocab_chars)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=vocab["<|im_end|>"],
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<|im_start|>"],
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = vocab["<|im_end|>"]
    model.generation_config.pad_token_id = vocab["<pad>"]
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny() -> Iterator[tuple[Any, Any]]:
    # One thread: a model this small gains nothing from more, and spinning threads on a shared CPU
    # make generation many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_model()
    torch.set_num_threads(threads)


def _hf(tiny: tuple[Any, Any], **kw: Any) -> Any:
    from envengineer.models.hf import HFBackend

    return HFBackend.from_model(*tiny, **kw)


CONVS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "You plan paths."},
        {"role": "user", "content": "A much longer prompt, 3x3."},
    ],
    [{"role": "user", "content": "mid-sized prompt"}],
]


def test_hf_renders_chat_template_and_thinking_switch(tiny: tuple[Any, Any]) -> None:
    plain = _hf(tiny).render(CONVS[0])
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert _hf(tiny, enable_thinking=False).render(CONVS[0]).endswith("<think>\n\n</think>\n\n")
    assert _hf(tiny, enable_thinking=True).render(CONVS[0]) == plain


def test_hf_batch_with_left_padding_matches_one_by_one(tiny: tuple[Any, Any]) -> None:
    backend = _hf(tiny)
    _, tokenizer = tiny
    enc = tokenizer(
        [backend.render(c) for c in CONVS], padding=True, padding_side="left", return_tensors="pt"
    )
    assert (enc["attention_mask"][:, 0] == 0).any()  # the batch really is left-padded
    params = SamplingParams(temperature=0, max_new_tokens=12)
    batched = backend.generate(CONVS, params)
    single = [backend.generate([c], params)[0] for c in CONVS]
    assert batched == single
    for c in batched:
        assert c.error is None and 1 <= c.completion_tokens <= 12
        assert len(c.text) in (c.completion_tokens, c.completion_tokens - 1)  # one char per token, minus EOS


def test_hf_sampling_is_reproducible_from_the_seed(tiny: tuple[Any, Any]) -> None:
    backend = _hf(tiny)
    p = SamplingParams(temperature=1.0, max_new_tokens=10, seed=5)
    first = backend.generate(CONVS, p)
    assert backend.generate(CONVS, p) == first
    others = [
        backend.generate(CONVS, SamplingParams(temperature=1.0, max_new_tokens=10, seed=s)) for s in range(3)
    ]
    assert any(o != first for o in others)
    assert backend.generate([], p) == []


def test_hf_json_schema_constrains_decoding(tiny: tuple[Any, Any]) -> None:
    pytest.importorskip("xgrammar")
    backend = _hf(tiny)
    schema = {
        "type": "object",
        "properties": {"mode": {"enum": ["fast", "slow"]}},
        "required": ["mode"],
        "additionalProperties": False,
    }
    out = backend.generate(
        CONVS, SamplingParams(temperature=1.0, max_new_tokens=40, json_schema=schema, seed=1)
    )
    for c in out:
        assert json.loads(c.text) in ({"mode": "fast"}, {"mode": "slow"}), c.text


def test_hf_json_schema_without_xgrammar_falls_back_with_a_warning(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # makes `import xgrammar` fail
    backend = _hf(tiny)
    plain = SamplingParams(temperature=0, max_new_tokens=5)
    with caplog.at_level(logging.WARNING):
        out = backend.generate(
            CONVS[:1], SamplingParams(temperature=0, max_new_tokens=5, json_schema={"type": "object"})
        )
    assert "xgrammar is not installed" in caplog.text
    assert out == backend.generate(CONVS[:1], plain)


def test_hf_without_chat_template_is_a_model_error(tiny: tuple[Any, Any]) -> None:
    from envengineer.models.hf import HFBackend

    model, tokenizer = tiny_model()
    tokenizer.chat_template = None
    with pytest.raises(ModelError, match="chat template"):
        HFBackend.from_model(model, tokenizer)


def test_hf_loads_a_local_folder_through_load_backend(tmp_path: Path, tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    backend = load_backend("hf", str(tmp_path / "ckpt"), device="cpu")
    assert backend.name == f"hf:{tmp_path / 'ckpt'}"
    p = SamplingParams(temperature=0, max_new_tokens=6)
    assert backend.generate(CONVS, p) == _hf(tiny).generate(CONVS, p)


def test_hf_unreachable_hub_id_says_to_pass_a_local_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="local checkpoint folder"):
        load_backend("hf", "no-such-org/no-such-model-xyz", device="cpu")


def test_hf_broken_local_folder_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty: config\.json is missing"):  # before transformers reads it
        load_backend("hf", str(tmp_path / "empty"), device="cpu")


def test_completion_value_semantics() -> None:
    assert Completion("a", 1) == Completion("a", 1, None)
    assert not Completion("", error="x").ok
