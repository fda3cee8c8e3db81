"""Hugging Face transformers backend: the trainable model, on CPU or GPU, batched with left padding.

* ``model`` is a local checkpoint folder or a hub id. A local folder is read as is. A hub id is looked
  up in the local Hugging Face cache first and only then on the hub; where no hub is reachable the error
  says so and asks for a local path. ``None`` / ``"embedded"`` is the embedded SmolLM2-135M-Instruct
  (resolved by :func:`envengineer.models.load_backend`).
* Prompts are rendered with the tokenizer's chat template. ``enable_thinking`` (Qwen3's thinking switch)
  is passed to the template when the template knows it.
* GPU: bfloat16 by default; CPU: float32.
* ``SamplingParams.json_schema`` constrains decoding with xgrammar's logits processor. Without xgrammar
  installed the backend logs a warning once and decodes unconstrained.
* Sampling is seeded per batch from ``(params.seed, the batch's prompts)``, so rerunning an evaluation
  reproduces its completions on the same hardware.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.models.base import Completion, Conversation, ModelError, SamplingParams, check_conversations
from envengineer.models.policy_folder import check_model_folder
from envengineer.models.small_policy import PROMPT_STYLE_KEY

log = logging.getLogger(__name__)

_DTYPES = ("auto", "float32", "bfloat16", "float16")


class HFBackend:
    """Chat completions from a transformers causal LM.

    Args:
        model: A local checkpoint folder or a hub id (already resolved: see
            :func:`envengineer.models.resolve_model`).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``…; default: CUDA when available, else CPU.
        dtype: ``"auto"`` (bfloat16 on GPU, float32 on CPU), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        enable_thinking: Qwen3's thinking switch, passed to the chat template when it supports it;
            ``None`` keeps the template's default.
        trust_remote_code: Passed to ``from_pretrained``.

    Raises:
        ModelError: The model cannot be loaded (with what to change), or has no chat template.
        ConfigError: A damaged local folder (:func:`~envengineer.models.policy_folder.check_model_folder`).
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        dtype: str = "auto",
        enable_thinking: bool | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ModelError(
                f"the hf backend needs torch and transformers ({exc}); "
                "install them with `pip install 'envengineer[train]'`"
            ) from None
        if dtype not in _DTYPES:
            raise ModelError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ModelError(f"device {device!r} asked for, but torch sees no CUDA device; use --device cpu")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        check_model_folder(model)
        tokenizer = _from_pretrained(AutoTokenizer, model, **kw)
        if device.startswith("cuda"):
            kw["device_map"] = device  # load straight onto the GPU, not through CPU memory
        lm = _from_pretrained(AutoModelForCausalLM, model, dtype=torch_dtype, **kw)
        if not device.startswith("cuda"):
            lm.to(device)
        self._setup(lm, tokenizer, name=f"hf:{model}", enable_thinking=enable_thinking)

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, *, name: str = "hf:in-memory", enable_thinking: bool | None = None
    ) -> HFBackend:
        """Wrap a model and tokenizer that are already loaded (e.g. during training, or in tests)."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name=name, enable_thinking=enable_thinking)
        return self

    def _setup(self, model: Any, tokenizer: Any, *, name: str, enable_thinking: bool | None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ModelError(
                f"{name}: the tokenizer has no chat template; use an instruct/chat checkpoint "
                "or set tokenizer.chat_template before saving it"
            )
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        # The prompt style the model was trained on (small policies record "compact"); None: not recorded.
        self.prompt_style: str | None = getattr(getattr(model, "config", None), PROMPT_STYLE_KEY, None)
        self._template_thinks = "enable_thinking" in str(tokenizer.chat_template)
        if enable_thinking is not None and not self._template_thinks:
            log.warning(
                "%s: the chat template has no thinking switch; enable_thinking=%s is ignored",
                name,
                enable_thinking,
            )
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos = {gen_eos} if isinstance(gen_eos, int) else set(gen_eos or ())
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        self._eos_ids = frozenset(int(e) for e in eos)
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = min(self._eos_ids) if self._eos_ids else 0
        self._pad_id = int(pad)
        self._grammars: dict[str, Any] = {}
        self._grammar_compiler: Any = None
        self._warned_no_grammar = False

    # -- prompts ---------------------------------------------------------------------------------------
    def render(self, conversation: Conversation) -> str:
        """The prompt text of one conversation, ending with the assistant turn's header."""
        kwargs: dict[str, Any] = {}
        if self.enable_thinking is not None and self._template_thinks:
            kwargs["enable_thinking"] = self.enable_thinking
        return self.tokenizer.apply_chat_template(
            list(conversation), tokenize=False, add_generation_prompt=True, **kwargs
        )

    # -- generation ------------------------------------------------------------------------------------
    def generate(
        self,
        conversations: Sequence[Conversation],
        params: SamplingParams,
        *,
        max_seconds: float | None = None,
    ) -> list[Completion]:
        """Complete a batch of conversations in one left-padded ``model.generate`` call.

        ``max_seconds`` (a learner's deadline, not an evaluation setting) stops the batch's decoding after
        that many seconds (transformers' ``max_time``): answers may then end early, without their
        end-of-sequence token.
        """
        import torch

        if not conversations:
            return []
        check_conversations(conversations)
        texts = [self.render(c) for c in conversations]
        device = _model_device(self.model)
        enc = self.tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(device)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "pad_token_id": self._pad_id,
            "do_sample": not params.greedy,
        }
        if max_seconds is not None:
            gen_kwargs["max_time"] = float(max_seconds)
        if params.greedy:
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            # top_k=0 switches transformers' default top-k (50) off: the same sampling as vLLM and OpenAI.
            gen_kwargs.update(temperature=float(params.temperature), top_p=float(params.top_p), top_k=0)
        if params.json_schema is not None:
            processor = self._grammar_processor(params.json_schema)
            if processor is not None:
                gen_kwargs["logits_processor"] = [processor]
        seed = _batch_seed(params.seed, texts)
        devices = [device.index or 0] if device.type == "cuda" else []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                torch.manual_seed(seed)
                out = self.model.generate(**enc, **gen_kwargs)
        finally:
            if was_training:
                self.model.train()
        new = out[:, enc["input_ids"].shape[1] :].tolist()
        return [self._completion(row) for row in new]

    def _completion(self, row: list[int]) -> Completion:
        n = len(row)
        for i, tok in enumerate(row):
            if tok in self._eos_ids:
                n = i + 1
                break
        text = self.tokenizer.decode(row[:n], skip_special_tokens=True)
        return Completion(text, completion_tokens=n)

    def _grammar_processor(self, schema: dict[str, Any]) -> Any:
        try:
            import xgrammar as xgr
            from xgrammar.contrib.hf import LogitsProcessor
        except ImportError:
            if not self._warned_no_grammar:
                log.warning(
                    "xgrammar is not installed: json_schema is ignored and decoding is unconstrained "
                    "(install it with `pip install xgrammar==0.2.9`)"
                )
                self._warned_no_grammar = True
            return None
        key = json.dumps(schema, sort_keys=True)
        compiled = self._grammars.get(key)
        if compiled is None:
            if self._grammar_compiler is None:
                vocab = _vocab_size(self.model, self.tokenizer)
                info = xgr.TokenizerInfo.from_huggingface(
                    self.tokenizer, vocab_size=vocab, stop_token_ids=sorted(self._eos_ids) or None
                )
                self._grammar_compiler = xgr.GrammarCompiler(info)
            try:
                compiled = self._grammar_compiler.compile_json_schema(key, any_whitespace=False)
            except Exception as exc:
                raise ModelError(f"json_schema cannot be compiled into a grammar: {exc}") from None
            self._grammars[key] = compiled
        return LogitsProcessor(compiled)  # one per generate() call: it holds per-row matcher state

    def __repr__(self) -> str:
        return f"HFBackend(name={self.name!r}, device={_model_device(self.model)})"


