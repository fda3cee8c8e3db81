"""The solver teaches the policy on its own answers: DAgger with an exact teacher.

A warm-started policy learns every line of the joint plan after the solver's earlier lines, never after its
own, so one wrong move early on compounds (docs/training.md, "The solver teaches the policy on its own
answers"). This learner labels the states the policy itself reaches:

1. **Roll in.** The policy answers a batch of boards (greedy by default, as it answers in evaluation).
2. **Label.** Its plan is read from the answer (the scratchpad lines, or the answer block for formats
   without one), and the exact teacher (:func:`envengineer.mapf.solver.teacher.label`) finds the longest
   prefix of it that an optimal plan begins with, and that plan. The target is that plan written in the
   policy's format (:func:`~envengineer.training.dataset.plan_response`): it agrees with the answer for as
   long as the policy was right, so its first differing character is the policy's first mistake, be it a
   move (off the board, into a hole, a collision, a dead end, a costlier move, a line ended early or late)
   or a slip of writing (a wrong cell, a wrong list of free moves, an answer line that does not copy its
   scratchpad).
3. **Learn.** The loss covers the target from the token holding that first differing character to the
   end-of-sequence token: the teacher's move at the policy's own state, then the optimal rest of the plan.
   Answers that are already the target add nothing. Labelled rows join a buffer (DAgger's aggregated data
   set, the most recent ``buffer`` rows), with ``expert_rows`` of the solver's own plans of other boards
   if asked, and every roll-in is followed by ``steps_per_rollout`` optimizer steps on batches drawn
   from it.

One roll-in costs a batch of generations and a few exact solves per answer (a bisection over the answer's
moves); docs/training.md has the measured cost of a step. The loop is plain PyTorch, read top to bottom:
TRL's trainers learn from a fixed data set or from a teacher model's token distribution, while this teacher
is a search that rewrites the rest of the answer.

Output folder: ``checkpoint/`` (weights and tokenizer, loadable like any other), ``metrics.json`` (the
settings, one record per roll-in, timing) and ``preset.yaml`` (the settings written out).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envengineer.errors import ConfigError, SolverBudgetExceeded
from envengineer.mapf.instance import ACTIONS, Instance, agent_name
from envengineer.mapf.prompt import build_messages
from envengineer.mapf.solver.teacher import label_instance, prefix_lines, writing_steps
from envengineer.mapf.validator import validate
from envengineer.models.policy_folder import check_model_folder
from envengineer.models.policy_formats import scratchpad_of

log = logging.getLogger(__name__)

__all__ = [
    "LOOP_STEPS_PER_MINUTE",
    "TeachRow",
    "TeachSettings",
    "round_steps",
    "teach",
    "teach_round",
    "teach_row",
    "written_plan",
]

#: The fixed rate at which a loop round turns its ``minutes`` into optimizer steps: the default settings'
#: measured pace on 2 CPU cores (150 steps in about 5 minutes, docs/training.md). A round's length and
#: its schedule's decay are then the same on an idle and on a crowded machine.
LOOP_STEPS_PER_MINUTE = 30


class TeachSettings(BaseModel):
    """The learner's settings (defaults: the small policy on a CPU; docs/training.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    minutes: float | None = Field(
        5.0,
        gt=0,
        description="envengineer teach: stop after this much wall time (checked inside roll-ins too); "
        "a loop round turns it into steps once (LOOP_STEPS_PER_MINUTE) and never reads the clock; "
        "None: steps only",
    )
    max_steps: int = Field(
        150, ge=1, description="optimizer steps: the schedule's length (about 5 minutes on 2 CPU cores)"
    )
    rollout_batch: int = Field(64, ge=1, description="boards the policy answers per roll-in")
    steps_per_rollout: int = Field(4, ge=1, description="optimizer steps after each roll-in")
    expert_rows: int = Field(
        0,
        ge=0,
        description="rows of the solver's own plans (as the warm-start learns them, loss on the whole "
        "answer) added to the buffer per roll-in, from boards apart from the roll-ins': DAgger's first data "
        "set kept in the mix, at no generation cost",
    )
    batch_size: int = Field(32, ge=1, description="rows per optimizer step, drawn from the buffer")
    buffer: int = Field(2048, ge=1, description="the most recent labelled rows kept (DAgger's data set)")
    learning_rate: float = Field(5e-4, gt=0, description="peak learning rate (AdamW)")
    warmup_steps: int = Field(10, ge=0, description="linear warm-up steps, then cosine decay to 0")
    temperature: float = Field(0.0, ge=0, description="roll-in sampling temperature; 0 answers greedily")
    max_new_tokens: int = Field(640, ge=1, description="longest answer of a roll-in, in tokens")
    target: str | None = Field(None, description="the response format; None: the policy's own format")
    seed: int = Field(0, ge=0, description="seed of the buffer's draws and of sampled roll-ins")


