"""Training presets: YAML files that map onto TRL's ``GRPOConfig`` and ``SFTConfig``.

A preset has a few keys of our own (the model, LoRA, the reward shape, epochs, prompt and completion
lengths, Qwen3's thinking switch) and one pass-through section, ``grpo:`` or ``sft:``, whose keys are the
option names of the pinned TRL version. Both levels reject unknown keys with a message that names the key:
our own keys through pydantic (``extra="forbid"``), the pass-through section against the fields of the
TRL dataclass, so a renamed TRL option fails loudly instead of being ignored::

    kind: grpo
    model: null                 # the model the preset is sized for (null: the embedded SmolLM2-135M)
    reward_shape: dense
    epochs: 1
    max_prompt_length: 1024     # checked on the round's prompts before training
    max_completion_length: 128  # -> GRPOConfig.max_completion_length
    thinking: false             # -> chat_template_kwargs.enable_thinking
    lora: {enabled: true, r: 16, alpha: 32}
    grpo:
      learning_rate: 5.0e-5
      num_generations: 4

Shipped presets live in ``envengineer/presets/`` (``grpo-cpu``, ``grpo-gpu``, ``sft-cpu``, ``sft-gpu``); a
preset is named by its file name, its short alias (``cpu``/``gpu``, taken with the kind) or a path.
Options that the command line sets (``output_dir``, ``seed``, ``num_train_epochs``, ...) may not appear in
the pass-through section; the error names the key that replaces them.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.errors import ConfigError
from envengineer.mapf.config import format_validation_error, read_yaml
from envengineer.models.policy_formats import SFTTarget

PresetKind = Literal["grpo", "sft"]
RewardShape = Literal["graded", "sparse", "dense"]

#: Pass-through options that our own keys or the command line set; the value says what to use instead.
_RESERVED: dict[str, str] = {
    "output_dir": "the --out directory (out_dir)",
    "seed": "the --seed argument",
    "data_seed": "the --seed argument",
    "num_train_epochs": "the top-level 'epochs' key (or --epochs)",
    "max_completion_length": "the top-level 'max_completion_length' key",
    "max_length": "the top-level 'max_prompt_length' and 'max_completion_length' keys",
}
_ALIASES = {"cpu": "cpu", "gpu": "gpu"}


class LoraSettings(BaseModel):
    """LoRA through PEFT; ``enabled: false`` trains every weight (full fine-tuning)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="Train LoRA adapters instead of every weight.")
    r: int = Field(default=16, ge=1, le=1024, description="LoRA rank.")
    alpha: int = Field(default=32, ge=1, le=4096, description="LoRA scaling numerator (lora_alpha).")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: str | list[str] = Field(
        default="all-linear", description="Modules that get adapters: 'all-linear' or a list of module names."
    )

    def to_peft(self) -> Any:
        """The ``peft.LoraConfig`` for causal language modelling (imports peft)."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules,
            task_type="CAUSAL_LM",
        )


class ProbeSettings(BaseModel):
    """The in-round probe (:mod:`envengineer.training.diagnostics`): greedy answers on held-out boards."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(
        default=25,
        ge=0,
        le=1_000_000,
        description="Probe every N optimizer steps and before the first (0: off).",
    )
    per_cell: int = Field(
        default=2,
        ge=1,
        le=50,
        description="Probe boards per (agents, size, wait subset) of the round's data.",
    )
    kl: bool = Field(
        default=True,
        description="Also estimate the KL from the round's starting weights (keeps one copy of the model).",
    )


class DynamicSamplingSettings(BaseModel):
    """DAPO's dynamic sampling (:mod:`envengineer.training.trainer`): zero-variance groups are refilled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="Replace groups without reward variance by fresh ones.")
    max_refills: int = Field(
        default=4, ge=0, le=64, description="Extra generation batches per step at most (then: top up as is)."
    )


def resolve_target(target: str | None, model_path: str) -> str:
    """``target``, else the scratchpad of the small policy's format, else ``solver``."""
    from envengineer.models.small_policy import policy_format_of

    if target is not None:
        return target
    spec = policy_format_of(model_path)
    return spec.scratchpad if spec is not None else "solver"


class GuidanceSettings(BaseModel):
    """Solver guidance (:mod:`envengineer.training.guidance`): unsolved groups get the solver's plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="Put the solver's plan into groups (single process).")
    when: Literal["failed", "always"] = Field(
        default="failed", description="failed: groups with no optimal completion; always: every group."
    )
    target: SFTTarget | None = Field(
        default=None,
        description="The plan's SFT target; null: the small policy's recorded scratchpad, else solver.",
    )

    def resolve_target(self, model_path: str) -> str:
        """The target, else the scratchpad of the small policy's format, else ``solver``."""
        return resolve_target(self.target, model_path)


