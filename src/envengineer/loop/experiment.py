"""The experiment file: one YAML document that fixes everything a run of the round loop does.

One pydantic model (``extra="forbid"``, a description on every field) is the single source of truth: it
validates files with messages that name the bad field, documents the schema (``envengineer run --schema``)
and resolves defaults, so the run directory's ``experiment.yaml`` is the complete, replayable record.

A minimal file::

    name: cpu-self
    rounds: 3
    samples_per_round: 64
    engineer: {kind: self, context: V6}

Decisions the spec leaves open (also in ``docs/loop.md``):

* ``rounds: 0`` is the "base model, no training" row: no round runs, only the final benchmark.
* ``policy: scripted:optimal|greedy|random`` replaces the model by a scripted reference policy; training is
  then a recorded no-op, so the whole loop runs on a CPU in seconds (tests, demos of the plumbing).
* The context is a variant name (``V1`` … ``V6``, the paper's cumulative ablation) optionally refined by
  explicit switches; ``T`` is ``none``, ``bookkeeping`` or ``full``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envengineer.errors import ConfigError
from envengineer.loop.engineer_settings import EngineerKind as EngineerKind  # re-exported: defined there
from envengineer.loop.engineer_settings import EngineerSettings as EngineerSettings
from envengineer.loop.overrides import deep_merge
from envengineer.loop.overrides import parse_override as parse_override  # re-exported: read with the files
from envengineer.loop.overrides import set_dotted as set_dotted
from envengineer.mapf.config import format_validation_error, read_yaml
from envengineer.training.teach import TeachSettings
from envengineer.yamlio import brief

log = logging.getLogger(__name__)

ScriptedPolicy = Literal["scripted:optimal", "scripted:greedy", "scripted:random"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: An agent count: an integer 1..16 (``true`` is not 1).
AgentCount = Annotated[int, Field(strict=True, ge=1, le=16)]


class ValidationSettings(_Model):
    """The validation set: the benchmark's shape with disjoint seeds, smaller (SPEC §4)."""

    per_cell: int = Field(
        default=4,
        ge=1,
        le=1000,
        description="Instances per (agents, size, wait subset) cell (the benchmark has 50).",
    )
    seed: int = Field(
        default=1, ge=0, description="Seed of the validation set (disjoint from the benchmark's)."
    )
    agents: tuple[AgentCount, ...] = Field(
        default=(3, 4, 5),
        min_length=1,
        description="Agent counts of the validation set (the benchmark's: 3, 4, 5), integers 1..16.",
    )
    max_size: int = Field(
        default=10, ge=3, le=32, description="Largest map size of the validation set (the benchmark's: 10)."
    )
    start: bool = Field(
        default=False,
        description="Also validate the starting model (after the warm-start) before round 0: the "
        "learning curve's first point, against which the rounds' gains are read.",
    )
    min_size: int | None = Field(
        default=None,
        ge=2,
        le=32,
        description="Smallest map size (None: the benchmark's k x k for k agents; e.g. 3 drops 2x2 boards "
        "of a two-agent validation set).",
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description="Keep this many instances, spread over (agents, size) cells, wait subsets rotating.",
    )


class EvaluationSettings(_Model):
    """How validation and benchmark responses are generated."""

    batch_size: int = Field(default=8, ge=1, le=4096, description="Prompts per generation batch.")
    max_new_tokens: int = Field(default=512, ge=8, le=65536, description="Token budget of one plan response.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature (0: greedy).")
    backend: Literal["hf", "vllm"] = Field(
        default="hf", description="Backend for the trained model (vllm needs a GPU and the gpu extra)."
    )
    enable_thinking: bool | None = Field(
        default=None,
        description="Qwen3's thinking switch for plan answers and LLM engineers (None: the model's).",
    )
    benchmark_per_cell: int | None = Field(
        None, ge=1, le=50, description="Benchmark instances per (agents, size, subset) cell; None: all 50."
    )
    benchmark_limit: int | None = Field(
        None, ge=1, description="Keep this many benchmark instances, spread over (agents, size) cells."
    )
    benchmark_path: str | None = Field(
        None, description="An instance file to use as the benchmark instead of the packaged one."
    )
    benchmark_version: Literal["v1", "v2"] = Field(  # default: mapf.benchmark.DEFAULT_VERSION
        "v2", description="Packaged benchmark v1 or v2; its keep rule also draws the validation set."
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="vllm only: share of each GPU's memory the evaluation engine may take (None: 0.85).",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=256,
        le=1_048_576,
        description="vllm only: context length of the evaluation engine, prompt + answer (None: model's).",
    )


#: Seeds lie in ``[0, 2**32)``, the range every seeded library takes (numpy, torch, vLLM).
SEED_LIMIT = 2**32


