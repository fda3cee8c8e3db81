"""Before a run: the checks (:func:`preflight`), the plan and its cost (:func:`plan`), as ``--dry-run`` shows.

``envengineer run`` calls :func:`preflight` before the first stage and ``envengineer run --dry-run`` calls
it and :func:`plan`, so a dry run refuses exactly what a real run would refuse.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.launch import check_launch

log = logging.getLogger(__name__)


def preflight(experiment: Experiment, *, own_engineer: bool = False) -> None:
    """Check what the experiment names before anything runs: presets, context, engineer options, files,
    that the validation and benchmark sets will not be empty and every board holds its agents.
    ``--dry-run`` runs it too. ``own_engineer``: the caller brings its own engineer factory (tests), so the
    engineer's model is not checked.

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
    if exp.engineer.options and exp.engineer.kind not in ("threshold", "learnability"):
        problems.append(
            "engineer.options apply to kinds 'threshold' and 'learnability' only; remove them for "
            f"{exp.engineer.kind!r}"
        )
    elif exp.engineer.kind in ("threshold", "learnability"):
        try:
            from envengineer.engineer.curriculum import LearnabilityCurriculum, ThresholdCurriculum

            ladder = LearnabilityCurriculum if exp.engineer.kind == "learnability" else ThresholdCurriculum
            ladder.from_options(exp.engineer.options)
        except (ConfigError, TypeError, ValueError) as exc:
            problems.append(f"engineer.options: {exc}")
    reads_preset = exp.trains and exp.rounds > 0 and exp.training.learner != "teach"  # teach ignores it
    for needed, section, preset, kind in (
        (reads_preset, "training.preset", exp.training.preset, exp.training.preset_kind),
        (exp.warm_start.enabled and not exp.scripted, "warm_start.preset", exp.warm_start.preset, "sft"),
    ):
        if not needed:
            continue
        try:
            from envengineer.training.presets import load_preset

            loaded = load_preset(preset, kind)
            if kind == "grpo":
                loaded.batch_shape(exp.launch.processes)  # the step must split over the processes
            elif loaded.length_group_batches is not None and exp.launch.processes > 1:
                raise ConfigError(  # sft() refuses it in the stage, after the run has begun
                    f"length_group_batches orders the batches of one process, not launch.processes="
                    f"{exp.launch.processes}; use a preset with length_group_batches: null"
                )
        except ImportError as exc:
            problems.append(
                f"{section}: the training extra is missing ({exc.name}); pip install 'envengineer[train]'"
            )
        except ConfigError as exc:
            learner_sft = section == "training.preset" and kind == "sft"
            hint = " (learner 'sft' reads training.preset as an SFT preset, e.g. sft-small)"
            problems.append(f"{section}: {exc}" + (hint if learner_sft else ""))
    problems.extend(_small_policy_problems(exp))
    scripted_engineer = None if own_engineer else exp.scripted_engineer_problem()
    if scripted_engineer:
        problems.append(scripted_engineer)
    problems.extend(_benchmark_problems(exp))
    problems.extend(_board_problems(exp))
    problems.extend(check_launch(exp))
    if len(problems) == 1:
        raise ConfigError(f"experiment {exp.name!r}: {problems[0]}")
    if problems:
        raise ConfigError(f"experiment {exp.name!r}:\n  " + "\n  ".join(problems))


def _benchmark_problems(exp: Experiment) -> list[str]:
    """The benchmark file must load (UTF-8, complete, of the instance format) and keep an instance."""
    path = exp.evaluation.benchmark_path
    if not path:
        return []  # the packaged benchmark
    if not Path(path).is_file():
        what = "is a directory" if Path(path).is_dir() else "does not exist"
        return [f"evaluation.benchmark_path: {path} {what}; name an instance file"]
    from envengineer.errors import describe_error
    from envengineer.mapf.benchmark import draw_subset
    from envengineer.mapf.instance import load_instances

    try:
        instances = load_instances(path)
    except Exception as exc:  # what loading it in the run would raise, as the run's one line
        message, code = describe_error(exc)
        if code != 2:
            raise
        return [f"evaluation.benchmark_path: {message}"]
    ev = exp.evaluation
    if not instances or not draw_subset(instances, per_cell=ev.benchmark_per_cell, limit=ev.benchmark_limit):
        return [f"evaluation.benchmark_path: {path} holds no instance; the benchmark would be empty"]
    return []


