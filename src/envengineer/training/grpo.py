"""One GRPO training round through TRL's ``GRPOTrainer`` with the testbed's reward functions.

Read top to bottom: :func:`train_round_from_config` generates the round's instances and writes the dataset
manifest, :func:`train_round` builds the prompt dataset, checks prompt lengths, runs the trainer (full
fine-tuning or LoRA through PEFT) and saves a checkpoint that ``AutoModelForCausalLM.from_pretrained``, the
evaluation and the next round load directly (LoRA adapters are merged into the weights).

Output folder::

    OUT/
      checkpoint/        model weights + tokenizer (+ chat template), the round's result
      adapter/           the LoRA adapter before merging (LoRA only)
      trainer/           TRL's output_dir (intermediate checkpoints when the preset asks for them)
      metrics.json       log history, final train metrics, timing, the preset and the checkpoint path
      preset.yaml        the resolved preset (every default written out)
      manifest.jsonl     id, seed, board hash of every instance (train_round_from_config)
      round.yaml         the round configuration (train_round_from_config)

Under ``accelerate launch`` every process runs the same code; instances are generated deterministically in
each process and only the main process writes files.

The helpers at the bottom (dependency check, model resolution, checkpoint saving, timing) are shared with
:mod:`envengineer.training.sft`.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import Instance
from envengineer.mapf.rewards import make_reward
from envengineer.training.dataset import check_prompt_lengths, prompt_rows, write_manifest
from envengineer.training.diagnostics import SampledStats, probe_callback
from envengineer.training.guidance import SolverGuide
from envengineer.training.presets import (
    GRPOPreset,
    default_preset_name,
    load_preset,
    preset_to_yaml,
    world_size,
)
from envengineer.training.trainer import make_trainer_class

log = logging.getLogger(__name__)

# TRL reads transformers' deprecated `is_gradient_checkpointing` property at every GRPO generation (and PEFT
# when it wraps a LoRA model), and transformers warns each time: the call is theirs, not ours, and the
# warning filled every training stage's output. Only that one warning is silenced (SFT imports this module).
warnings.filterwarnings(
    "ignore",
    message="`is_gradient_checkpointing` is deprecated",
    category=FutureWarning,
    module=r"transformers\.modeling_utils",
)

TRAIN_EXTRA_HINT = "pip install 'envengineer[train]'"
_TRAIN_MODULES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
PROBE_SEED = 4242  # the in-round probe's boards: their own seeds, disjoint from the benchmark


@dataclass(frozen=True)
class TrainResult:
    """What a training round produced.

    Attributes:
        checkpoint: Folder with the trained weights and tokenizer (loadable by ``from_pretrained``).
        metrics: ``log_history``, ``train`` (final trainer metrics), ``timing``, ``preset``, ...
        steps: Optimizer steps taken.
        seconds: Wall time of the whole call.
    """

    checkpoint: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0


def train_round_from_config(
    model: str | None,
    round_config: Any,
    *,
    out_dir: str | Path,
    seed: int = 0,
    data_seed: int | None = None,
    preset: Any = None,
    epochs: float | None = None,
    reward_shape: str | None = None,
    exclude: frozenset[str] = frozenset(),
    max_steps: int | None = None,
) -> TrainResult:
    """Generate a round's training instances from its configuration and train one GRPO round on them.

    Args:
        model: Hub id or local path; ``None`` or ``"embedded"``: the embedded SmolLM2-135M.
        round_config: A :class:`envengineer.mapf.config.RoundConfig`.
        out_dir: Output folder (see the module docstring for its layout).
        seed: Training seed (sampling, data order, LoRA init).
        data_seed: Seed of the instance generator (defaults to ``seed``).
        preset: A GRPO preset (name, path, mapping or object); ``None``: the CPU or GPU preset by hardware.
        epochs: Overrides the preset's ``epochs``.
        reward_shape: Overrides the preset's ``reward_shape``.
        exclude: Board hashes that must not appear (the validation and benchmark sets).
        max_steps: Stop after this many optimizer steps (smoke runs and benchmarks).

    Returns:
        The :class:`TrainResult`; ``metrics["timing"]["generate_s"]`` holds the generation time.
    """
    require_train_deps()
    resolved = _resolve_preset(preset)
    resolved.trl_options()  # fail on a bad preset before spending time on generation
    out = Path(out_dir)
    instances, generate_s = generate_round_data(
        round_config, out, seed=seed if data_seed is None else data_seed, exclude=exclude
    )
    return train_round(
        model,
        instances,
        out_dir=out,
        preset=resolved,
        epochs=epochs,
        seed=seed,
        reward_shape=reward_shape,
        max_steps=max_steps,
        _generate_seconds=generate_s,
    )


def train_round(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: str | Path,
    preset: Any = None,
    epochs: float | None = None,
    seed: int = 0,
    reward_shape: str | None = None,
    reward_funcs: Sequence[Callable[..., list[float]]] = (),
    max_steps: int | None = None,
    probe_instances: Sequence[Instance] | None = None,
    _generate_seconds: float = 0.0,
) -> TrainResult:
    """Train one GRPO round on ``instances`` with the testbed's reward and save a loadable checkpoint.

    Args:
        model: Hub id or local path; ``None`` or ``"embedded"``: the embedded SmolLM2-135M.
        instances: Solved training instances.
        out_dir: Output folder (see the module docstring for its layout).
        preset: A GRPO preset (name, path, mapping or object); ``None``: the CPU or GPU preset by hardware.
        epochs: Overrides the preset's ``epochs``.
        seed: Training seed (sampling, data order, LoRA init).
        reward_shape: ``"graded"``, ``"sparse"`` or ``"dense"``; overrides the preset's ``reward_shape``.
        reward_funcs: Extra TRL reward functions summed with the testbed's reward (experiments, tests).
        max_steps: Stop after this many optimizer steps (smoke runs and benchmarks).
        probe_instances: Boards of the in-round probe (default: a small held-out set shaped like the
            round; see :mod:`envengineer.training.diagnostics`). Training boards equal to one are dropped.

    Returns:
        The :class:`TrainResult`.

    Raises:
        ConfigError: bad preset, unknown model, prompts longer than ``max_prompt_length``.
        EnvEngineerError: the training extra is not installed.
    """
    require_train_deps()
    t_start = time.perf_counter()
    resolved = _resolve_preset(preset)
    shape = reward_shape or resolved.reward_shape
    out = Path(out_dir)
    model_path = resolve_model_path(model)
    note_preset_model(resolved, model)
    log.info("GRPO round: model %s, %d instances, reward %s, out %s", model_path, len(instances), shape, out)

    timing = Timing(generate_s=_generate_seconds)
    style = resolved.resolve_prompt_style(model_path)
    probe_set = _probe_set(resolved, instances, probe_instances)
    instances = _without_probe_boards(instances, probe_set)
    t0 = time.perf_counter()
    dataset, longest = _prompt_dataset(model_path, instances, resolved, style)
    timing.dataset_s = time.perf_counter() - t0

    overrides = {} if max_steps is None else {"max_steps": int(max_steps)}
    args = resolved.build_config(output_dir=out / "trainer", seed=seed, epochs=epochs, **overrides)
    guide = solver_guide(resolved, model_path) if resolved.guidance.enabled else None
    skip = (lambda: guide.last_replaced) if guide is not None else None  # the plans were not sampled
    stats = SampledStats(make_reward(shape), args.num_generations, skip=skip)
    probe = _probe_callback(resolved, probe_set, style=style, seed=seed, temperature=args.temperature)
    rewards, callbacks = [timing.wrap(stats), *reward_funcs], [step_timer(timing), probe]
    trainer = _build_trainer(resolved, model_path, args, dataset, rewards, callbacks, seed, guide)
    output = _run(trainer, timing)
    checkpoint = save_checkpoint(trainer, out, base_model=model_path, lora=resolved.lora.enabled)
    metrics = {
        "kind": "grpo", "model": model_path, "checkpoint": str(checkpoint), "reward_shape": shape,
        "prompt_style": style, "instances": len(instances), "longest_prompt_tokens": longest,
        "steps": trainer.state.global_step, "train": dict(output.metrics), "sampled": stats.summary(),
        "probe": {"boards": len(probe_set), "rows": probe.rows if probe is not None else []},
        "timing": timing.summary(), "memory": peak_memory(), "log_history": list(trainer.state.log_history),
        "preset": resolved.model_dump(mode="json"),
    }  # fmt: skip
    steps = trainer.state.global_step
    release(trainer)
    del trainer, probe
    collect_garbage()
    seconds = time.perf_counter() - t_start
    metrics["seconds"] = seconds
    write_run_files(out, metrics, preset_to_yaml(resolved))
    log.info("GRPO round done: %d steps in %.1f s; checkpoint %s", steps, seconds, checkpoint)
    return TrainResult(checkpoint=checkpoint, metrics=metrics, steps=steps, seconds=seconds)


def _build_trainer(
    preset: GRPOPreset,
    model_path: str,
    args: Any,
    dataset: Any,
    rewards: list[Any],
    callbacks: list[Any],
    seed: int,
    guide: SolverGuide | None = None,
) -> Any:
    """TRL's ``GRPOTrainer`` (with dynamic sampling and solver guidance when the preset asks), the probe
    attached to it."""
    for name in ("dynamic_sampling", "guidance"):
        if getattr(preset, name).enabled and world_size() > 1:
            raise ConfigError(f"{name} runs in a single process; turn it off for multi-process training")
    trainer_class = make_trainer_class(
        dynamic=preset.dynamic_sampling.enabled,
        max_refills=preset.dynamic_sampling.max_refills,
        seed=seed,
        guide=guide,
    )
    trainer = trainer_class(
        model=model_path,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        peft_config=preset.lora.to_peft() if preset.lora.enabled else None,
        callbacks=[c for c in callbacks if c is not None],
    )
    for callback in callbacks:
        if hasattr(callback, "attach"):
            callback.attach(trainer)
    return trainer


def solver_guide(preset: GRPOPreset, model_path: str) -> SolverGuide:
    """The preset's solver guidance for the policy at ``model_path`` (its tokenizer, its scratchpad)."""
    tokenizer = load_tokenizer(model_path)
    return SolverGuide(
        tokenizer,
        target=preset.guidance.resolve_target(model_path),
        when=preset.guidance.when,
        max_tokens=preset.max_completion_length,
        eos_token_ids=[tokenizer.eos_token_id],
        chat_template_kwargs=preset.chat_template_kwargs,
    )