class Seeds(_Model):
    """Every seed of the run, each in ``[0, 2**32)``; per-round seeds derive from these through
    SeedSequence tuples."""

    config: int | None = Field(
        default=0,
        ge=0,
        lt=SEED_LIMIT,
        description="Seed of the round-0 random default configuration; null: the data seed, so that "
        "`--seed N` also draws each seed's own starting configuration.",
    )
    data: int = Field(default=0, ge=0, lt=SEED_LIMIT, description="Base seed of each round's training data.")
    training: int = Field(default=0, ge=0, lt=SEED_LIMIT, description="Base seed of each round's training.")
    evaluation: int = Field(
        default=0, ge=0, lt=SEED_LIMIT, description="Sampling seed of evaluation and LLM engineers."
    )

    @property
    def round0(self) -> int:
        """The seed round 0's random configuration is drawn with: ``config``, else the data seed.

        >>> Seeds(config=None, data=3).round0, Seeds(data=3).round0
        (3, 0)
        """
        return self.data if self.config is None else self.config


class TrainingSettings(_Model):
    """One training round per loop round: GRPO (the default), supervised fine-tuning on the solver's plans,
    or the solver teaching the policy on its own answers."""

    learner: Literal["grpo", "sft", "teach"] = Field(
        default="grpo",
        description="grpo: one GRPO round through TRL with `preset`; sft: supervised fine-tuning on the "
        "exact solver's optimal plans of the round's boards (TRL SFTTrainer, the warm-start's learner) with "
        "`preset`; teach: the exact solver labels the policy's own answers to the round's boards and the "
        "policy learns them (DAgger, `teach`, in the loop's process; docs/training.md).",
    )
    teach: TeachSettings = Field(
        default_factory=TeachSettings,
        description="The teach learner's settings (learner: teach); `max_steps` below overrides theirs. A "
        "round stops on steps, never on the clock: min(max_steps, 30 x minutes), recorded as planned_steps.",
    )
    preset: str = Field(
        default="cpu",
        description="Training preset: a shipped preset name (cpu, gpu, small, ...) or a YAML file path, read "
        "as a GRPO preset for learner grpo and as an SFT preset for learner sft (cpu: sft-cpu, small: "
        "sft-small); learner teach ignores it.",
    )
    enabled: bool = Field(
        default=True, description="False skips training (a recorded no-op); the model stays the starting one."
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        description="Cap on optimiser steps per round (GRPO or SFT; teach: replaces its settings' max_steps; "
        "None: the epochs decide).",
    )
    probe: int = Field(
        default=128,
        ge=0,
        description="Learner sft only: before each round trains, the checkpoint it starts from answers this "
        "many of the round's boards (taken round-robin over its map sizes, the first of each size in the "
        "data's order) with the evaluation settings (backend, temperature, max_new_tokens; files in "
        "round_NN/train/probe/), and the round records per size what it got right as metrics.json "
        "['metrics']['sampled'] (completions, valid and optimal rates, the graded reward; no zero_std), the "
        "signal GRPO's own samples give the learnability curriculum, the engineer's L module and the "
        "report's diagnostics. About 0.07 s a board for the tiny small policy on 2 cores: 128 is about 9 s a "
        "round. 0: no probe, nothing sampled is recorded (learnability falls back to validation rates).",
    )
    agents: tuple[AgentCount, ...] | None = Field(
        default=None,
        min_length=1,
        description="Agent counts of each round's boards, equal shares of `samples_per_round`, every count "
        "on the round's configuration (its sizes that fit the count, their holes and waits; shuffled "
        "together). None: the experiment's num_agents alone, the paper's training. A policy that trained on "
        "two and three agents forgets the third when its rounds hold two only, so the small-policy "
        "experiments use [2, 3] (docs/loop.md). The engineer's configuration and its num_agents are "
        "unchanged by it.",
    )
    report_to: list[str] | None = Field(
        default=None,
        description="Trackers for TRL's training logs and the loop's per-round metrics: tensorboard, wandb, "
        "trackio, mlflow, all or none (offline by default; docs/integrations.md). None: the preset's.",
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _trackers(cls, v: Any) -> list[str] | None:
        from envengineer.integrations.trackers import normalize_report_to

        return normalize_report_to(v)

    @property
    def preset_kind(self) -> Literal["grpo", "sft"]:
        """The kind ``preset`` is read as: ``sft`` for learner sft, else ``grpo`` (teach does not read it).

        >>> TrainingSettings(learner="sft").preset_kind, TrainingSettings().preset_kind
        ('sft', 'grpo')
        """
        return "sft" if self.learner == "sft" else "grpo"


class LaunchSettings(_Model):
    """How the heavy stages (training, GPU evaluation) run: in the loop's process or as their own processes.

    As subprocesses, each training round is ``accelerate launch ... -m envengineer.cli train ...`` (or
    ``torchrun``, or plain ``python -m envengineer.cli train``), so the loop stays one process, every stage
    returns its GPU memory when it exits, and a crashed stage is retried (then resumed from the ledger).
    ``envengineer run --dry-run`` prints the exact commands (``envengineer.loop.stages``, docs/loop.md).
    """

    stages: Literal["auto", "subprocess", "inprocess"] = Field(
        default="auto",
        description="auto: subprocesses when processes > 1, an accelerate or DeepSpeed config is named, or "
        "the evaluation backend is vllm; in the loop's process otherwise (CPU runs: no start-up per stage).",
    )
    processes: int = Field(
        default=1, ge=1, le=4096, description="Training processes (one per GPU), passed to the launcher."
    )
    launcher: Literal["auto", "accelerate", "torchrun", "python"] = Field(
        default="auto",
        description="auto: accelerate when a config is named, torchrun for several processes, else python.",
    )
    accelerate_config: str | None = Field(
        default=None,
        description="accelerate config file (e.g. configs/accelerate/zero3.yaml), relative to the working "
        "directory; passed as --config_file.",
    )
    deepspeed_config: str | None = Field(
        default=None,
        description="DeepSpeed JSON (e.g. configs/deepspeed/zero3.json) passed to accelerate launch as "
        "--use_deepspeed --deepspeed_config_file (accelerate only).",
    )
    evaluation: Literal["auto", "subprocess", "inprocess"] = Field(
        default="auto",
        description="Validation and benchmark answers: auto runs them as a subprocess when the stages do and "
        "the backend is vllm (whose engine does not return GPU memory in-process).",
    )
    retries: int = Field(
        default=1, ge=0, le=10, description="Extra attempts of a stage whose process fails (then: resume)."
    )


class WarmStartSettings(_Model):
    """An optional supervised warm-start on the solver's plans before round 0 (teaches the answer format).

    A small model that never writes a parseable plan gets no signal from GRPO; a short SFT on a uniform
    configuration fixes the format without steering the curriculum. Its checkpoint is the starting model
    of round 0 (the ``base`` engineer still uses the experiment's ``model``, untrained).
    """

    enabled: bool = Field(default=False, description="Run the warm-start before round 0.")
    preset: str = Field(
        default="sft-cpu", description="SFT preset: a shipped name (sft-cpu, sft-gpu) or a path."
    )
    samples: int = Field(
        default=1200, ge=1, le=1_000_000, description="Instances generated for the warm-start."
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="Cap on SFT steps (None: the preset's max_steps or epochs)."
    )
    cache: bool = Field(
        default=False,
        description="Reuse a warm-start trained with identical model (a local folder: the same files), "
        "settings, seeds and data (kept in the user cache, ~/.cache/envengineer/warm_start/), so experiments "
        "sharing it pay for it once; runs that start together train it once under a lock.",
    )
    hole_ratio: float = Field(
        default=0.2, ge=0.0, le=0.5, description="Hole ratio of every size (uniform config)."
    )
    wait_ratio: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Wait ratio of every size (uniform config)."
    )
    sizes: tuple[int, ...] | None = Field(
        default=None,
        min_length=1,
        description="Map sizes of the warm-start data, equally weighted (None: every size of the space).",
    )
    agents: tuple[int, ...] | None = Field(
        default=None,
        min_length=1,
        description="Agent counts of the warm-start data, equal shares (None: the experiment's num_agents). "
        "A policy that never saw a third agent cannot plan for one, so the small-policy experiments use "
        "[2, 3] while the paper's training stays on two agents.",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        description="Seed of the warm-start's data and training (None: the experiment's seeds). Runs that "
        "differ only in their seeds share one warm-start when this is set (with cache: true).",
    )