@dataclass(frozen=True)
class TeachRow:
    """One labelled answer.

    Attributes:
        target: The response the teacher writes: an optimal plan that begins with the policy's right moves.
        start: The character of ``target`` where the policy's answer first differs (``len(target)`` and
            ``done`` when it wrote exactly ``target``).
        done: The answer was already the target, end of sequence included.
        kept, total: The steps of the written plan the teacher kept, and all of them
            (:class:`~envengineer.mapf.solver.teacher.Label`).
        fatal: Whether the first wrong step left no valid plan (``None``: no wrong step).
    """

    target: str
    start: int
    done: bool
    kept: int
    total: int
    fatal: bool | None


def written_plan(text: str, *, scratchpad: bool) -> tuple[list[list[str]], bool]:
    """The plan a response writes, as far as it can be read, and whether its last line was cut off.

    With ``scratchpad`` the lines inside ``<think>`` are read (the words ``UP DOWN LEFT RIGHT WAIT`` of each
    agent's line, the scratchpad's cells and checks skipped), else the ``<answer>`` block's lines. Lines
    must name the agents in order from ``A0``; reading stops at the first that does not. The last line is
    open when the text ends inside it (the answer was cut off), never when its block was closed.

    >>> written_plan("<think>\\nA0 (0,0) right RIGHT (0,1)\\nA1 (0,1) down DOWN", scratchpad=True)
    ([['RIGHT'], ['DOWN']], True)
    >>> written_plan("<answer>\\nA0: RIGHT\\nA1: UP UP\\n</answer>", scratchpad=False)
    ([['RIGHT'], ['UP', 'UP']], False)
    """
    opening, closing = ("<think>", "</think>") if scratchpad else ("<answer>", "</answer>")
    at = text.find(opening)
    if at < 0:
        return [], False
    body = text[at + len(opening) :]
    end = body.find(closing)
    closed = end >= 0
    if closed:
        body = body[:end]
    lines: list[list[str]] = []
    raw = body.split("\n")
    open_last = False
    for x, line in enumerate(raw):
        if not line.strip():
            continue
        words = line.split()
        if words[0].rstrip(":") != agent_name(len(lines)):
            break
        lines.append([w for w in words[1:] if w in ACTIONS])
        open_last = not closed and x == len(raw) - 1
    return lines, open_last


def teach_row(instance: Instance, response: str, *, target: str, ended: bool) -> TeachRow:
    """The teacher's label of one answer (steps 2 and 3 of the module docstring).

    Args:
        instance: A solved board.
        response: The policy's answer text (without the end-of-sequence token).
        target: The response format (:data:`~envengineer.training.dataset.SFT_TARGETS`).
        ended: Whether the answer ended with the end-of-sequence token (else it ran out of tokens).
    """
    written, open_last = written_plan(response, scratchpad=scratchpad_of(target).think)
    written = written[: instance.num_agents]
    lab = label_instance(instance, written, open_last=open_last)
    text = _target_text(instance, target, written, lab)
    start = _common_prefix(response, text)
    done = start == len(text) == len(response) and ended
    return TeachRow(text, start, done, lab.kept, lab.total, lab.fatal)