class _Preset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(default="", description="What the preset is for, in a sentence or two.")
    model: str | None = Field(
        default=None,
        description="Model the preset is sized for (hub id or path; null: the embedded model). Runs train "
        "the model they are given (default: embedded) and log a note when it differs from this one.",
    )
    lora: LoraSettings = Field(default_factory=LoraSettings, description="LoRA settings; off means full FT.")
    epochs: float = Field(default=1.0, gt=0, le=100, description="Passes over the round's instances.")
    max_prompt_length: int | None = Field(
        default=1024,
        ge=8,
        description="Longest prompt in tokens; a longer prompt stops the run before training.",
    )
    max_completion_length: int = Field(default=256, ge=1, le=65536, description="Longest answer in tokens.")
    thinking: bool = Field(
        default=False, description="Qwen3's thinking switch (chat template enable_thinking)."
    )
    prompt_style: Literal["full", "compact"] | None = Field(
        default=None,
        description="Prompt style of the training data: full (rules and format) or compact (the board "
        "alone); null: the style the model folder records, else full.",
    )

    def resolve_prompt_style(self, model_path: str) -> str:
        """The preset's prompt style, else the one the model folder records, else ``full``."""
        from envengineer.models.small_policy import prompt_style_of

        return self.prompt_style or prompt_style_of(model_path) or "full"

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return {"enable_thinking": self.thinking}