def _board_problems(exp: Experiment) -> list[str]:
    """Every board a run generates must hold its agents: the validation cells, and the training data's
    ``num_agents`` on each map size of the configuration space (the engineer may pick any), and each count
    of ``training.agents`` on the sizes that fit it."""
    if exp.rounds == 0:
        return []
    from envengineer.errors import GenerationError
    from envengineer.mapf.benchmark import cells
    from envengineer.mapf.config import DEFAULT_SPACE
    from envengineer.mapf.generator import check_fit

    v = exp.validation
    problems = []
    val_cells = list(cells(v.agents, v.max_size, v.min_size))
    if not val_cells:
        problems.append(
            f"validation: the validation set would be empty: no map size from the agent count to "
            f"max_size {v.max_size} fits agents {list(v.agents)}; use agents <= max_size (e.g. [3, 4, 5])"
        )
    for count in exp.training.agents or ():
        if not any(n >= count for n in DEFAULT_SPACE.sizes):
            problems.append(
                f"training.agents: {count} agents fit no map size of the space "
                f"({min(DEFAULT_SPACE.sizes)}-{max(DEFAULT_SPACE.sizes)}); lower training.agents"
            )
    for where, fits in (
        ("validation", [(n, a) for a, n in val_cells]),
        ("num_agents", [(n, exp.num_agents) for n in DEFAULT_SPACE.sizes]),
        (
            "training.agents",
            [(n, a) for a in exp.training.agents or () for n in DEFAULT_SPACE.sizes if n >= a],
        ),
    ):
        for size, agents in fits:
            try:
                check_fit(size, agents)
            except GenerationError as exc:
                hint = {"validation": "raise validation.min_size", "num_agents": "lower num_agents"}.get(
                    where, "lower training.agents"
                )
                problems.append(f"{where}: {exc} ({hint})")
                break
    return problems


def _small_policy_problems(exp: Experiment) -> list[str]:
    """A small from-scratch policy cannot write configurations: an LLM engineer must be another model."""
    from envengineer.models.small_policy import is_small_policy

    if exp.scripted or exp.engineer.kind not in ("self", "base"):
        return []
    engineer_model = exp.engineer_model(exp.model)
    if engineer_model is None or not is_small_policy(engineer_model):
        return []
    return [
        f"engineer: kind {exp.engineer.kind!r} would ask the small policy {engineer_model!r} for "
        "configurations, which it cannot write; use kind 'base' with model: embedded (or another "
        "language model), kind 'openai', or a non-LLM engineer"
    ]


def plan(experiment: Experiment) -> dict[str, Any]:
    """What a run will do and cost, without doing it: instances, GRPO or SFT steps, evaluation responses.

    ``engineer_answers`` counts every answer asked of an LLM engineer (``engineer.screen`` asks
    ``proposals`` a call), and ``probe_responses`` includes the screen's probe boards.

    ``grpo_steps*`` count GRPO steps only (0 unless ``training.learner`` is grpo), ``sft_steps*`` the rounds'
    SFT steps (0 unless it is sft; the warm-start's are under ``warm_start``); ``None`` per round when the
    training preset cannot be read.
    """
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
    learner = exp.training.learner
    steps_per_round, batch = grpo_steps(exp) if learner == "grpo" else (0, {})
    sft_rounds = exp.trains and learner == "sft"
    sft_per_round = sft_steps(exp) if sft_rounds else 0
    validations = exp.rounds + int(v.start)  # the starting model's validation counts too
    # an sft round first answers training.probe of its boards (what the learnability signals read)
    probes = exp.rounds * min(exp.training.probe, exp.samples_per_round) if sft_rounds else 0
    # engineer.screen: each engineer call asks `proposals` answers, and the policy answers `boards` probe
    # boards of each proposal
    screen = exp.engineer.screen
    asked = screen.proposals if screen else 1
    probes += len(exp.engineer_rounds) * screen.proposals * screen.boards if screen else 0
    p = {
        "name": exp.name,
        "model": exp.policy or exp.model or "embedded default (SmolLM2-135M-Instruct)",
        "rounds": exp.rounds,
        "engineer": exp.engineer.kind,
        "engineer_calls": len(exp.engineer_rounds),
        "engineer_answers": len(exp.engineer_rounds) * asked,
        "context": _context_label(exp),
        "training_instances": exp.rounds * exp.samples_per_round,
        "training_agents": list(exp.training.agents or (exp.num_agents,)),
        "training": "skipped (scripted policy)"
        if exp.scripted
        else ("disabled" if not exp.trains else _LEARNER_LABELS[learner]),
        "grpo_steps_per_round": steps_per_round if exp.trains else 0,
        "grpo_steps": (steps_per_round or 0) * exp.rounds if exp.trains else 0,
        "grpo_batch": batch,
        "sft_steps_per_round": sft_per_round,
        "sft_steps": (sft_per_round or 0) * exp.rounds,
        "warm_start": _warm_start_plan(exp),
        "validation_instances": validation_size,
        "benchmark_instances": benchmark_size,
        "probe_responses": probes,
        "eval_responses": validations * validation_size + benchmark_size + probes,
        "max_new_tokens": exp.evaluation.max_new_tokens,
        "eval_tokens_upper_bound": (validations * validation_size + benchmark_size + probes)
        * exp.evaluation.max_new_tokens,
    }
    p["cpu_seconds"] = cpu_seconds_estimate(exp, p)
    return p