def _prompt_dataset(
    model_path: str, instances: Sequence[Instance], preset: GRPOPreset, style: str
) -> tuple[Any, int]:
    """The prompt dataset and its longest prompt in tokens (refused when over the preset's limit)."""
    from datasets import Dataset

    rows = prompt_rows(instances, style=style)
    tokenizer = load_tokenizer(model_path)
    longest = check_prompt_lengths(tokenizer, rows, preset.max_prompt_length, **preset.chat_template_kwargs)
    return Dataset.from_list(rows), longest


def _probe_set(
    preset: GRPOPreset, instances: Sequence[Instance], given: Sequence[Instance] | None
) -> list[Instance]:
    """The boards the in-round probe answers: ``given``, else a small held-out set shaped like the round
    (its agent counts and sizes, ``probe.per_cell`` boards per size and wait subset; seeds of their own)."""
    if preset.probe.every == 0:
        return []
    if world_size() > 1:  # a callback's generate on sharded weights would run once per process
        log.info(
            "the in-round probe runs in single-process rounds only; skipped in this %d-process round",
            world_size(),
        )
        return []
    if given is not None:
        return list(given)
    from envengineer.mapf.benchmark import build_validation_set

    probe: list[Instance] = []
    for agents in sorted({i.num_agents for i in instances}):
        sizes = [i.size for i in instances if i.num_agents == agents]
        shape = {"agents": (agents,), "min_size": min(sizes), "max_size": max(sizes)}
        probe += build_validation_set(preset.probe.per_cell, seed=PROBE_SEED, workers=1, **shape)
    return probe