class GRPOPreset(_Preset):
    """A GRPO round: our keys plus the ``grpo:`` section, passed through to ``trl.GRPOConfig``.

    >>> p = GRPOPreset.model_validate({"reward_shape": "dense", "grpo": {"num_generations": 4}})
    >>> p.kind, p.reward_shape, p.lora.enabled
    ('grpo', 'dense', False)
    """

    kind: Literal["grpo"] = "grpo"
    reward_shape: RewardShape = Field(
        default="graded", description="Testbed reward shape: graded (default), sparse (paper) or dense."
    )
    completions_per_step: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Completions per optimizer step over all processes; with it, grpo."
        "per_device_train_batch_size is the largest micro-batch and gradient_accumulation_steps is computed "
        "from the number of processes, so a step is the same whatever the GPU count (None: as written).",
    )
    grpo: dict[str, Any] = Field(
        default_factory=dict, description="Options of trl.GRPOConfig, passed through."
    )
    probe: ProbeSettings = Field(
        default_factory=ProbeSettings, description="Greedy probe on fixed held-out boards inside the round."
    )
    dynamic_sampling: DynamicSamplingSettings = Field(
        default_factory=DynamicSamplingSettings, description="Refill zero-variance groups (single process)."
    )
    guidance: GuidanceSettings = Field(
        default_factory=GuidanceSettings, description="The solver's plan in unsolved groups."
    )

    def batch_shape(self, world_size: int = 1) -> tuple[int, int]:
        """``(per_device_train_batch_size, gradient_accumulation_steps)`` for ``world_size`` processes.

        With ``completions_per_step`` the micro-batch is the largest divisor of the per-process share that
        fits ``grpo.per_device_train_batch_size``; without it, the section's values as written.

        >>> p = GRPOPreset.model_validate({"completions_per_step": 64, "grpo": {
        ...     "per_device_train_batch_size": 16, "num_generations": 8}})
        >>> p.batch_shape(1), p.batch_shape(2), p.batch_shape(8)
        ((16, 4), (16, 2), (8, 1))

        Raises:
            ConfigError: the completions do not split evenly over the processes.
        """
        cfg = self.grpo
        micro = int(cfg.get("per_device_train_batch_size", 8))
        if self.completions_per_step is None:
            return micro, int(cfg.get("gradient_accumulation_steps", 1))
        if "gradient_accumulation_steps" in cfg:
            raise ConfigError(
                "grpo.gradient_accumulation_steps is computed from completions_per_step and the number of "
                "processes; remove one of them"
            )
        total, world = self.completions_per_step, max(int(world_size), 1)
        if total % world:
            fits = [n for n in range(1, min(total, 4096) + 1) if total % n == 0]
            raise ConfigError(
                f"completions_per_step={total} does not split over {world} processes; use a process count "
                f"that divides it ({', '.join(map(str, fits[:12]))}, ...) or change completions_per_step"
            )
        share = total // world
        accum = next(a for a in range(1, share + 1) if share % a == 0 and share // a <= micro)
        return share // accum, accum

    def trl_options(self) -> dict[str, Any]:
        """The pass-through section, checked against ``trl.GRPOConfig`` (imports trl)."""
        from trl import GRPOConfig

        check_options(self.grpo, GRPOConfig, section="grpo")
        return dict(self.grpo)

    def build_config(
        self, *, output_dir: str | Path, seed: int = 0, epochs: float | None = None, **overrides: Any
    ) -> Any:
        """The real ``trl.GRPOConfig`` of this preset.

        Args:
            output_dir: Where the trainer writes its intermediate checkpoints and logs.
            seed: Seed of the trainer (model init, sampling, data order).
            epochs: Overrides the preset's ``epochs``.
            **overrides: GRPOConfig options that win over the preset (e.g. ``max_steps`` for a smoke run).
        """
        from trl import GRPOConfig

        options = _with_quiet_defaults(self.trl_options())
        if self.completions_per_step is not None:
            micro, accum = self.batch_shape(world_size())
            options["per_device_train_batch_size"] = micro
            options["gradient_accumulation_steps"] = accum
        template_kwargs = dict(options.pop("chat_template_kwargs", None) or {})
        if "enable_thinking" in template_kwargs:
            raise ConfigError(
                "grpo.chat_template_kwargs.enable_thinking: use the top-level 'thinking' key instead"
            )
        return _instantiate(
            GRPOConfig,
            "grpo",
            output_dir=str(output_dir),
            seed=seed,
            data_seed=seed,
            num_train_epochs=float(epochs if epochs is not None else self.epochs),
            max_completion_length=self.max_completion_length,
            chat_template_kwargs={**template_kwargs, **self.chat_template_kwargs},
            **{**options, **overrides},
        )


class SFTPreset(_Preset):
    """A supervised warm-start: our keys plus the ``sft:`` section, passed through to ``trl.SFTConfig``.

    >>> SFTPreset.model_validate({"target": "solver"}).target
    'solver'
    """

    kind: Literal["sft"] = "sft"
    target: SFTTarget | None = Field(
        default="solver",
        description="What the model learns to write: the solver's SoC-optimal plan (solver); each "
        "agent's path as cells inside <think> first and then the plan (solver_path); the path with each "
        "move beside the cell it leads to (solver_moves); the same with each step's time before its move "
        "(solver_timed); the moves with the free moves of each cell before each move (solver_free); the "
        "same with moves and waits that clash with the agents written before left out (solver_joint); "
        "that with each cell's time and the earlier agents' cells at the next time before each check "
        "(solver_timed_joint); the same with the hole check and the check against the agents as two "
        "lists (solver_timed_checks); "
        "null: the scratchpad the small-policy folder records in its format, else solver.",
    )

    def resolve_target(self, model_path: str) -> str:
        """The preset's target, else the scratchpad of the small policy's format, else ``solver``."""
        return resolve_target(self.target, model_path)

    length_group_batches: int | None = Field(
        default=None,
        ge=1,
        description="Batch rows of similar length: shuffle, sort each group of this many batches' rows by "
        "length, cut it into batches and shuffle the batches (envengineer.training.batching); padding "
        "falls while every batch still draws from a random sample. null: the trainer's random order.",
    )
    sft: dict[str, Any] = Field(default_factory=dict, description="Options of trl.SFTConfig, passed through.")

    def trl_options(self) -> dict[str, Any]:
        """The pass-through section, checked against ``trl.SFTConfig`` (imports trl)."""
        from trl import SFTConfig

        check_options(self.sft, SFTConfig, section="sft")
        if self.length_group_batches is not None and "train_sampling_strategy" in self.sft:
            raise ConfigError(
                "length_group_batches orders the batches itself; drop sft.train_sampling_strategy "
                "or set length_group_batches: null"
            )
        return dict(self.sft)

    def build_config(
        self, *, output_dir: str | Path, seed: int = 0, epochs: float | None = None, **overrides: Any
    ) -> Any:
        """The real ``trl.SFTConfig`` of this preset (``max_length`` = prompt + completion lengths).

        ``overrides`` are SFTConfig options that win over the preset (e.g. ``max_steps``).
        """
        from trl import SFTConfig

        options = _with_quiet_defaults(self.trl_options())
        max_length = None
        if self.max_prompt_length is not None:
            max_length = self.max_prompt_length + self.max_completion_length
        return _instantiate(
            SFTConfig,
            "sft",
            output_dir=str(output_dir),
            seed=seed,
            data_seed=seed,
            num_train_epochs=float(epochs if epochs is not None else self.epochs),
            max_length=max_length,
            **{**options, **overrides},
        )


Preset = GRPOPreset | SFTPreset
_CLASSES: dict[str, type[_Preset]] = {"grpo": GRPOPreset, "sft": SFTPreset}


def check_options(options: Mapping[str, Any], config_cls: type, *, section: str) -> None:
    """Reject keys of a pass-through section that ``config_cls`` does not have, or that we set ourselves.

    Args:
        options: The ``grpo:`` or ``sft:`` mapping of a preset.
        config_cls: ``trl.GRPOConfig`` or ``trl.SFTConfig`` (a dataclass).
        section: Name of the section, used in messages.

    Raises:
        ConfigError: naming the first bad key, a close match when there is one, and the TRL version.
    """
    name = section
    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    for key in options:
        if key in _RESERVED:
            raise ConfigError(f"{name}.{key} is set by envengineer; use {_RESERVED[key]}")
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.75)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{name}.{key} is not an option of {config_cls.__name__} in trl {_trl_version()}{hint} "
                f"(remove it or rename it; the options are listed in trl's {config_cls.__name__} docs)"
            )