class Experiment(_Model):
    """One run of the environment-engineer loop (SPEC §5): model, schedule, validation, engineer, seeds.

    >>> exp = Experiment.model_validate({"name": "t", "policy": "scripted:optimal", "samples_per_round": 8})
    >>> exp.rounds, exp.engineer.kind, exp.engineer.context.switches()["T"]
    (3, 'self', 'bookkeeping')
    """

    name: str = Field(
        min_length=1,
        max_length=120,
        pattern=r"^[A-Za-z0-9_.\-]+$",
        description="Run name (letters, digits, _.-).",
    )
    description: str = Field(default="", description="What the experiment tests, in a sentence or two.")
    model: str | None = Field(
        default=None,
        description="Starting model: hub id or local path; None: the embedded default (SmolLM2-135M).",
    )
    policy: ScriptedPolicy | None = Field(
        default=None,
        description="Replace the model by a scripted policy (no training): scripted:optimal|greedy|random.",
    )
    rounds: int = Field(
        default=3, ge=0, le=100, description="Training rounds; 0 evaluates the starting model only."
    )
    samples_per_round: int = Field(
        default=4000,
        ge=1,
        le=1_000_000,
        description="Training instances generated per round (4,000 in the paper).",
    )
    epochs_per_round: float = Field(
        default=2, gt=0, le=100, description="Epochs over each round's data (learners grpo and sft)."
    )
    num_agents: int = Field(
        default=2, ge=1, le=16, description="Agents per training instance (2 in the paper)."
    )
    training: TrainingSettings = Field(
        default_factory=TrainingSettings, description="The training round (GRPO, SFT or teach)."
    )
    warm_start: WarmStartSettings = Field(
        default_factory=WarmStartSettings, description="Optional supervised warm-start before round 0."
    )
    validation: ValidationSettings = Field(
        default_factory=ValidationSettings, description="The validation set."
    )
    evaluation: EvaluationSettings = Field(
        default_factory=EvaluationSettings, description="Evaluation settings."
    )
    engineer: EngineerSettings = Field(
        default_factory=EngineerSettings, description="The environment engineer."
    )
    seeds: Seeds = Field(
        default_factory=Seeds, description="Seeds of configuration, data, training, evaluation."
    )
    launch: LaunchSettings = Field(
        default_factory=LaunchSettings,
        description="How training and GPU evaluation run: in-process or as launched subprocesses.",
    )

    @field_validator("epochs_per_round")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("epochs_per_round must be a finite number")
        return int(v) if float(v).is_integer() else v

    @property
    def scripted(self) -> bool:
        """True when a scripted policy stands in for the model (no training)."""
        return self.policy is not None

    @property
    def trains(self) -> bool:
        return self.training.enabled and not self.scripted

    @property
    def engineer_rounds(self) -> list[int]:
        """Rounds after which the engineer proposes (every round but the last)."""
        return list(range(max(self.rounds - 1, 0)))

    def engineer_model(self, checkpoint: str | None) -> str | None:
        """The model the ``self`` or ``base`` engineer asks: the one place that decides.

        ``self`` asks ``checkpoint`` (the current checkpoint; the starting model before any round), ``base``
        asks ``engineer.model``, else the experiment's model.

        >>> Experiment.from_dict({"name": "x", "engineer": {"kind": "base"}}).engineer_model("ckpt") is None
        True
        """
        if self.engineer.kind == "self":
            return checkpoint
        return self.engineer.model or self.model

    def scripted_engineer_problem(self) -> str | None:
        """Why the ``self`` / ``base`` engineer cannot run here (it would ask a scripted policy), or None."""
        if self.engineer.kind not in ("self", "base") or not self.engineer_rounds:
            return None
        model = self.engineer_model(self.policy or self.model)
        if model is None or not model.startswith("scripted:"):
            return None
        return (
            f"engineer kind {self.engineer.kind!r} needs a language model, but the experiment uses the "
            f"scripted policy {model!r}; use a non-LLM engineer (fixed, random, threshold) with a scripted "
            "policy, or drop 'policy'"
        )

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "experiment") -> Experiment:
        """Validate a parsed document, raising a ConfigError that names the bad field and its value."""
        if not isinstance(data, dict):
            raise ConfigError(
                f"{where}: an experiment is a YAML mapping with at least 'name', got {brief(data)}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {format_validation_error(exc, max_errors=5)}") from None


def load_experiment(path: str | Path, overrides: dict[str, Any] | None = None) -> Experiment:
    """Read and validate an experiment file, with optional dotted-key overrides.

    A file may start from another one with ``base: OTHER.yaml`` (a path relative to the file): mappings
    are merged key by key, any other value replaces the base's. The run directory stores the resolved
    experiment, without ``base``.

    Args:
        path: A YAML file.
        overrides: e.g. ``{"rounds": 1, "engineer.kind": "fixed"}``, applied before validation.

    Raises:
        ConfigError: the file cannot be read or a field is out of its legal space.
    """
    path = Path(path)
    data = read_experiment_data(path)
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return Experiment.from_dict(data, where=str(path))


def read_experiment_data(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The experiment file as a mapping, with its ``base:`` chain merged in (not validated yet)."""
    resolved = path.resolve()
    if resolved in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, resolved))
        raise ConfigError(f"{path}: 'base' files form a cycle ({chain}); remove one 'base' key")
    data = read_yaml(path, "experiment file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an experiment is a YAML mapping with at least 'name', got {brief(data)}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: 'base' must be a file path relative to {path.parent}, got {brief(base)}")
    return deep_merge(read_experiment_data(path.parent / base, (*_seen, resolved)), data)