def _without_probe_boards(instances: Sequence[Instance], probe: Sequence[Instance]) -> Sequence[Instance]:
    """``instances`` less any board of the probe set, so the probe measures boards never trained on."""
    if not probe:
        return instances
    held = {i.board_hash() for i in probe}
    kept = [i for i in instances if i.board_hash() not in held]
    if len(kept) < len(instances):
        log.info("dropped %d training boards that are probe boards", len(instances) - len(kept))
    return kept


def _probe_callback(
    preset: GRPOPreset, probe_set: Sequence[Instance], *, style: str, seed: int, temperature: float
) -> Any:
    if not probe_set:
        return None
    return probe_callback(
        probe_set,
        every=preset.probe.every,
        style=style,
        max_new_tokens=preset.max_completion_length,
        kl=preset.probe.kl,
        temperature=temperature,
        seed=seed,
    )


def _resolve_preset(preset: Any) -> GRPOPreset:
    if preset is None:
        name = default_preset_name("grpo", gpu=gpu_available())
        log.info("no GRPO preset named; using the shipped %s preset", name)
        preset = name
    return load_preset(preset, "grpo")


# -- shared with sft.py -----------------------------------------------------------------------------------
def require_train_deps() -> None:
    """Raise a one-line error naming the extra to install when a training dependency is missing."""
    missing = [m for m in _TRAIN_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise EnvEngineerError(f"training needs {', '.join(missing)}; install them with {TRAIN_EXTRA_HINT}")


def gpu_available() -> bool:
    """True when torch sees a CUDA (or ROCm) device; False when torch is missing."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def generate_round_data(
    round_config: RoundConfig, out_dir: Path, *, seed: int, exclude: Iterable[str] = frozenset()
) -> tuple[list[Instance], float]:
    """Generate a round's training instances and record them (``manifest.jsonl``, ``round.yaml``).

    Returns the instances and the seconds generation took (reported as time spent outside the model).
    """
    from envengineer.mapf.generator import generate_round

    t0 = time.perf_counter()
    instances = generate_round(round_config, seed, split="train", exclude=exclude)
    seconds = time.perf_counter() - t0
    log.info("generated %d training instances in %.1f s (seed %d)", len(instances), seconds, seed)
    if is_main_process():
        write_manifest(instances, out_dir / "manifest.jsonl")
        round_config.save(out_dir / "round.yaml")
    return instances, seconds


def is_main_process() -> bool:
    """True in a single process, and in the global rank-0 process of a ``torchrun``/``accelerate launch`` run.

    Reads the launcher's ``RANK`` variable instead of creating accelerate's process state, which the trainer
    must create itself (with its own backend and timeout).
    """
    return os.environ.get("RANK", "0") == "0"


def resolve_model_path(model: str | None) -> str:
    """A local folder or hub id for ``model``; ``None`` or ``"embedded"`` give the embedded model's folder.

    A local folder is checked first (:func:`~envengineer.models.policy_folder.check_model_folder`): a
    damaged one is a :class:`ConfigError` that names the file, before transformers reads it.
    """
    from envengineer.models.embedded import resolve_model
    from envengineer.models.policy_folder import check_model_folder

    path = resolve_model(model)
    check_model_folder(path)
    return path


def note_preset_model(preset: Any, model: str | None) -> None:
    """Log when the model trained is not the one the preset is sized for (a hint, not an error)."""
    if preset.model is not None and model != preset.model:
        log.info(
            "the preset is sized for %s but the model is %s; pass --model %s to train the preset's model",
            preset.model,
            model or "the embedded model",
            preset.model,
        )


def load_tokenizer(model_path: str) -> Any:
    """The model's tokenizer, with an error that says what to pass when it cannot be found."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load the tokenizer of model {model_path!r} ({str(exc).splitlines()[0]}); pass a local "
            "model folder with --model, or omit --model for the embedded model"
        ) from None


