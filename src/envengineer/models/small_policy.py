"""Small from-scratch policies: a Llama-style causal LM of 1-20M parameters with the testbed's own tokenizer.

The embedded SmolLM2-135M needs hours of warm-start on a CPU before it writes a valid plan; a policy of a
few million parameters, trained from scratch on the solver's plans, learns the answer format in minutes.
:func:`init_policy` writes an ordinary local model folder (``config.json``, ``model.safetensors``, a
``tokenizer.json`` with a chat template), so ``envengineer eval``, ``sft``, ``train`` and ``run``, and TRL's
trainers, take it like any other model path::

    envengineer policy init --size tiny --out runs/policy-tiny
    envengineer sft --model runs/policy-tiny --preset sft-small --round round.yaml --out runs/sft

Anything that takes a model also takes the name ``policy:SIZE`` (or ``policy:SIZE@SEED``): a freshly
initialised policy of that size and initialisation seed, created once in the user cache
(``$ENVENGINEER_CACHE/policies/``, see :func:`envengineer.models.cache.cache_root`) and reused, so an
experiment file can start from one without a separate ``init`` step.

How a cell is spelled, how its embedding starts and what the warm-start's scratchpad holds is the
policy's *format*, recorded in ``config.json``; the formats, their records and their tokenizer live in
:mod:`envengineer.models.policy_formats` (:data:`POLICY_FORMATS`, :func:`build_tokenizer`, re-exported
here): the default ``free-moves`` spells a cell as a row token and a column token, so a step is the same
change on every row of every board, and writes each cell's free moves, then the move beside the cell it
leads to, so the answer copies its checked reasoning. This module keeps the model: its sizes, the folder
:func:`init_policy` writes (with the cell embeddings the format starts from), its names and the prompt
style it reads.

The folder records the prompt style the policy reads (``compact`` by default: the board without the prose
rules, :func:`envengineer.mapf.prompt.render_compact`) in ``config.json`` under ``envengineer_prompt_style``;
training and evaluation use it whenever no style is named (:func:`prompt_style_of`). It survives training,
since the trainers save the model's config with the weights.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.mapf.prompt import PromptStyle, check_prompt_style
from envengineer.models.cache import cache_root
from envengineer.models.policy_formats import (
    CELL_RANGE,
    DEFAULT_FORMAT,
    POLICY_FORMATS,
    PolicyFormat,
    SFTTarget,
    build_tokenizer,
    check_policy_format,
)

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FORMAT",
    "FORMAT_KEY",
    "MAX_SEED",
    "POLICY_FORMATS",
    "POLICY_SIZES",
    "PROMPT_STYLE_KEY",
    "PolicyFormat",
    "PolicySize",
    "SFTTarget",
    "build_tokenizer",
    "check_policy_format",
    "check_seed",
    "init_policy",
    "is_policy_name",
    "is_small_policy",
    "named_policy_path",
    "parse_policy_name",
    "parse_seed",
    "policy_format_of",
    "policy_summary",
    "prompt_style_of",
    "replaceable_folder",
]

#: Key of ``config.json`` that names the prompt style a model was trained to read.
PROMPT_STYLE_KEY = "envengineer_prompt_style"
#: Key of ``config.json`` that names the policy's format (:data:`POLICY_FORMATS`); absent: ``v1``.
FORMAT_KEY = "envengineer_policy_format"


@dataclass(frozen=True)
class PolicySize:
    """The shape of one size of the family (a ``LlamaConfig``'s main numbers)."""

    hidden: int
    layers: int
    heads: int
    intermediate: int

    def parameters(self, vocab: int) -> int:
        """Parameter count with tied embeddings (attention, MLP, norms, embeddings).

        >>> POLICY_SIZES["tiny"].parameters(300) > 500_000
        True
        """
        d, f = self.hidden, self.intermediate
        per_layer = 4 * d * d + 3 * d * f + 2 * d
        return self.layers * per_layer + vocab * d + d


#: The family: about 1M, 5M and 21M parameters.
POLICY_SIZES: dict[str, PolicySize] = {
    "tiny": PolicySize(hidden=128, layers=4, heads=4, intermediate=384),
    "small": PolicySize(hidden=256, layers=6, heads=8, intermediate=768),
    "base": PolicySize(hidden=512, layers=6, heads=8, intermediate=1536),
}


def init_policy(
    out: str | Path,
    *,
    size: str = "tiny",
    seed: int = 0,
    prompt_style: PromptStyle = "compact",
    policy_format: str = DEFAULT_FORMAT,
    max_length: int = 2048,
    overwrite: bool = False,
) -> Path:
    """Create a freshly initialised policy folder (weights, config, tokenizer, chat template).

    Every argument is checked before torch is imported, so a bad one fails in well under a second.

    Args:
        out: The folder to write (created; must be empty or absent unless ``overwrite``).
        size: One of :data:`POLICY_SIZES` (``tiny``, ``small``, ``base``).
        seed: Seed of the weight initialisation, in ``[0, 2**32)`` (the same seed gives the same weights).
        prompt_style: The prompt style the policy reads, recorded in ``config.json``.
        policy_format: One of :data:`POLICY_FORMATS` (its tokenizer, embedding initialisation and
            scratchpad), recorded in ``config.json``.
        max_length: Longest sequence (prompt + answer) in tokens.
        overwrite: Replace the contents of an existing model folder (see :func:`replaceable_folder`): the
            new policy is written beside it first, then the old files are removed and the new ones moved in,
            so no file of the old model survives.

    Returns:
        The folder.

    Raises:
        ConfigError: Unknown size or prompt style, a bad seed or length, a non-empty folder without
            ``overwrite``, or (with ``overwrite``) a folder that does not look like a model folder.
    """
    if size not in POLICY_SIZES:
        raise ConfigError(f"unknown policy size {size!r}; use one of {list(POLICY_SIZES)}")
    check_prompt_style(prompt_style)
    check_policy_format(policy_format)
    check_seed(seed, where="the seed")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not 64 <= max_length <= 65536:
        raise ConfigError(f"max_length must be an integer in [64, 65536], got {max_length!r}")
    folder = Path(out)
    replace = _check_folder(folder, overwrite)
    if not replace:
        folder.mkdir(parents=True, exist_ok=True)
        n = _write_policy(folder, size, seed, prompt_style, policy_format, max_length)
        log.info(
            "initialised a %s policy (%.2fM parameters, %s prompts) in %s",
            size,
            n / 1e6,
            prompt_style,
            folder,
        )
        return folder
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.resolve().name}.tmp-", dir=folder.resolve().parent))
    try:
        n = _write_policy(tmp, size, seed, prompt_style, policy_format, max_length)
        for old in folder.iterdir():
            old.unlink()
        for new in tmp.iterdir():
            new.rename(folder / new.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info(
        "replaced %s with a new %s policy (%.2fM parameters, %s prompts)", folder, size, n / 1e6, prompt_style
    )
    return folder


def replaceable_folder(folder: Path) -> bool:
    """True for a folder ``--overwrite`` may empty: a model folder of plain files.

    The rule: the folder holds a ``config.json`` (a model folder: one :func:`init_policy` or a trainer
    wrote) and nothing but regular files (no subfolder, no symbolic link). A run folder, a home folder or
    a checkpoint tree is never emptied; remove it yourself or name a new folder.

    >>> replaceable_folder(Path("/nonexistent-folder"))
    False
    """
    if folder.is_symlink() or not folder.is_dir() or not (folder / "config.json").is_file():
        return False
    return all(entry.is_file() and not entry.is_symlink() for entry in folder.iterdir())


def _check_folder(folder: Path, overwrite: bool) -> bool:
    """Whether the folder's old contents must be replaced; raises when it may not be written."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; name a folder for the policy")
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    if not overwrite:
        raise ConfigError(f"{folder} is not empty; name a new folder or pass --overwrite")
    if not replaceable_folder(folder):
        raise ConfigError(
            f"{folder} is not a model folder (a config.json beside plain files only); --overwrite replaces "
            "only those: name a new folder or empty this one yourself"
        )
    return True


def _write_policy(
    folder: Path, size: str, seed: int, prompt_style: PromptStyle, policy_format: str, max_length: int
) -> int:
    """Write the policy into ``folder``; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = POLICY_SIZES[size]
    spec = POLICY_FORMATS[policy_format]
    tokenizer = spec.tokenizer(max_length)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=max_length,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **{PROMPT_STYLE_KEY: prompt_style, FORMAT_KEY: policy_format},
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if spec.embeddings == "coordinates":
        _coordinate_embeddings(model.get_input_embeddings().weight, tokenizer, config.initializer_range, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def _coordinate_embeddings(weight: Any, tokenizer: Any, std: float, seed: int) -> None:
    """Set the cell tokens' embeddings to a row vector plus a column vector (:attr:`PolicyFormat.embeddings`).

    The vector of index i is a fixed random projection of ``cos(w i), sin(w i)`` for 8 frequencies
    ``w = k pi / 16``: the dot product of two indices' vectors depends on their distance alone, so a step
    up is the same change on every row. Scaled so a cell's embedding has the initialiser's spread.
    """
    import math

    import torch

    generator = torch.Generator().manual_seed(seed)
    freqs = torch.arange(1, 9, dtype=torch.float64) * math.pi / CELL_RANGE
    angles = torch.arange(CELL_RANGE, dtype=torch.float64)[:, None] * freqs
    features = torch.cat([angles.cos(), angles.sin()], dim=1)  # (16, 16), each row of norm sqrt(8)
    scale = std / math.sqrt(2 * 8)
    rows, cols = (
        (
            features @ torch.randn(16, weight.shape[1], generator=generator, dtype=torch.float64) * scale
        ).float()
        for _ in range(2)
    )
    vocab = tokenizer.get_vocab()
    with torch.no_grad():
        for r in range(CELL_RANGE):
            for piece in (f"({r}", f" ({r}"):
                if piece in vocab:
                    weight[vocab[piece]] = rows[r] * math.sqrt(2)
            if f",{r})" in vocab:
                weight[vocab[f",{r})"]] = cols[r] * math.sqrt(2)
            for c in range(CELL_RANGE):
                for piece in (f"({r},{c})", f" ({r},{c})"):
                    if piece in vocab:
                        weight[vocab[piece]] = rows[r] + cols[c]


def policy_format_of(model: str | Path | None) -> PolicyFormat | None:
    """The format a local small-policy folder records (``v1`` when it records none), or None.

    None for anything that is not a small-policy folder (hub ids, other models).

    >>> policy_format_of(None) is None
    True
    """
    if model is None or prompt_style_of(model) is None:
        return None
    config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    return POLICY_FORMATS[check_policy_format(str(config.get(FORMAT_KEY, "v1")))]


#: Largest initialisation seed (``--seed`` and ``policy:SIZE@SEED`` alike): seeds lie in ``[0, 2**32)``.
MAX_SEED = 2**32 - 1
_SEED_TEXT = re.compile(r"[0-9]{1,10}")


def check_seed(seed: object, *, where: str) -> int:
    """The seed itself when it is an integer in ``[0, 2**32)``; otherwise a :class:`ConfigError`.

    >>> check_seed(7, where="--seed")
    7
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{where} must be an integer in [0, {MAX_SEED}], got {seed!r}")
    return seed


def parse_seed(text: str, *, where: str) -> int:
    """A seed written in ASCII digits (``0``-``9`` only: no sign, ``_``, space or other script's digits).

    >>> parse_seed("42", where="--seed")
    42
    """
    if not _SEED_TEXT.fullmatch(text):
        raise ConfigError(f"{where} must be written in the digits 0-9, in [0, {MAX_SEED}], got {text[:20]!r}")
    return check_seed(int(text), where=where)


POLICY_PREFIX = "policy:"


def is_policy_name(name: str | None) -> bool:
    """True for model names of the form ``policy:SIZE`` or ``policy:SIZE@SEED``.

    >>> is_policy_name("policy:tiny"), is_policy_name("runs/x/checkpoint"), is_policy_name(None)
    (True, False, False)
    """
    return name is not None and name.strip().lower().startswith(POLICY_PREFIX)


def parse_policy_name(name: str) -> tuple[str, int]:
    """``(size, seed)`` of a ``policy:SIZE[@SEED]`` name; SEED in ASCII digits, bounded as ``--seed``.

    Raises:
        ConfigError: An unknown size, or a seed that is empty, not ASCII digits or out of ``[0, 2**32)``.

    >>> parse_policy_name("policy:small@3")
    ('small', 3)
    """
    spec = name.strip().lower()[len(POLICY_PREFIX) :]
    size, at, seed_text = spec.partition("@")
    if size not in POLICY_SIZES:
        raise ConfigError(
            f"unknown policy size in {name!r}; use policy:SIZE with SIZE in {list(POLICY_SIZES)}"
        )
    if not at:
        return size, 0
    try:
        return size, parse_seed(seed_text, where=f"the seed in {name!r}")
    except ConfigError as exc:
        raise ConfigError(f"bad seed: {exc}; write policy:SIZE@SEED or drop the '@'") from None


def named_policy_path(name: str) -> Path:
    """The cached folder of a ``policy:SIZE[@SEED]`` name, initialised on first use (atomically)."""
    import shutil
    import tempfile

    size, seed = parse_policy_name(name)
    # The format is part of the key: a folder cached by an older release keeps its own name and format,
    # and a new default never silently reuses it.
    folder = cache_root() / "policies" / f"{size}-{DEFAULT_FORMAT}-seed{seed}"
    if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        init_policy(tmp, size=size, seed=seed, overwrite=True)
        try:
            tmp.rename(folder)
        except OSError:  # another process put it in place first; theirs is identical
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def is_small_policy(model: str | Path | None) -> bool:
    """True for a local folder made by :func:`init_policy` (or trained from one)."""
    if model is None:
        return False
    if is_policy_name(str(model)):
        return True
    try:
        return prompt_style_of(model) is not None
    except ConfigError:  # the folder records a style, just not one we know: still a small policy
        return True


def prompt_style_of(model: str | Path | None) -> PromptStyle | None:
    """The prompt style a local model folder records (``config.json``), or None (hub ids, other models).

    >>> prompt_style_of(None) is None
    True
    """
    if model is None:
        return None
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    try:
        style = json.loads(config.read_text(encoding="utf-8")).get(PROMPT_STYLE_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return None if style is None else check_prompt_style(str(style))


def policy_summary(folder: str | Path) -> str:
    """One line about a policy folder: parameters, vocabulary, prompt style (reads ``config.json``)."""
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    d, layers, f, vocab = (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["intermediate_size"],
        config["vocab_size"],
    )
    heads = config["num_attention_heads"]
    n = PolicySize(d, layers, heads, f).parameters(vocab)
    return (
        f"{folder}: {n / 1e6:.2f}M parameters (hidden {d}, {layers} layers, {heads} heads), vocabulary "
        f"{vocab}, {config.get(PROMPT_STYLE_KEY, 'full')} prompts, format {config.get(FORMAT_KEY, 'v1')}"
    )
