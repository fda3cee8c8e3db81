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
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envengineer.errors import ConfigError
from envengineer.mapf.config import format_validation_error, read_yaml
from envengineer.yamlio import YAMLDataError, brief, load_yaml

log = logging.getLogger(__name__)

EngineerKind = Literal["self", "base", "openai", "fixed", "random", "threshold"]
TrainingDetails = Literal["none", "bookkeeping", "full"]
ScriptedPolicy = Literal["scripted:optimal", "scripted:greedy", "scripted:random"]

#: The paper's context ablation (SPEC §5), each variant adding one module to the previous one.
#: Keys: F failure breakdown, G guidelines, H history, H_default (history includes the round-0 default),
#: S previous self-summary, T training details.
CONTEXT_VARIANTS: dict[str, dict[str, Any]] = {
    "V1": {"F": True, "G": False, "H": False, "H_default": False, "S": False, "T": "none"},
    "V2": {"F": True, "G": True, "H": False, "H_default": False, "S": False, "T": "none"},
    "V3": {"F": True, "G": True, "H": True, "H_default": True, "S": False, "T": "none"},
    "V4": {"F": True, "G": True, "H": True, "H_default": False, "S": False, "T": "none"},
    "V5": {"F": True, "G": True, "H": True, "H_default": False, "S": True, "T": "none"},
    "V6": {"F": True, "G": True, "H": True, "H_default": False, "S": True, "T": "bookkeeping"},
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ContextSettings(_Model):
    """Which context modules the engineer reads (SPEC §5); a variant, optionally refined switch by switch."""

    variant: Literal["V1", "V2", "V3", "V4", "V5", "V6"] = Field(
        default="V6",
        description="Starting point: the paper's cumulative ablation V1 (F) ... V6 (the method).",
    )
    F: bool | None = Field(default=None, description="Failure breakdown per map size (None: the variant's).")
    G: bool | None = Field(default=None, description="Curriculum-design guidelines (None: the variant's).")
    H: bool | None = Field(
        default=None, description="History of earlier configurations (None: the variant's)."
    )
    H_default: bool | None = Field(
        default=None, description="Whether the history includes the round-0 default (None: the variant's)."
    )
    S: bool | None = Field(
        default=None, description="The engineer's previous rationale (None: the variant's)."
    )
    T: TrainingDetails | None = Field(
        default=None, description="Training details: none, bookkeeping or full (None: the variant's)."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v: Any) -> Any:
        return {"variant": v} if isinstance(v, str) else v

    def switches(self) -> dict[str, Any]:
        """The resolved switches: the variant's, overridden by every switch given explicitly.

        >>> ContextSettings.model_validate({"variant": "V6", "T": "full"}).switches()["T"]
        'full'
        """
        out = dict(CONTEXT_VARIANTS[self.variant])
        for key in out:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


class EngineerSettings(_Model):
    """Who writes the next round's configuration, what it reads and how it is asked."""

    kind: EngineerKind = Field(
        default="self",
        description="self: the current checkpoint; base: the untrained starting model; openai: an "
        "OpenAI-compatible endpoint; fixed: the round-0 configuration every round; random: a fresh random "
        "configuration each round; threshold: a per-size difficulty ladder moved by validation success.",
    )
    context: ContextSettings = Field(
        default_factory=ContextSettings, description="Context modules: a variant name or explicit switches."
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Extra attempts after a proposal fails validation (errors are sent back).",
    )
    temperature: float = Field(
        default=0.7, ge=0.0, le=2.0, description="Sampling temperature of LLM engineers."
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling of LLM engineers.")
    max_new_tokens: int = Field(
        default=1024,
        ge=16,
        le=32768,
        description="Token budget of one engineer answer (rationale and configuration).",
    )
    constrained: bool | None = Field(
        default=None,
        description="Decode under the answer's JSON schema (None: on for self/base, off for openai).",
    )
    base_url: str | None = Field(
        default=None, description="openai only: the endpoint, e.g. http://localhost:8000/v1 or a hosted API."
    )
    model: str | None = Field(
        default=None,
        description="openai: the served model name. base: the starting model (None: the experiment's model).",
    )
    api_key_env: str | None = Field(
        default=None,
        description="openai only: name of the environment variable holding the API key (never logged).",
    )
    request_deadline: float = Field(
        default=600.0,
        gt=0.0,
        le=86400.0,
        description="openai only: seconds one request may take in all (connect, answer, retries and waits).",
    )
    max_response_bytes: int = Field(
        default=8 * 2**20,
        ge=1024,
        le=2**30,
        description="openai only: largest response body accepted, after decompression (larger: an error).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Kind-specific options (threshold only: upper, lower, step, levels, floor, momentum).",
    )

    @model_validator(mode="after")
    def _check(self) -> EngineerSettings:
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError(
                "engineer kind 'openai' needs base_url and model (and api_key_env for hosted APIs)"
            )
        if self.kind != "openai" and (self.base_url or self.api_key_env):
            raise ValueError(
                f"base_url and api_key_env apply to engineer kind 'openai' only, not {self.kind!r}"
            )
        return self

    @property
    def is_llm(self) -> bool:
        return self.kind in ("self", "base", "openai")


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
    agents: tuple[int, ...] = Field(
        default=(3, 4, 5),
        min_length=1,
        description="Agent counts of the validation set (the benchmark's: 3, 4, 5).",
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
        default=None,
        ge=1,
        le=50,
        description="Benchmark instances kept per (agents, size, subset) cell; None: all 50 (3,150 in all).",
    )
    benchmark_limit: int | None = Field(
        default=None,
        ge=1,
        description="Keep this many benchmark instances, spread over (agents, size) cells (CPU scale).",
    )
    benchmark_path: str | None = Field(
        default=None, description="An instance file to use as the benchmark instead of the packaged one."
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


class Seeds(_Model):
    """Every seed of the run; per-round seeds derive from these through SeedSequence tuples."""

    config: int = Field(default=0, ge=0, description="Seed of the round-0 random default configuration.")
    data: int = Field(default=0, ge=0, description="Base seed of each round's training data.")
    training: int = Field(default=0, ge=0, description="Base seed of each round's GRPO training.")
    evaluation: int = Field(default=0, ge=0, description="Sampling seed of evaluation and LLM engineers.")


class TrainingSettings(_Model):
    """One GRPO round per loop round."""

    preset: str = Field(
        default="cpu",
        description="Training preset: a shipped preset name (cpu, gpu, ...) or a YAML file path.",
    )
    enabled: bool = Field(
        default=True, description="False skips training (a recorded no-op); the model stays the starting one."
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="Cap on GRPO optimiser steps per round (None: the epochs decide)."
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
        description="Reuse a warm-start trained with identical model, settings, seeds and data (kept in the "
        "user cache, ~/.cache/envengineer/warm_start/), so experiments sharing it pay for it once.",
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
        default=2, gt=0, le=100, description="GRPO epochs over each round's data."
    )
    num_agents: int = Field(
        default=2, ge=1, le=16, description="Agents per training instance (2 in the paper)."
    )
    training: TrainingSettings = Field(default_factory=TrainingSettings, description="The GRPO round.")
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


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge key by key, other values replace.

    >>> deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}, "b": [2]})
    {'a': {'x': 1, 'y': 3}, 'b': [2]}
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``key="a.b"``, creating mappings on the way.

    >>> d = {"engineer": "x"}; set_dotted(d, "engineer.kind", "fixed"); d
    {'engineer': {'kind': 'fixed'}}
    """
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"rounds=2"`` -> ``("rounds", 2)``; the value is read as YAML (numbers, booleans, null, lists).

    >>> parse_override("engineer.context=V3")
    ('engineer.context', 'V3')
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like key=value, e.g. rounds=2 or engineer.kind=fixed")
    try:
        return key.strip(), load_yaml(value)
    except YAMLDataError as exc:
        raise ConfigError(f"override {brief(text)}: the value is not valid YAML ({exc})") from None


def demo_experiment(*, smollm2: bool = False) -> Experiment:
    """The CPU demo (``envengineer demo``), ending with the report.

    By default the small-policy loop (``experiments/cpu/demo.yaml``): a tiny policy warm-started from
    scratch, 3 GRPO rounds, the embedded SmolLM2-135M as the engineer; sized for 15 minutes on 2 CPU cores.
    With ``smollm2`` the SmolLM2 self-engineer loop (``experiments/cpu/demo-smollm2.yaml``, about 10
    minutes), which shows the paper's arrangement running but not learning at this scale.
    """
    return Experiment.model_validate(DEMO_SMOLLM2 if smollm2 else DEMO)


#: The demo's settings (kept equal to ``experiments/cpu/demo.yaml`` by a test).
DEMO: dict[str, Any] = {
    "name": "cpu-demo",
    "description": "The small-policy loop on a CPU: a 1M-parameter policy is warm-started from scratch on "
    "the solver's plans, trains for 3 GRPO rounds, and after rounds 0 and 1 the embedded SmolLM2-135M "
    "reads its validation failures and writes the next round's configuration (context V6).",
    "model": "policy:tiny",
    "rounds": 3,
    "samples_per_round": 400,
    "epochs_per_round": 1,
    "num_agents": 2,
    "training": {"preset": "grpo-small", "max_steps": 50},
    "warm_start": {
        "enabled": True,
        "preset": "sft-small",
        "samples": 48000,
        "max_steps": 1500,
        "sizes": [3, 4, 5, 6],
        "hole_ratio": 0.25,
        "wait_ratio": 0.5,
        "seed": 0,
        "cache": True,
    },
    "validation": {"per_cell": 4, "seed": 1, "agents": [2], "min_size": 3, "max_size": 8, "start": True},
    "evaluation": {"backend": "hf", "batch_size": 64, "max_new_tokens": 160, "temperature": 0.0},
    "engineer": {"kind": "base", "model": "embedded", "context": "V6", "retries": 2, "max_new_tokens": 512},
    "seeds": {"config": 0, "data": 0, "training": 0, "evaluation": 0},
}

#: The SmolLM2 self-engineer demo (kept equal to ``experiments/cpu/demo-smollm2.yaml`` by a test).
DEMO_SMOLLM2: dict[str, Any] = {
    "name": "cpu-demo-smollm2",
    "description": "The whole loop on a CPU: the embedded model trains for 3 short GRPO rounds and, after "
    "rounds 0 and 1, writes the next round's configuration itself (self-engineer, context V6).",
    "rounds": 3,
    "samples_per_round": 16,
    "epochs_per_round": 1,
    "num_agents": 2,
    "training": {"preset": "cpu", "max_steps": 2},
    "validation": {"per_cell": 1, "seed": 1, "agents": [3], "max_size": 10, "limit": 8},
    "evaluation": {"batch_size": 8, "max_new_tokens": 160, "temperature": 0.0, "benchmark_limit": 21},
    "engineer": {"kind": "self", "context": "V6", "retries": 1, "max_new_tokens": 512},
    "seeds": {"config": 0, "data": 0, "training": 0, "evaluation": 0},
}


# -- checks before a run ----------------------------------------------------------------------------------
def preflight(experiment: Experiment) -> None:
    """Check what the experiment names before anything runs: presets, context, engineer options, files,
    and that the validation and benchmark sets will not be empty. ``--dry-run`` runs it too.

    Raises:
        ConfigError: every problem found, one per line, each naming what to change.
    """
    exp = experiment
    problems: list[str] = []
    try:
        from envengineer.engineer.context import context_spec

        context_spec(exp.engineer.context.switches())
    except ConfigError as exc:
        problems.append(f"engineer.context: {exc}")
    if exp.engineer.options and exp.engineer.kind != "threshold":
        problems.append(
            f"engineer.options apply to kind 'threshold' only; remove them for {exp.engineer.kind!r}"
        )
    elif exp.engineer.kind == "threshold":
        try:
            from envengineer.engineer.curriculum import ThresholdCurriculum

            ThresholdCurriculum.from_options(exp.engineer.options)
        except (ConfigError, TypeError, ValueError) as exc:
            problems.append(f"engineer.options: {exc}")
    for needed, section, preset, kind in (
        (exp.trains and exp.rounds > 0, "training.preset", exp.training.preset, "grpo"),
        (exp.warm_start.enabled and not exp.scripted, "warm_start.preset", exp.warm_start.preset, "sft"),
    ):
        if not needed:
            continue
        try:
            from envengineer.training.presets import load_preset

            loaded = load_preset(preset, kind)
            if kind == "grpo":
                loaded.batch_shape(exp.launch.processes)  # the step must split over the processes
        except ImportError as exc:
            problems.append(
                f"{section}: the training extra is missing ({exc.name}); pip install 'envengineer[train]'"
            )
        except ConfigError as exc:
            problems.append(f"{section}: {exc}")
    problems.extend(_small_policy_problems(exp))
    if exp.evaluation.benchmark_path and not Path(exp.evaluation.benchmark_path).is_file():
        what = "is a directory" if Path(exp.evaluation.benchmark_path).is_dir() else "does not exist"
        problems.append(
            f"evaluation.benchmark_path: {exp.evaluation.benchmark_path} {what}; name an instance file"
        )
    elif exp.evaluation.benchmark_path and _is_empty(Path(exp.evaluation.benchmark_path)):
        problems.append(
            f"evaluation.benchmark_path: {exp.evaluation.benchmark_path} holds no instance; the benchmark "
            "would be empty"
        )
    if exp.rounds > 0:
        from envengineer.mapf.benchmark import cells

        v = exp.validation
        if not list(cells(v.agents, v.max_size, v.min_size)):
            problems.append(
                f"validation: the validation set would be empty: no map size from the agent count to "
                f"max_size {v.max_size} fits agents {list(v.agents)}; use agents <= max_size (e.g. [3, 4, 5])"
            )
    from envengineer.loop.stages import check_launch

    problems.extend(check_launch(exp))
    if len(problems) == 1:
        raise ConfigError(f"experiment {exp.name!r}: {problems[0]}")
    if problems:
        raise ConfigError(f"experiment {exp.name!r}:\n  " + "\n  ".join(problems))


def _small_policy_problems(exp: Experiment) -> list[str]:
    """A small from-scratch policy cannot write configurations: an LLM engineer must be another model."""
    from envengineer.models.small_policy import is_small_policy

    if exp.scripted or exp.engineer.kind not in ("self", "base"):
        return []
    engineer_model = exp.model if exp.engineer.kind == "self" else (exp.engineer.model or exp.model)
    if engineer_model is None or not is_small_policy(engineer_model):
        return []
    return [
        f"engineer: kind {exp.engineer.kind!r} would ask the small policy {engineer_model!r} for "
        "configurations, which it cannot write; use kind 'base' with model: embedded (or another "
        "language model), kind 'openai', or a non-LLM engineer"
    ]


# -- the plan (dry run) -----------------------------------------------------------------------------------
def plan(experiment: Experiment) -> dict[str, Any]:
    """What a run will do and cost, without doing it: instances, GRPO steps, evaluation responses."""
    from envengineer.mapf.benchmark import SUBSETS, cells

    exp = experiment
    v = exp.validation
    val_cells = cells(v.agents, v.max_size, v.min_size)
    validation_size = len(val_cells) * len(SUBSETS) * v.per_cell
    if v.limit is not None:
        validation_size = min(validation_size, v.limit)
    bench_cells = len(cells())
    per_cell = exp.evaluation.benchmark_per_cell or 50
    benchmark_size = bench_cells * len(SUBSETS) * per_cell
    if exp.evaluation.benchmark_limit is not None:
        benchmark_size = min(benchmark_size, exp.evaluation.benchmark_limit)
    steps_per_round, batch = grpo_steps(exp)
    p = {
        "name": exp.name,
        "model": exp.policy or exp.model or "embedded default (SmolLM2-135M-Instruct)",
        "rounds": exp.rounds,
        "engineer": exp.engineer.kind,
        "engineer_calls": len(exp.engineer_rounds),
        "context": _context_label(exp),
        "training_instances": exp.rounds * exp.samples_per_round,
        "training": "skipped (scripted policy)"
        if exp.scripted
        else ("disabled" if not exp.trains else "GRPO"),
        "grpo_steps_per_round": steps_per_round if exp.trains else 0,
        "grpo_steps": (steps_per_round or 0) * exp.rounds if exp.trains else 0,
        "grpo_batch": batch,
        "warm_start": _warm_start_plan(exp),
        "validation_instances": validation_size,
        "benchmark_instances": benchmark_size,
        "eval_responses": exp.rounds * validation_size + benchmark_size,
        "max_new_tokens": exp.evaluation.max_new_tokens,
        "eval_tokens_upper_bound": (exp.rounds * validation_size + benchmark_size)
        * exp.evaluation.max_new_tokens,
    }
    p["cpu_seconds"] = cpu_seconds_estimate(exp, p)
    return p


#: Seconds per unit of work for the embedded SmolLM2-135M with the shipped CPU presets, measured on an idle
#: 2-core machine with torch's default two threads (docs/benchmarks.md): a GRPO step of the `cpu` preset,
#: an SFT step of `sft-cpu` (batch 8), one evaluation answer (batch 8, <= 160 tokens), one engineer answer,
#: and the loading and saving of the model around each training round.
CPU_RATES: dict[str, float] = {
    "grpo_step": 57.0,
    "sft_step": 70.0,
    "eval_answer": 3.6,
    "engineer_answer": 30.0,
    "round_overhead": 20.0,
}

#: The same for the tiny small policy (``policy:tiny``) with ``grpo-small`` (8 x 8 completions per step) and
#: ``sft-small`` (batch 32), evaluation in batches of 64; the engineer is the embedded SmolLM2-135M.
SMALL_POLICY_CPU_RATES: dict[str, float] = {
    "grpo_step": 1.2,
    "sft_step": 0.25,
    "eval_answer": 0.02,
    "engineer_answer": 30.0,
    "round_overhead": 5.0,
}

#: (model, GRPO preset, SFT preset) -> the rates measured for them.
_MEASURED: dict[tuple[str | None, str, str], dict[str, float]] = {
    (None, "cpu", "sft-cpu"): CPU_RATES,
    ("policy:tiny", "grpo-small", "sft-small"): SMALL_POLICY_CPU_RATES,
}


def cpu_seconds_estimate(exp: Experiment, counts: dict[str, Any]) -> float | None:
    """Rough wall-clock seconds of a run on 2 idle CPU cores, from measured rates and the plan's counts.

    Only for what the rates were measured on (:data:`CPU_RATES`: the embedded model with the ``cpu`` and
    ``sft-cpu`` presets; :data:`SMALL_POLICY_CPU_RATES`: ``policy:tiny`` with ``grpo-small`` and
    ``sft-small``); a scripted policy costs seconds. ``None`` otherwise: other models, GPU presets, and an
    ``openai`` engineer's remote answers have no measured rate here.
    """
    if exp.scripted:
        return 0.0
    if exp.engineer.kind == "openai":
        return None
    rates = [
        r
        for (model, grpo, sft), r in _MEASURED.items()
        if exp.model == model
        and (not exp.trains or exp.training.preset == grpo)
        and (not counts["warm_start"] or exp.warm_start.preset == sft)
    ]
    if not rates:
        return None
    r = rates[0]
    seconds = counts["grpo_steps"] * r["grpo_step"] + counts["eval_responses"] * r["eval_answer"]
    if exp.trains:
        seconds += exp.rounds * r["round_overhead"]
    if counts["warm_start"]:
        seconds += (counts["warm_start"]["steps"] or 0) * r["sft_step"]
    if exp.engineer.is_llm:
        seconds += counts["engineer_calls"] * r["engineer_answer"]
    return seconds


def _context_label(exp: Experiment) -> str:
    if not exp.engineer_rounds:
        return "none (no engineer call)"
    if not exp.engineer.is_llm:
        return "none (not a language model)"
    try:
        from envengineer.engineer.context import context_spec

        return f"{exp.engineer.context.variant}: {context_spec(exp.engineer.context.switches()).label}"
    except Exception:  # the plan must print; preflight reports the problem
        return str(exp.engineer.context.switches())


def _warm_start_plan(exp: Experiment) -> dict[str, Any] | None:
    ws = exp.warm_start
    if not ws.enabled or exp.scripted:
        return None
    steps = ws.max_steps
    try:
        from envengineer.training.presets import load_preset

        sft = dict(load_preset(ws.preset, "sft").sft)
        batch = int(sft.get("per_device_train_batch_size", 8)) * int(
            sft.get("gradient_accumulation_steps", 1)
        )
        natural = math.ceil(ws.samples / max(batch, 1))
        if sft.get("max_steps"):
            natural = min(natural, int(sft["max_steps"])) if int(sft["max_steps"]) > 0 else natural
        steps = min(steps, natural) if steps else natural
    except Exception as exc:  # the plan must print even without the training extra
        log.debug("cannot read the SFT preset %r: %s", ws.preset, exc)
    return {"instances": ws.samples, "steps": steps, "preset": ws.preset}


def grpo_steps(exp: Experiment) -> tuple[int | None, dict[str, Any]]:
    """GRPO optimiser steps per round from the preset's batch shape (``None`` when the preset is unknown).

    TRL counts completions: each step consumes ``per_device_train_batch_size * gradient_accumulation_steps
    * world_size`` completions, ``num_generations`` per prompt; the world size is ``launch.processes``.
    TRL's sampler drops an epoch's last partial batch of prompts, so an epoch is
    ``samples // prompts_per_step`` steps (4,000 prompts at 64 per step: 62 steps, 3,968 prompts).
    """
    try:
        from envengineer.training.presets import load_preset

        preset = load_preset(exp.training.preset, "grpo")
        world = exp.launch.processes if exp.launch.stages != "inprocess" else 1
        per_device, accum = preset.batch_shape(world)
    except Exception as exc:  # the plan must print even without the training extra
        log.debug("cannot read the training preset %r: %s", exp.training.preset, exc)
        return None, {}
    gens = int(dict(preset.grpo).get("num_generations", 8))
    completions = per_device * accum * world
    prompts_per_step = max(completions // max(gens, 1), 1)
    per_epoch = max(exp.samples_per_round // prompts_per_step, 1)
    steps = math.ceil(per_epoch * exp.epochs_per_round)
    for cap in (dict(preset.grpo).get("max_steps"), exp.training.max_steps):
        if cap is not None and int(cap) > 0:
            steps = min(steps, int(cap))
    return steps, {
        "completions_per_step": completions,
        "num_generations": gens,
        "prompts_per_step": prompts_per_step,
        "per_device": per_device,
        "accumulation": accum,
        "processes": world,
        "prompts_used_per_epoch": per_epoch * prompts_per_step,
    }


def _is_empty(path: Path) -> bool:
    """Whether an instance file holds no line at all (its format is checked when it is loaded)."""
    import gzip

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            return not any(line.strip() for line in fh)
    except (OSError, UnicodeDecodeError, EOFError):
        return False  # unreadable: loading it will say so