def _run(trainer: Any, timing: Timing) -> Any:
    t0 = time.perf_counter()
    output = trainer.train()
    timing.train_s = time.perf_counter() - t0
    return output


def save_checkpoint(trainer: Any, out: Path, *, base_model: str, lora: bool) -> Path:
    """Save full weights + tokenizer in ``out/checkpoint`` (merging a LoRA adapter into the base weights).

    ``trainer.save_model`` gathers ZeRO-3 / FSDP shards; the LoRA merge runs on the main process only,
    from the saved adapter and a fresh copy of the base model, so it works the same under DeepSpeed.
    """
    checkpoint = out / "checkpoint"
    if not lora:
        trainer.save_model(str(checkpoint))
        trainer.accelerator.wait_for_everyone()
        return checkpoint
    adapter = out / "adapter"
    trainer.save_model(str(adapter))
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        merge_adapter(base_model, adapter, checkpoint)
    trainer.accelerator.wait_for_everyone()
    return checkpoint


def merge_adapter(base_model: str, adapter: str | Path, checkpoint: str | Path) -> Path:
    """Load ``base_model``, apply the LoRA ``adapter``, merge it and save weights + tokenizer."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(checkpoint))
    AutoTokenizer.from_pretrained(str(adapter)).save_pretrained(str(checkpoint))
    log.info("merged LoRA adapter %s into %s", adapter, checkpoint)
    del base, merged
    return Path(checkpoint)


def release(trainer: Any) -> None:
    """Free the accelerator's references to model and optimizer; the caller then drops ``trainer``."""
    trainer.accelerator.free_memory()


