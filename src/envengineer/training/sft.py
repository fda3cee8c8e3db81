"""Supervised warm-start: teach a small model the answer format on the solver's optimal plans.

A small model such as SmolLM2-135M answers almost no prompt in a parseable form, so a sparse reward
(valid / optimal) gives GRPO nothing to work with. A short supervised run on the SoC-optimal plans of a
round's instances (TRL's ``SFTTrainer``, loss on the answer only) teaches it the ``<answer>`` block; GRPO
then starts from there. The output folder has the same layout as a GRPO round (``checkpoint/``,
``metrics.json``, ``preset.yaml``, ``manifest.jsonl``), so the checkpoint feeds ``envengineer train`` and
``envengineer eval`` directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.training.batching import length_grouped_trainer
from envengineer.training.dataset import check_prompt_lengths, sft_rows
from envengineer.training.grpo import (
    Timing,
    TrainResult,
    collect_garbage,
    generate_round_data,
    load_tokenizer,
    note_preset_model,
    release,
    require_train_deps,
    resolve_model_path,
    save_checkpoint,
    step_timer,
    write_run_files,
)
from envengineer.training.presets import SFTPreset, default_preset_name, load_preset, preset_to_yaml

log = logging.getLogger(__name__)


def sft_from_config(
    model: str | None,
    round_config: Any,
    *,
    out_dir: str | Path,
    seed: int = 0,
    data_seed: int | None = None,
    preset: Any = None,
    epochs: float | None = None,
    exclude: frozenset[str] = frozenset(),
    max_steps: int | None = None,
) -> TrainResult:
    """Generate a round's instances from its configuration and run the supervised warm-start on them.

    Args:
        model: Hub id or local path; ``None`` or ``"embedded"``: the embedded SmolLM2-135M.
        round_config: A :class:`envengineer.mapf.config.RoundConfig`.
        out_dir: Output folder.
        seed: Training seed.
        data_seed: Seed of the instance generator (defaults to ``seed``).
        preset: An SFT preset (name, path, mapping or object); ``None``: ``sft-cpu`` or ``sft-gpu``.
        epochs: Overrides the preset's ``epochs``.
        exclude: Board hashes that must not appear (the validation and benchmark sets).
        max_steps: Stop after this many optimizer steps.
    """
    require_train_deps()
    resolved = _resolve_preset(preset)
    resolved.trl_options()
    out = Path(out_dir)
    instances, generate_s = generate_round_data(
        round_config, out, seed=seed if data_seed is None else data_seed, exclude=exclude
    )
    return sft(
        model,
        instances,
        out_dir=out,
        preset=resolved,
        seed=seed,
        epochs=epochs,
        max_steps=max_steps,
        _generate_seconds=generate_s,
    )


def sft(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: str | Path,
    preset: Any = None,
    seed: int = 0,
    epochs: float | None = None,
    max_steps: int | None = None,
    callbacks: Sequence[Any] = (),
    _generate_seconds: float = 0.0,
) -> TrainResult:
    """Fine-tune ``model`` on the solver's optimal answers to ``instances`` and save a loadable checkpoint.

    Args:
        model: Hub id or local path; ``None`` or ``"embedded"``: the embedded SmolLM2-135M.
        instances: Solved instances (their targets are recomputed by the exact solver).
        out_dir: Output folder (``checkpoint/``, ``metrics.json``, ``preset.yaml``).
        preset: An SFT preset (name, path, mapping or object); ``None``: ``sft-cpu`` or ``sft-gpu``.
        seed: Training seed.
        epochs: Overrides the preset's ``epochs``.
        max_steps: Stop after this many optimizer steps.
        callbacks: Extra ``transformers.TrainerCallback`` objects (benchmarks, trackers).

    Returns:
        The :class:`~envengineer.training.grpo.TrainResult`.

    Raises:
        ConfigError: bad preset, unknown model, a prompt or answer longer than the preset allows.
    """
    require_train_deps()
    t_start = time.perf_counter()
    resolved = _resolve_preset(preset)
    out = Path(out_dir)
    model_path = resolve_model_path(model)
    note_preset_model(resolved, model)
    log.info("SFT on the solver's plans: model %s, %d instances, out %s", model_path, len(instances), out)

    timing = Timing(generate_s=_generate_seconds)
    t0 = time.perf_counter()
    style = resolved.resolve_prompt_style(model_path)
    dataset, tokenizer, longest = _sft_dataset(resolved, instances, model_path, style)
    timing.dataset_s = time.perf_counter() - t0

    overrides = {} if max_steps is None else {"max_steps": int(max_steps)}
    args = resolved.build_config(output_dir=out / "trainer", seed=seed, epochs=epochs, **overrides)
    if args.disable_tqdm:  # the trainer's bars are off: so are those of its dataset preparation
        import datasets

        datasets.disable_progress_bars()
    trainer = _sft_trainer(resolved, model_path, args, dataset, tokenizer, [step_timer(timing), *callbacks])
    t0 = time.perf_counter()
    output = trainer.train()
    timing.train_s = time.perf_counter() - t0
    checkpoint = save_checkpoint(trainer, out, base_model=model_path, lora=resolved.lora.enabled)
    steps = trainer.state.global_step
    metrics = {
        "kind": "sft",
        "model": model_path,
        "prompt_style": style,
        "target": resolved.resolve_target(model_path),
        "checkpoint": str(checkpoint),
        "instances": len(instances),
        "longest_prompt_tokens": longest,
        "steps": steps,
        "train": dict(output.metrics),
        "timing": timing.summary(),
        "log_history": list(trainer.state.log_history),
        "preset": resolved.model_dump(mode="json"),
    }
    release(trainer)
    del trainer
    collect_garbage()
    seconds = time.perf_counter() - t_start
    metrics["seconds"] = seconds
    write_run_files(out, metrics, preset_to_yaml(resolved))
    log.info("SFT done: %d steps in %.1f s; checkpoint %s", steps, seconds, checkpoint)
    return TrainResult(checkpoint=checkpoint, metrics=metrics, steps=steps, seconds=seconds)


def _sft_dataset(
    resolved: SFTPreset, instances: Sequence[Instance], model_path: str, style: str
) -> tuple[Any, Any, int]:
    """The SFT dataset of ``instances``, the tokenizer and the longest prompt in tokens (lengths checked)."""
    from datasets import Dataset

    rows = sft_rows(
        instances,
        chat_template_kwargs=resolved.chat_template_kwargs,
        style=style,
        target=resolved.resolve_target(model_path),
    )
    tokenizer = load_tokenizer(model_path)
    longest = check_prompt_lengths(
        tokenizer, rows, resolved.max_prompt_length, **resolved.chat_template_kwargs
    )
    _check_answer_lengths(tokenizer, rows, resolved.max_completion_length)
    return Dataset.from_list(rows), tokenizer, longest


def _sft_trainer(
    resolved: SFTPreset, model_path: str, args: Any, dataset: Any, tokenizer: Any, callbacks: list[Any]
) -> Any:
    """TRL's ``SFTTrainer`` over ``dataset``, with LoRA when the preset asks for it and batches of similar
    length (``length_group_batches``)."""
    from trl import SFTTrainer

    trainer_cls = SFTTrainer
    if resolved.length_group_batches is not None:
        if args.world_size > 1:
            raise ConfigError("length_group_batches orders the batches of one process; set it to null")
        trainer_cls = length_grouped_trainer(SFTTrainer, resolved.length_group_batches)
    return trainer_cls(
        model=model_path,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=resolved.lora.to_peft() if resolved.lora.enabled else None,
        callbacks=callbacks,
    )


def _resolve_preset(preset: Any) -> SFTPreset:
    if preset is None:
        from envengineer.training.grpo import gpu_available

        name = default_preset_name("sft", gpu=gpu_available())
        log.info("no SFT preset named; using the shipped %s preset", name)
        preset = name
    return load_preset(preset, "sft")


def _check_answer_lengths(tokenizer: Any, rows: Sequence[dict[str, Any]], limit: int) -> None:
    lengths = [
        len(tokenizer(r["completion"][0]["content"], add_special_tokens=False)["input_ids"]) for r in rows
    ]
    if lengths and max(lengths) > limit:
        worst = rows[lengths.index(max(lengths))]["id"]
        raise ConfigError(
            f"the optimal answer to {worst!r} has {max(lengths)} tokens, more than "
            f"max_completion_length={limit}; raise max_completion_length in the SFT preset "
            "or use smaller maps"
        )