def _target_text(instance: Instance, target: str, written: list[list[str]], lab: Any) -> str:
    """The label in the policy's format, in the warm-start's own spelling wherever the kept steps allow:
    the warm-start's target itself (the solver's plan, detours spelled as waits) when it begins with the
    kept steps, else the teacher's plan with the detours after the kept steps spelled as waits. Optimal
    plans are many; a label that spells them as the warm-start did does not teach a second convention."""
    from envengineer.training.dataset import plan_response, target_response, wait_instead_of_detours

    kept, still_open = prefix_lines(writing_steps(written, open_last=False)[: lab.kept])
    canonical = target_response(instance, target)
    holds = scratchpad_of(target)
    plan = written_plan(canonical, scratchpad=holds.think)[0]
    if all(plan[i] == line if not still_open or i < len(kept) - 1 else plan[i][: len(line)] == line
           for i, line in enumerate(kept)):  # fmt: skip
        return canonical
    paths = lab.completion.paths
    if not holds.detours_as_waits:  # these targets keep the solver's spelling as it is
        return plan_response(instance, paths, target)
    frozen = [len(line) + 1 for line in kept] + [0] * (len(paths) - len(kept))
    return plan_response(instance, wait_instead_of_detours(instance, paths, frozen), target)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def teach(
    model: str,
    instances: Sequence[Instance],
    *,
    out_dir: str | Path,
    settings: TeachSettings | None = None,
) -> dict[str, Any]:
    """Train ``model`` on the teacher's labels of its own answers to ``instances`` (module docstring).

    The run stops after ``max_steps`` optimizer steps, after ``minutes`` of wall time when that is set
    (checked before each roll-in and step, and inside a roll-in's generation, whose answers cut off by
    the deadline are dropped unlabelled), or when a whole pass over the boards leaves nothing to learn;
    ``metrics["stopped"]`` says which.

    Args:
        model: A local checkpoint folder (a warm-started small policy, or any causal LM with a chat
            template) or a name ``envengineer sft`` accepts (``policy:trainee``, ``policy:SIZE``,
            ``embedded``).
        instances: Solved training boards, visited in order (cycled when the time allows more).
        out_dir: Output folder (``checkpoint/``, ``metrics.json``).
        settings: :class:`TeachSettings` (defaults when ``None``).

    Returns:
        The metrics written to ``metrics.json``: settings, one record per roll-in, steps, seconds, and
        ``checkpoint``.

    Raises:
        ConfigError: no boards, a missing or damaged model folder, or a loss that is not finite (the
            learning rate is too high); nothing is written then.
    """
    from envengineer.models import SamplingParams
    from envengineer.models.embedded import resolve_model
    from envengineer.models.small_policy import prompt_style_of
    from envengineer.training.presets import resolve_target

    cfg = settings or TeachSettings()
    if not instances:
        raise ConfigError("teach needs at least one training board")
    path = resolve_model(model)  # policy:trainee, policy:SIZE, embedded: the folders sft reads
    check_model_folder(path)
    t_start = time.perf_counter()
    clock = _Clock(None if cfg.minutes is None else t_start + 60.0 * cfg.minutes)
    target = resolve_target(cfg.target, path)
    style = prompt_style_of(path) or "compact"
    parts = _setup(path, cfg)
    params = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    step, records, unlabelled, stopped = _learn(parts, instances, cfg, clock, params, target, style)
    policy, tokenizer = parts[0], parts[1]
    _check_weights_finite(policy, cfg)
    metrics = {
        "kind": "teach",
        "model": path,
        "target": target,
        "instances": len(instances),
        "steps": step,
        "stopped": stopped,
        "rollins": len(records),
        "boards_answered": len(records) * cfg.rollout_batch,
        "unlabelled": unlabelled,
        "settings": cfg.model_dump(mode="json"),
        "history": records,
    }
    return _save(policy, tokenizer, Path(out_dir), metrics, cfg, t_start)