def _model_device(model: Any) -> Any:
    import torch

    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


def _vocab_size(model: Any, tokenizer: Any) -> int:
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        return int(emb.weight.shape[0])
    return max(len(tokenizer), int(getattr(model.config, "vocab_size", 0)))


def _batch_seed(seed: int, texts: Sequence[str]) -> int:
    """A seed for one batch, from the base seed and the batch's prompts (stable across runs)."""
    crc = 0
    for text in texts:
        crc = zlib.crc32(text.encode(), crc)
    return int(np.random.SeedSequence((seed, crc)).generate_state(1)[0])


def _from_pretrained(loader: Any, name: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained`` with the local cache first and an error that says what to change."""
    local = Path(name).expanduser().exists()
    try:
        return loader.from_pretrained(name, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        if local:
            raise ModelError(
                f"cannot load {name} ({_first_line(exc)}); the folder needs config.json, the "
                "weights (*.safetensors) and the tokenizer files, as save_pretrained writes them"
            ) from None
        first = exc
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise ModelError(_hub_hint(name, first))
    log.info("%s is not a local folder nor in the Hugging Face cache; trying the hub", name)
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelError(_hub_hint(name, exc)) from None


def _hub_hint(name: str, exc: BaseException) -> str:
    return (
        f"cannot load model {name!r}: it is not a local folder and the model hub could not provide it "
        f"({_first_line(exc)}). Without network access pass the path of a local checkpoint folder "
        "(config.json, *.safetensors, tokenizer files), or leave --model out to use the embedded "
        "SmolLM2-135M-Instruct"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