#: What the plan calls each ``training.learner``.
_LEARNER_LABELS = {"grpo": "GRPO", "sft": "SFT", "teach": "teach"}


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

#: The same for the tiny small policy (``policy:tiny``, format ``free-moves``) with ``grpo-small`` (8 x 8
#: completions per step, the in-round probes included) and ``sft-small`` (batch 32, building its dataset
#: included), evaluation in batches of 64 (validation and benchmark answers pooled); the engineer is the
#: embedded SmolLM2-135M. Measured from the demo's ledger with an empty cache, on the machine of earlier
#: sessions; a slower one takes longer (docs/loop.md, "The demo").
SMALL_POLICY_CPU_RATES: dict[str, float] = {
    "grpo_step": 8.4,
    "sft_step": 0.39,
    "eval_answer": 0.071,
    "engineer_answer": 31.2,
    "round_overhead": 5.0,
}

#: (model, GRPO preset, SFT preset) -> the rates measured for them.
_MEASURED: dict[tuple[str | None, str, str], dict[str, float]] = {
    (None, "cpu", "sft-cpu"): CPU_RATES,
    ("policy:tiny", "grpo-small", "sft-small"): SMALL_POLICY_CPU_RATES,
    # the packaged trainee is the same tiny policy; its rounds are SFT steps of the same shape
    ("policy:trainee", "grpo-small", "sft-round"): SMALL_POLICY_CPU_RATES,
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
    learner = exp.training.learner
    if exp.trains and learner == "teach":
        return None  # no rate measured for the teach learner (it stops at its own time limit)
    rates = [
        r
        for (model, grpo, sft), r in _MEASURED.items()
        if exp.model == model
        and (not exp.trains or exp.training.preset == (sft if learner == "sft" else grpo))
        and (not counts["warm_start"] or exp.warm_start.preset == sft)
    ]
    if not rates:
        return None
    r = rates[0]
    seconds = counts["grpo_steps"] * r["grpo_step"] + counts["eval_responses"] * r["eval_answer"]
    seconds += counts["sft_steps"] * r["sft_step"]
    if exp.trains:
        seconds += exp.rounds * r["round_overhead"]
    if counts["warm_start"]:
        seconds += (counts["warm_start"]["steps"] or 0) * r["sft_step"]
    if exp.engineer.is_llm:
        seconds += counts["engineer_answers"] * r["engineer_answer"]
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


def sft_steps(exp: Experiment) -> int | None:
    """SFT optimiser steps per round of ``training.learner: sft`` (``None`` when the preset is unknown).

    As transformers' Trainer counts them: ``ceil(samples / (per_device_train_batch_size * processes))``
    batches an epoch, ``gradient_accumulation_steps`` of them a step (a short last step counts),
    ``ceil(epochs_per_round * steps_per_epoch)`` steps, capped by the preset's ``max_steps`` and
    ``training.max_steps``. 640 boards, one epoch, batch 32: 20 steps.
    """
    try:
        from envengineer.training.presets import load_preset

        sft = dict(load_preset(exp.training.preset, "sft").sft)
    except Exception as exc:  # the plan must print even without the training extra
        log.debug("cannot read the SFT training preset %r: %s", exp.training.preset, exc)
        return None
    world = exp.launch.processes if exp.launch.stages != "inprocess" else 1
    batch = max(int(sft.get("per_device_train_batch_size", 8)), 1) * world
    accum = max(int(sft.get("gradient_accumulation_steps", 1)), 1)
    per_epoch = max(math.ceil(math.ceil(exp.samples_per_round / batch) / accum), 1)
    steps = math.ceil(per_epoch * exp.epochs_per_round)
    for cap in (sft.get("max_steps"), exp.training.max_steps):
        if cap is not None and int(cap) > 0:
            steps = min(steps, int(cap))
    return steps