def _learn(
    parts: tuple[Any, Any, Any, Any, Any],
    instances: Sequence[Instance],
    cfg: TeachSettings,
    clock: _Clock,
    params: Any,
    target: str,
    style: str,
) -> tuple[int, list[dict[str, Any]], int, str]:
    """Roll-ins and optimizer steps until a stop (:func:`teach`): the steps taken, one record per roll-in,
    the answers left unlabelled and why it stopped."""
    policy, tokenizer, backend, optimizer, schedule = parts
    rng = np.random.default_rng(cfg.seed)
    buffer: list[tuple[list[int], int]] = []  # (prompt + target ids, first id under the loss)
    records: list[dict[str, Any]] = []
    step = unlabelled = idle = 0
    passes = -(-len(instances) // cfg.rollout_batch)  # roll-ins in one pass over the boards
    stopped = "max_steps"
    while step < cfg.max_steps:
        if clock.past():
            stopped = "minutes"
            break
        t0 = time.perf_counter()
        # roll-in boards from the front of the list, the solver's own rows from its back
        boards = _cyclic_slice(instances, len(records) * cfg.rollout_batch, cfg.rollout_batch, 1)
        expert = _cyclic_slice(instances, -1 - len(records) * cfg.expert_rows, cfg.expert_rows, -1)
        rollin = replace(params, seed=cfg.seed + len(records))
        labelled = _roll_in(backend, boards, rollin, target, style, clock)
        if labelled is None:  # the deadline fell inside the roll-in: its answers were cut off
            stopped = "minutes"
            break
        rows, encoded, failed = labelled
        encoded += [_expert_row(backend, board, target, style) for board in expert]
        unlabelled += failed
        buffer = (buffer + encoded)[-cfg.buffer :]
        t1 = time.perf_counter()
        losses = []
        for _ in range(cfg.steps_per_rollout):
            if not buffer or step >= cfg.max_steps or clock.past():
                break
            batch = [buffer[i] for i in rng.integers(0, len(buffer), size=min(cfg.batch_size, len(buffer)))]
            losses.append(_step(policy, optimizer, schedule, batch, tokenizer.pad_token_id or 0))
            _check_finite(losses[-1], step, cfg)
            step += 1
        records.append(_record(step, rows, losses, buffer, t0, t1))
        log.info("teach step %d: %s", step, records[-1])
        idle = 0 if buffer else idle + 1
        if idle >= passes:
            stopped = "nothing to learn"  # every answer of a whole pass was already the teacher's
            break
    return step, records, unlabelled, stopped


@dataclass(frozen=True)
class _Clock:
    """The wall-clock deadline of a run (``perf_counter`` time); ``None``: none (a loop round)."""

    deadline: float | None

    def past(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()


def _record(
    step: int, rows: Sequence[Any], losses: list[float], buffer: list[Any], t0: float, t1: float
) -> dict[str, Any]:
    """One roll-in's line of ``metrics.json["history"]``."""
    return {
        "step": step,
        **_rollin_stats(rows),
        "loss": float(np.mean(losses)) if losses else None,
        "buffer": len(buffer),
        "rollin_s": round(t1 - t0, 3),
        "train_s": round(time.perf_counter() - t1, 3),
    }


def _check_finite(loss: float, step: int, cfg: TeachSettings) -> None:
    """A loss that is not finite stops the run before anything is written (a diverged model is no
    checkpoint, and NaN is no metric)."""
    if not math.isfinite(loss):
        raise ConfigError(
            f"teach: the loss is {loss} at optimizer step {step + 1} with learning_rate "
            f"{cfg.learning_rate:g}: training diverged, nothing was written; lower the learning rate "
            "(--learning-rate, default 5e-4)"
        )


def _check_weights_finite(policy: Any, cfg: TeachSettings) -> None:
    """The last step's update may leave weights that are not finite although its loss was."""
    import torch

    with torch.no_grad():
        bad = next((n for n, p in policy.named_parameters() if not torch.isfinite(p).all()), None)
    if bad is not None:
        raise ConfigError(
            f"teach: the weights ({bad}) are not finite after training with learning_rate "
            f"{cfg.learning_rate:g}: training diverged, nothing was written; lower the learning rate "
            "(--learning-rate, default 5e-4)"
        )


def _setup(model: str, cfg: TeachSettings) -> tuple[Any, Any, Any, Any, Any]:
    """The policy (float32, to train), its tokenizer, a backend that answers with it, the optimizer (AdamW)
    and its schedule; torch seeded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envengineer.models.hf import HFBackend

    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(model)
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, cfg))
    return policy, tokenizer, HFBackend.from_model(policy, tokenizer, name=model), optimizer, schedule


def _save(
    policy: Any, tokenizer: Any, out: Path, metrics: dict[str, Any], cfg: TeachSettings, t_start: float
) -> dict:
    """Write the checkpoint, ``metrics.json`` and ``preset.yaml``; the metrics with the checkpoint's path
    and the seconds the whole call took."""
    from envengineer.training.grpo import write_run_files

    checkpoint = out / "checkpoint"
    policy.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    metrics = {**metrics, "checkpoint": str(checkpoint), "seconds": time.perf_counter() - t_start}
    write_run_files(out, metrics, _settings_yaml(cfg))
    log.info(
        "teach done: %d steps, %d roll-ins in %.1f s",
        metrics["steps"],
        metrics["rollins"],
        metrics["seconds"],
    )
    return metrics


def _roll_in(
    backend: Any, boards: Sequence[Instance], params: Any, target: str, style: str, clock: _Clock
) -> tuple[list[tuple[Instance, str, TeachRow]], list[tuple[list[int], int]], int] | None:
    """The policy answers ``boards`` and the teacher labels the answers: the labelled answers, the encoded
    rows of those with something to learn, and how many answers the teacher could not settle; ``None``
    when ``clock``'s deadline stopped the generation (cut-off answers are no answers to label)."""
    tokenizer = backend.tokenizer
    eos = tokenizer.eos_token or ""
    convs = [build_messages(b, style=style) for b in boards]
    left = clock.left()
    answers = (
        backend.generate(convs, params) if left is None else backend.generate(convs, params, max_seconds=left)
    )
    if clock.past():
        return None
    rows, encoded, failed = [], [], 0
    for board, conv, ans in zip(boards, convs, answers, strict=True):
        # an answer that stopped short of the budget ended with the end-of-sequence token
        ended = ans.completion_tokens is not None and ans.completion_tokens < params.max_new_tokens
        try:
            row = teach_row(board, ans.text, target=target, ended=ended)
        except SolverBudgetExceeded:
            failed += 1  # the teacher could not settle this prefix within its budget: no label
            continue
        rows.append((board, ans.text, row))
        if not row.done:
            encoded.append(_encode(tokenizer, backend.render(conv), row.target, row.start, eos))
    return rows, encoded, failed


def _cyclic_slice(instances: Sequence[Instance], start: int, count: int, direction: int) -> list[Instance]:
    """``count`` boards from ``start`` on in ``direction`` (1 or -1), cycling through the list: each roll-in
    takes the next boards from the front, the solver's own rows the next from the back."""
    return [instances[(start + direction * x) % len(instances)] for x in range(count)]


def _expert_row(backend: Any, board: Instance, target: str, style: str) -> tuple[list[int], int]:
    """The solver's own plan for ``board`` as the warm-start learns it: the loss on the whole answer."""
    from envengineer.training.dataset import target_response

    prompt = backend.render(build_messages(board, style=style))
    return _encode(
        backend.tokenizer, prompt, target_response(board, target), 0, backend.tokenizer.eos_token or ""
    )


def _rollin_stats(rows: Sequence[tuple[Instance, str, TeachRow]]) -> dict[str, float]:
    """What a roll-in's answers were: valid, optimal, already the target, the share of their steps kept,
    and how often the first wrong step left no valid plan."""
    if not rows:
        return {}
    verdicts = [validate(b, text) for b, text, _ in rows]
    labels = [r for _, _, r in rows]
    return {
        "rollin_valid": float(np.mean([v.valid for v in verdicts])),
        "rollin_optimal": float(np.mean([v.optimal for v in verdicts])),
        "already_right": float(np.mean([r.done for r in labels])),
        "kept_share": float(np.mean([r.kept / r.total if r.total else 1.0 for r in labels])),
        "fatal_share": float(np.mean([bool(r.fatal) for r in labels])),
    }


def round_steps(settings: TeachSettings, max_steps: int | None = None) -> int:
    """The optimizer steps of a loop round: ``max_steps`` (the experiment's ``training.max_steps``, else
    the settings'), capped by the settings' ``minutes`` at :data:`LOOP_STEPS_PER_MINUTE` (at least one).

    >>> round_steps(TeachSettings(minutes=2.0, max_steps=150))
    60
    >>> round_steps(TeachSettings(minutes=2.0), max_steps=7), round_steps(TeachSettings(minutes=None))
    (7, 150)
    """
    cap = settings.max_steps if max_steps is None else max_steps
    if settings.minutes is None:
        return cap
    return max(1, min(cap, math.floor(settings.minutes * LOOP_STEPS_PER_MINUTE)))


def teach_round(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: str | Path,
    settings: TeachSettings | None = None,
    seed: int = 0,
    max_steps: int | None = None,
) -> Any:
    """:func:`teach` as a round of the loop (``training.learner: teach``): the round's seed overrides the
    settings', and the round stops on steps alone, :func:`round_steps` of them (its schedule decays to 0
    at the last), never on the wall clock; ``metrics["planned_steps"]`` records the count. The result is
    a :class:`~envengineer.training.grpo.TrainResult` like a GRPO round's (the loop's data stage records
    the boards)."""
    from envengineer.training.grpo import TrainResult, resolve_model_path

    base = settings or TeachSettings()
    planned = round_steps(base, max_steps)
    update: dict[str, Any] = {"seed": seed, "max_steps": planned, "minutes": None}
    cfg = TeachSettings.model_validate({**base.model_dump(), **update})
    metrics = teach(resolve_model_path(model), instances, out_dir=out_dir, settings=cfg)
    metrics = {**metrics, "planned_steps": planned, "minutes_given": base.minutes}
    return TrainResult(
        checkpoint=Path(metrics["checkpoint"]),
        metrics=metrics,
        steps=metrics["steps"],
        seconds=metrics["seconds"],
    )


def _lr_factor(step: int, cfg: TeachSettings) -> float:
    """Linear warm-up, then cosine decay to 0 at ``max_steps``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return 0.5 * (1.0 + np.cos(np.pi * min(1.0, progress)))


def _encode(tokenizer: Any, prompt: str, target: str, start: int, eos: str) -> tuple[list[int], int]:
    """Prompt and target ids, and the index of the first id under the loss: the token that holds the
    target's character ``start`` (the first past the policy's agreement; 0: the whole answer)."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    enc = tokenizer(target + eos, add_special_tokens=False, return_offsets_mapping=True)
    first = next(
        (x for x, (_a, b) in enumerate(enc["offset_mapping"]) if b > start), len(enc["input_ids"]) - 1
    )
    return prompt_ids + enc["input_ids"], len(prompt_ids) + first


def _step(policy: Any, optimizer: Any, schedule: Any, batch: list[tuple[list[int], int]], pad: int) -> float:
    """One optimizer step on right-padded rows; the loss covers each row from its first labelled id on."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for r, (ids, first) in enumerate(batch):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        mask[r, : len(ids)] = 1
        labels[r, first : len(ids)] = torch.tensor(ids[first:])
    policy.train()
    loss = policy(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _settings_yaml(cfg: TeachSettings) -> str:
    import yaml

    return yaml.safe_dump({"kind": "teach", **cfg.model_dump(mode="json")}, sort_keys=False)