def world_size() -> int:
    """Processes of this run: ``WORLD_SIZE`` as set by torchrun and ``accelerate launch`` (1 without)."""
    import os

    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def _with_quiet_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """The trainers' defaults without their warnings: TRL's checkpointing spelled with transformers 5's
    name, ``activation_checkpointing``, and, on a machine without an accelerator, memory left unpinned.

    TRL sets the deprecated ``gradient_checkpointing`` to True, which warns on every run; a preset that
    sets neither name gets the same behaviour without the warning. Pinned memory only speeds up copies
    to a GPU, and torch's data loader warns at every stage when asked for it without one.
    """
    if "activation_checkpointing" not in options and "gradient_checkpointing" not in options:
        options = {**options, "activation_checkpointing": True}
    if "dataloader_pin_memory" not in options and not _accelerator_available():
        options = {**options, "dataloader_pin_memory": False}
    return options


def _accelerator_available() -> bool:
    import torch

    if hasattr(torch, "accelerator"):  # what the data loader itself asks (torch >= 2.6)
        return bool(torch.accelerator.is_available())
    return torch.cuda.is_available()


def _instantiate(config_cls: type, section: str, **options: Any) -> Any:
    try:
        return config_cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{section}: {config_cls.__name__} rejected the preset: {exc}") from None


def _trl_version() -> str:
    try:
        from importlib.metadata import version

        return version("trl")
    except Exception:  # pragma: no cover - metadata missing
        return "?"


# -- files ------------------------------------------------------------------------------------------------
def packaged_presets() -> dict[str, Path]:
    """The shipped preset files by name (``grpo-cpu``, ``grpo-gpu``, ``sft-cpu``, ``sft-gpu``)."""
    folder = resources.files("envengineer") / "presets"
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml")}


def default_preset_name(kind: PresetKind, *, gpu: bool) -> str:
    """The shipped preset used when none is named: ``{kind}-gpu`` with a GPU, ``{kind}-cpu`` otherwise.

    >>> default_preset_name("grpo", gpu=False)
    'grpo-cpu'
    """
    return f"{kind}-{'gpu' if gpu else 'cpu'}"


def load_preset(source: str | Path | Mapping[str, Any] | _Preset, kind: PresetKind = "grpo") -> Any:
    """Read a preset from a shipped name, an alias, a YAML path, a mapping or a preset object.

    Args:
        source: ``"grpo-cpu"``, ``"cpu"`` (with ``kind``), ``"path/to/preset.yaml"``, a dict, or a preset.
        kind: ``"grpo"`` or ``"sft"``; a preset of the other kind is an error.

    Returns:
        A :class:`GRPOPreset` or :class:`SFTPreset`.

    Raises:
        ConfigError: unknown name, unreadable file, wrong kind, unknown or out-of-range key.

    >>> load_preset("cpu", "grpo").kind
    'grpo'
    """
    if kind not in _CLASSES:
        raise ConfigError(f"unknown preset kind {kind!r}; use 'grpo' or 'sft'")
    cls = _CLASSES[kind]
    if isinstance(source, _Preset):
        if not isinstance(source, cls):
            raise ConfigError(f"expected a {kind} preset, got a {source.kind} preset")
        return source
    where = "preset"
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = _preset_path(source, kind)
        where = str(path)
        data = read_yaml(path, "preset")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a preset must be a YAML mapping, got {type(data).__name__}")
    found = data.get("kind", kind)
    if found != kind:
        raise ConfigError(
            f"{where}: this is a {found!r} preset but a {kind!r} preset is needed "
            f"(pass GRPO presets to `envengineer train --grpo`, SFT presets to `envengineer sft --preset`)"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {format_validation_error(exc)}") from None


def _preset_path(source: str | Path, kind: PresetKind) -> Path:
    path = Path(source)
    if path.is_file():
        return path
    shipped = packaged_presets()
    name = path.name.removesuffix(".yaml")
    for candidate in (name, f"{kind}-{_ALIASES.get(name, name)}"):
        if candidate in shipped and str(path.parent) in (".", ""):
            return shipped[candidate]
    names = sorted(shipped)
    raise ConfigError(
        f"no preset file {str(source)!r} and no shipped preset of that name; use a path or one of {names}"
    )


def preset_to_yaml(preset: _Preset) -> str:
    """The preset with every default written out (what a run directory records)."""
    return yaml.safe_dump(preset.model_dump(mode="json"), sort_keys=False)