def collect_garbage() -> None:
    """Return freed memory (and cached CUDA blocks) before the next round."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_memory() -> dict[str, float | None]:
    """Peak memory of this process so far: resident set (GB) and, on a GPU, what torch reserved (GB).

    The colocated vLLM engine allocates through torch, so ``gpu_reserved_gb`` includes its weights and
    KV cache; memory outside torch's allocator (CUDA context, NCCL buffers) is not counted.
    """
    import resource
    import sys

    import torch

    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    rss = rss_kb / 1e9 if sys.platform == "darwin" else rss_kb * 1024 / 1e9
    gpu = None
    if torch.cuda.is_available():
        gpu = round(max(torch.cuda.max_memory_reserved(d) for d in range(torch.cuda.device_count())) / 1e9, 3)
    return {"rss_gb": round(rss, 3), "gpu_reserved_gb": gpu}


def write_run_files(out: Path, metrics: dict[str, Any], preset_yaml: str) -> None:
    """``metrics.json`` and ``preset.yaml`` in ``out`` (main process only)."""
    if not is_main_process():
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "preset.yaml").write_text(preset_yaml, encoding="utf-8")
    tmp = out / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(out / "metrics.json")


@dataclass
class Timing:
    """Wall-clock seconds of the parts of a round, to tell model time from testbed time."""

    generate_s: float = 0.0
    dataset_s: float = 0.0
    reward_s: float = 0.0
    reward_calls: int = 0
    train_s: float = 0.0
    step_s: list[float] = field(default_factory=list)

    def wrap(self, fn: Callable[..., list[float]]) -> Callable[..., list[float]]:
        """``fn`` with its wall time added to ``reward_s`` (keeps ``__name__``, which TRL logs under)."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> list[float]:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.reward_s += time.perf_counter() - t0
                self.reward_calls += 1

        return timed

    def summary(self) -> dict[str, Any]:
        """Totals, per-step figures and the share of the round spent outside the model."""
        outside = self.generate_s + self.dataset_s + self.reward_s
        total = self.generate_s + self.dataset_s + self.train_s
        steps = sorted(self.step_s)
        return {
            "generate_s": round(self.generate_s, 4),
            "dataset_s": round(self.dataset_s, 4),
            "reward_s": round(self.reward_s, 4),
            "reward_calls": self.reward_calls,
            "train_s": round(self.train_s, 4),
            "steps": len(steps),
            "step_s_mean": round(sum(steps) / len(steps), 4) if steps else None,
            "step_s_median": round(statistics.median(steps), 4) if steps else None,
            "step_s": [round(s, 4) for s in self.step_s],
            "outside_model_s": round(outside, 4),
            "outside_model_share": round(outside / total, 6) if total > 0 else None,
        }


def step_timer(timing: Timing) -> Any:
    """A ``TrainerCallback`` that appends each optimizer step's wall time to ``timing.step_s``."""
    from transformers import TrainerCallback

    class _StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self._t0 = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            timing.step_s.append(time.perf_counter() - self._t0)

    return _StepTimer()
