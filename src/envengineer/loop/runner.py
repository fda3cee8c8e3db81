"""The round loop (SPEC §5): configuration → data → GRPO round → validation → engineer → next round.

Round ``r``:

1. ``config`` — round 0 uses the random default ``round0_config(seeds.config)``; a later round asks the
   engineer, which reads the validation results of the rounds so far, and applies its projected proposal.
2. ``data`` — ``generate_round`` from the configuration, never drawing a validation or benchmark board.
3. ``train`` — one GRPO round from the previous round's checkpoint (round 0: the starting model).
4. ``validation`` — the round's checkpoint on the validation set.

After the last round the final checkpoint is evaluated on the benchmark. The engineer therefore proposes
after every round but the last (the paper: after rounds 0 and 1 of 3).

Every stage writes its files atomically, then one ledger line (:mod:`envengineer.loop.rundir`). A resumed
run skips the stages in the ledger and rebuilds its state (configurations, checkpoints, history) from the
files, so a run killed at any point continues without redoing or duplicating anything; an evaluation killed
midway resumes its responses file.

The trainer, the evaluator, the engineer and the generator are injectable (:class:`Components`) so that
tests run the whole loop with fakes; :func:`default_components` wires the real ones, imported lazily.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from envengineer.errors import ConfigError
from envengineer.integrations.trackers import log_round, preset_with_report_to
from envengineer.loop.experiment import Experiment, preflight
from envengineer.loop.integrity import Verifier, check_experiment
from envengineer.loop.report import benchmark_table_md
from envengineer.loop.rundir import (
    FINAL_STAGES,
    ROUND_STAGES,
    VALIDATION_SET,
    RunDir,
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    read_json,
)
from envengineer.mapf.config import DEFAULT_SPACE, ConfigSpace, RoundConfig, round0_config
from envengineer.mapf.instance import Instance, load_instances, save_instances

log = logging.getLogger(__name__)


# -- injectable parts --------------------------------------------------------------------------------------
class Trainer(Protocol):
    """One GRPO round; returns a record with ``checkpoint``, ``metrics``, ``steps``, ``seconds``."""

    def __call__(
        self,
        model: str | None,
        instances: Sequence[Instance],
        *,
        out_dir: Path,
        preset: str,
        epochs: float,
        seed: int,
        max_steps: int | None,
    ) -> Any: ...


class WarmStarter(Protocol):
    """A supervised warm-start on the solver's plans; returns what a :class:`Trainer` returns."""

    def __call__(
        self,
        model: str | None,
        instances: Sequence[Instance],
        *,
        out_dir: Path,
        preset: str,
        seed: int,
        max_steps: int | None,
    ) -> Any: ...


class Evaluator(Protocol):
    """Answers every instance with ``model`` and scores them; must resume ``out_dir/responses.jsonl``.

    Returns a ScoreReport (anything with ``to_json()``) or its JSON mapping.
    """

    def __call__(
        self,
        model: str | None,
        instances: Sequence[Instance],
        *,
        out_dir: Path,
        experiment: Experiment,
        seed: int,
        progress: bool,
    ) -> Any: ...


class EngineerFactory(Protocol):
    """The engineer proposing round ``round``'s configuration; ``model``: the current checkpoint."""

    def __call__(
        self, experiment: Experiment, *, model: str | None, round: int, round0: RoundConfig
    ) -> Any: ...


Generator = Callable[..., list[Instance]]


@dataclass
class Components:
    """The parts of the loop that do real work; ``None`` fields take :func:`default_components`' value."""

    trainer: Trainer | None = None
    evaluator: Evaluator | None = None
    engineer_factory: EngineerFactory | None = None
    generator: Generator | None = None
    warm_starter: WarmStarter | None = None
    space: ConfigSpace = DEFAULT_SPACE


def default_components() -> Components:
    """The real trainer (TRL GRPO), evaluator (model backends), engineers and generator."""
    from envengineer.mapf.generator import generate_round

    return Components(
        trainer=_default_trainer,
        evaluator=_default_evaluator,
        engineer_factory=_default_engineer_factory,
        generator=generate_round,
        warm_starter=_default_warm_starter,
    )


def _default_trainer(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: Path,
    preset: str,
    epochs: float,
    seed: int,
    max_steps: int | None,
) -> Any:
    from envengineer.training.grpo import train_round

    return train_round(
        model, instances, out_dir=out_dir, preset=preset, epochs=epochs, seed=seed, max_steps=max_steps
    )


def _default_warm_starter(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: Path,
    preset: str,
    seed: int,
    max_steps: int | None,
) -> Any:
    from envengineer.training.sft import sft

    return sft(model, instances, out_dir=out_dir, preset=preset, seed=seed, max_steps=max_steps)


def _default_evaluator(
    model: str | None,
    instances: Sequence[Instance],
    *,
    out_dir: Path,
    experiment: Experiment,
    seed: int,
    progress: bool,
) -> Any:
    from envengineer.evaluation import evaluate
    from envengineer.models import SamplingParams

    ev = experiment.evaluation
    params = SamplingParams(temperature=ev.temperature, max_new_tokens=ev.max_new_tokens, seed=seed)
    return evaluate(
        load_policy_backend(model, experiment, instances),
        instances,
        out_dir=out_dir,
        params=params,
        batch_size=ev.batch_size,
        resume=True,
        progress=progress,
    )


def load_policy_backend(model: str | None, experiment: Experiment, instances: Sequence[Instance] = ()) -> Any:
    """The chat backend that answers plan prompts for ``model`` (a scripted policy or a checkpoint)."""
    from envengineer.models import load_backend

    if model is not None and model.startswith("scripted:"):
        return load_backend("scripted", model.split(":", 1)[1], instances=instances)
    kind = experiment.evaluation.backend
    return shared_backend(kind, _resolve_model(model), **_model_options(experiment, kind))


def _model_options(experiment: Experiment, kind: str) -> dict[str, Any]:
    ev = experiment.evaluation
    options: dict[str, Any] = {}
    if ev.enable_thinking is not None:
        options["enable_thinking"] = ev.enable_thinking
    if kind == "vllm":
        if ev.gpu_memory_utilization is not None:
            options["gpu_memory_utilization"] = ev.gpu_memory_utilization
        if ev.max_model_len is not None:
            options["max_model_len"] = ev.max_model_len
    return options


#: One loaded model backend, kept between the round's validation and the engineer's proposal (the ``self``
#: engineer asks the checkpoint that was just evaluated), released before training needs the memory.
_SHARED: dict[str, Any] = {}


def shared_backend(kind: str, model: str, **options: Any) -> Any:
    """``load_backend(kind, model, **options)``, reusing the last one when it is the same model."""
    from envengineer.models import load_backend

    key = (kind, model, tuple(sorted(options.items())))
    if _SHARED.get("key") != key:
        release_shared_backend()
        _SHARED["backend"] = load_backend(kind, model, **options)
        _SHARED["key"] = key
    return _SHARED["backend"]


def release_shared_backend() -> None:
    """Drop the kept backend and return its memory (GPU memory too) before training starts."""
    backend = _SHARED.pop("backend", None)
    _SHARED.pop("key", None)
    if backend is None:
        return
    del backend
    import gc
    import sys

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _default_engineer_factory(
    experiment: Experiment, *, model: str | None, round: int, round0: RoundConfig
) -> Any:
    """The engineer of the experiment; ``model`` is the current checkpoint (used by ``self``)."""
    from envengineer.engineer.engineers import make_engineer

    spec = experiment.engineer
    kw: dict[str, Any] = {
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_new_tokens": spec.max_new_tokens,
        "max_retries": spec.retries,
        "constrained": spec.constrained,
        "seed": round_seed(experiment.seeds.evaluation, "engineer", round),
    }
    if spec.kind == "openai":
        options: dict[str, Any] = {
            "base_url": spec.base_url,
            "deadline": spec.request_deadline,
            "max_response_bytes": spec.max_response_bytes,
        }
        if spec.api_key_env:
            options["api_key_env"] = spec.api_key_env
        return make_engineer("openai", model=spec.model, backend_kind="openai", backend_options=options, **kw)
    if spec.kind in ("self", "base"):
        engineer_model = model if spec.kind == "self" else (spec.model or experiment.model)
        if engineer_model is not None and engineer_model.startswith("scripted:"):
            raise ConfigError(
                f"engineer kind {spec.kind!r} needs a language model, but the experiment uses the scripted "
                f"policy {engineer_model!r}; use a non-LLM engineer (fixed, random, threshold) with a "
                "scripted policy, or drop 'policy'"
            )
        from envengineer.loop.stages import engineer_backend

        resolved = _resolve_model(engineer_model)
        kind = engineer_backend(experiment)  # never a vLLM engine in the loop's process when stages hold GPUs
        backend = shared_backend(kind, resolved, **_model_options(experiment, kind))
        return make_engineer(spec.kind, model=resolved, backend=backend, **kw)
    if spec.kind == "fixed":
        return make_engineer("fixed", config=round0)
    if spec.kind == "random":
        return make_engineer("random", seed=experiment.seeds.config)
    return make_engineer("threshold", **spec.options)


def _resolve_model(model: str | None) -> str:
    from envengineer.models import resolve_model

    return resolve_model(model)


#: How each reward shape scores a plan (for the T=full context).
_REWARD_TEXT: dict[str, str] = {
    "sparse": "1 for a valid plan and a bonus for an optimal one, 0 otherwise (as in the paper)",
    "graded": "credit for a parseable, valid and optimal plan, graded between them",
    "dense": "credit for each validity check passed in order and for each agent that ends on its goal",
}
_HYPER_KEYS = (
    "learning_rate",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "temperature",
    "beta",
    "epsilon",
    "loss_type",
    "lr_scheduler_type",
    "max_grad_norm",
)


# -- seeds ------------------------------------------------------------------------------------------------
def round_seed(base: int, purpose: str, r: int) -> int:
    """A 31-bit seed for ``purpose`` in round ``r`` from the tuple ``(base, purpose, r)``, never ``base + r``.

    >>> round_seed(0, "data", 1) != round_seed(0, "data", 0) != round_seed(0, "training", 0)
    True
    """
    code = {
        "data": 1,
        "training": 2,
        "validation": 3,
        "benchmark": 4,
        "engineer": 5,
        "warm_start": 6,
        "start_validation": 7,
    }[purpose]
    return int(np.random.SeedSequence((base, code, r)).generate_state(1)[0] >> 1)


# -- the runner -------------------------------------------------------------------------------------------
@dataclass
class RoundState:
    """What the loop knows about one round, rebuilt from the run directory on resume."""

    index: int
    config: RoundConfig | None = None
    model_in: str | None = None
    checkpoint: str | None = None
    validation: dict[str, Any] | None = None
    rationale: str | None = None
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class LoopRunner:
    """Runs (or resumes) one experiment in one run directory.

    Args:
        experiment: The resolved experiment.
        run_dir: Where the lab notebook lives.
        components: Real or fake parts; missing ones come from :func:`default_components`.
        progress: Show a tqdm bar over the run's stages (round, stage, ETA).
        redo_damaged: On resume, run a finished stage again when a file it wrote is damaged (changed,
            truncated, missing) instead of stopping (:mod:`envengineer.loop.integrity`).
    """

    def __init__(
        self,
        experiment: Experiment,
        run_dir: str | Path,
        *,
        components: Components | None = None,
        progress: bool = False,
        redo_damaged: bool = False,
    ) -> None:
        self.exp = experiment
        self.rd = RunDir(run_dir)
        self.verifier = Verifier(self.rd, redo_damaged=redo_damaged)
        self.comps = _complete(components, experiment, self.rd.root)
        self.progress = progress
        self.space = self.comps.space
        self.rounds: list[RoundState] = []
        self._validation: list[Instance] | None = None
        self._benchmark: list[Instance] | None = None
        self._exclude: frozenset[str] | None = None
        self._round0: RoundConfig | None = None
        self._warm_checkpoint: str | None = None
        self._bar: Any = None

    # -- entry points ---------------------------------------------------------------------------------
    @classmethod
    def start(cls, experiment: Experiment, run_dir: str | Path, **kw: Any) -> LoopRunner:
        """A new run; refuses a directory that already holds a run (use :meth:`resume`)."""
        rd = RunDir(run_dir)
        if rd.experiment_path.exists() or rd.ledger_path.exists():
            raise ConfigError(
                f"{rd.root} already holds a run; continue it with `envengineer run --resume {rd.root}` "
                "or choose another --out"
            )
        preflight(experiment)
        rd.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(rd.experiment_path, experiment.to_yaml())
        return cls(experiment, run_dir, **kw)

    @classmethod
    def resume(cls, run_dir: str | Path, **kw: Any) -> LoopRunner:
        """Continue the run in ``run_dir`` from its resolved ``experiment.yaml`` and ledger."""
        from envengineer.loop.experiment import load_experiment

        rd = RunDir(run_dir)
        if not rd.experiment_path.exists():
            raise ConfigError(
                f"{rd.root} holds no run ({rd.experiment_path.name} missing); start one with "
                "`envengineer run EXPERIMENT.yaml --out DIR`"
            )
        check_experiment(rd)  # the experiment is frozen: an edited file is refused
        return cls(load_experiment(rd.experiment_path), run_dir, **kw)

    @property
    def round0(self) -> RoundConfig:
        if self._round0 is None:
            self._round0 = round0_config(
                self.exp.seeds.config,
                self.space,
                num_agents=self.exp.num_agents,
                num_samples=self.exp.samples_per_round,
            )
        return self._round0

    @property
    def start_model(self) -> str | None:
        """The model of round 0: the scripted policy, the warm-start checkpoint or the experiment's model."""
        if self.exp.policy:
            return self.exp.policy
        if self._warm_checkpoint is not None:
            return self._warm_checkpoint
        return self.exp.model

    def run(self) -> dict[str, Any]:
        """Run every stage not yet in the ledger; returns the final benchmark summary."""
        exp = self.exp
        done = self.rd.done()
        warm = exp.warm_start.enabled and not exp.scripted
        start = exp.validation.start
        total = exp.rounds * len(ROUND_STAGES) + len(FINAL_STAGES) + int(warm) + int(start)
        already = len(done)
        if already:
            log.info("resuming %s: %d of %d stages already finished", self.rd.root, already, total)
        self._bar = _progress_bar(total, already, self.progress, exp.name)
        try:
            self._check_sets()
            if warm:
                self._stage(
                    None,
                    "warm_start",
                    self._stage_warm_start,
                    lambda e: setattr(self, "_warm_checkpoint", e.info["checkpoint"]),
                )
            if start:
                self._stage(None, "start_validation", self._stage_start_validation, lambda e: None)
            for r in range(exp.rounds):
                self._round(r)
            summary = self._final()
        finally:
            release_shared_backend()
            if self._bar is not None:
                self._bar.close()
        return summary

    # -- one round ------------------------------------------------------------------------------------
    def _round(self, r: int) -> None:
        state = RoundState(index=r)
        self.rounds.append(state)
        state.model_in = self.rounds[r - 1].checkpoint if r > 0 else self.start_model
        self._stage(r, "config", lambda: self._stage_config(state), lambda e: self._load_config(state, e))
        self._stage(r, "data", lambda: self._stage_data(state), lambda e: None)
        self._stage(r, "train", lambda: self._stage_train(state), lambda e: self._load_train(state, e))
        self._stage(
            r, "validation", lambda: self._stage_validation(state), lambda e: self._load_validation(state)
        )

    def _stage(
        self,
        r: int | None,
        stage: str,
        run: Callable[[], tuple[dict[str, Any], dict[str, Any]] | tuple[dict[str, Any], dict[str, Any], str]],
        load: Callable[[Any], None],
    ) -> None:
        entry = old = self.rd.done().get((r, stage))
        label = f"round {r}/{self.exp.rounds - 1} {stage}" if r is not None else stage
        if entry is not None and not self.verifier.usable(entry):
            entry = None  # damaged (redo_damaged) or built on a redone stage: run it again
        if entry is not None:
            load(entry)
            log.debug("%s: finished earlier, skipped", label)
            return
        if self._bar is not None:
            self._bar.set_postfix_str(label)
        log.info("%s: %s", self.exp.name, label)
        t0 = time.perf_counter()
        out = run()
        paths, info = out[0], out[1]
        status = out[2] if len(out) > 2 else "done"  # type: ignore[misc]
        new = self.rd.record(
            r, stage, seconds=time.perf_counter() - t0, paths=paths, info=info, status=status
        )
        if old is not None:
            self.verifier.redone(old, new)
        if self._bar is not None:
            self._bar.update(1)

    # warm start ---------------------------------------------------------------------------------------
    def _stage_warm_start(self) -> tuple[dict[str, Any], dict[str, Any]]:
        ws = self.exp.warm_start
        d = self.rd.root / "warm_start"
        config = RoundConfig.model_validate(
            {
                "sizes": {
                    n: {"data_ratio": 1.0, "hole_ratio": ws.hole_ratio, "wait_ratio": ws.wait_ratio}
                    for n in (ws.sizes or self.space.sizes)
                },
                "num_agents": self.exp.num_agents,
                "num_samples": ws.samples,
            }
        )
        data_seed, train_seed = (
            (self.exp.seeds.data, self.exp.seeds.training) if ws.seed is None else (ws.seed, ws.seed)
        )
        seed = round_seed(data_seed, "warm_start", 0)
        instances = self.comps.generator(
            config, seed, split="train", exclude=self.exclude, progress=self.progress
        )
        atomic_write_text(d / "config.yaml", config.to_yaml())
        atomic_write_jsonl(d / "manifest.jsonl", (_manifest_row(i) for i in instances))
        cache = _warm_start_cache_dir(self.exp, instances) if ws.cache else None
        if cache is not None and (cache / "record.json").exists():
            record = read_json(cache / "record.json")
            record["cached_from"] = str(cache)
            log.info("warm-start: reusing %s (same model, settings, seeds and data)", cache)
        else:
            release_shared_backend()
            result = self.comps.warm_starter(
                self.exp.model,
                instances,
                out_dir=d,
                preset=preset_with_report_to(ws.preset, self.exp.training.report_to, "sft"),
                seed=round_seed(train_seed, "warm_start", 0),
                max_steps=ws.max_steps,
            )
            record = _train_record(result, model_in=self.exp.model, seed=seed, preset=ws.preset, epochs=None)
            if cache is not None:
                record = _store_warm_start(cache, record)
        atomic_write_json(d / "metrics.json", record)
        self._warm_checkpoint = record["checkpoint"]
        return {"metrics": d / "metrics.json", "checkpoint": record["checkpoint"]}, {
            "checkpoint": record["checkpoint"],
            "steps": record["steps"],
            "instances": len(instances),
        }

    # config -------------------------------------------------------------------------------------------
    def _stage_config(self, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
        r = state.index
        d = self.rd.round_dir(r)
        if r == 0:
            config = self.round0
            raw: Any = {"source": "round0 random default", "seed": self.exp.seeds.config}
            projection: dict[str, Any] = {
                "source": "round0",
                "raw": raw,
                "changes": [],
                "errors": [],
                "fell_back": False,
                "config": config.model_dump(mode="json"),
            }
            state.source = "round0"
            info: dict[str, Any] = {"source": "round0"}
        else:
            decision = self._ask_engineer(r)
            record = decision.to_dict() if hasattr(decision, "to_dict") else _jsonable(decision)
            config = _get(decision, "config")
            if not isinstance(config, RoundConfig):
                config = RoundConfig.model_validate(config)
            if (config.num_agents, config.num_samples) != (self.exp.num_agents, self.exp.samples_per_round):
                raise ConfigError(
                    f"round {r}: the engineer changed num_agents/num_samples, which the experiment "
                    "sets; fix the engineer (projection keeps them)"
                )
            raw = record.get("raw_proposal")
            state.source = f"engineer:{self.exp.engineer.kind}"
            projection = {
                "source": state.source,
                "raw": raw,
                "changes": list(record.get("changes") or []),
                "errors": list(record.get("errors") or []),
                "issues": list((record.get("details") or {}).get("issues") or []),
                "fell_back": bool(record.get("fell_back")),
                "fallback_reason": record.get("fallback_reason"),
                "attempts": len(record.get("attempts") or []),
                "config": config.model_dump(mode="json"),
            }
            self._write_engineer(d / "engineer", record)
            state.rationale = record.get("rationale")
            info = {
                "source": state.source,
                "fell_back": projection["fell_back"],
                "attempts": projection["attempts"],
                "changes": len(projection["changes"]),
                "seconds": record.get("seconds"),
            }
        atomic_write_json(d / "proposal.raw.json", raw)
        atomic_write_json(d / "projection.json", projection)
        atomic_write_text(d / "config.applied.yaml", config.to_yaml())
        state.config = config
        paths: dict[str, Any] = {"config": d / "config.applied.yaml", "projection": d / "projection.json"}
        if (d / "engineer" / "rationale.txt").exists():  # read back on resume (the S module): hashed too
            paths["rationale"] = d / "engineer" / "rationale.txt"
        return paths, info

    def _load_config(self, state: RoundState, entry: Any) -> None:
        d = self.rd.round_dir(state.index)
        state.config = RoundConfig.load(d / "config.applied.yaml")
        state.source = str(entry.info.get("source", ""))
        rationale = d / "engineer" / "rationale.txt"
        state.rationale = rationale.read_text(encoding="utf-8").strip() if rationale.exists() else None

    def _ask_engineer(self, r: int) -> Any:
        prev = self.rounds[r - 1]
        current_model = prev.checkpoint
        engineer = self.comps.engineer_factory(self.exp, model=current_model, round=r, round0=self.round0)
        request = self.build_request(r)
        decision = engineer.propose(request)
        if _get(decision, "config", None) is None:
            raise ConfigError(
                f"the {self.exp.engineer.kind} engineer returned no configuration for round {r}"
            )
        return decision

    def build_request(self, r: int) -> Any:
        """The engineer's input for proposing round ``r``: everything known once round ``r - 1`` finished."""
        from envengineer.engineer.context import HistoryEntry, context_spec
        from envengineer.engineer.engineers import EngineerRequest

        prev = self.rounds[r - 1]
        history = [
            HistoryEntry.from_report(s.index, s.config, s.validation, is_default=s.source == "round0")
            for s in self.rounds[: r - 1]
        ]
        report = {k: v for k, v in (prev.validation or {}).items() if k != "verdicts"} or None
        return EngineerRequest(
            round_index=r - 1,
            config=prev.config,
            report=report,
            space=self.space,
            history=history,
            previous_rationale=prev.rationale,
            training=self.training_details(r - 1),
            context=context_spec(self.exp.engineer.context.switches()),
        )

    def training_details(self, r: int) -> dict[str, Any]:
        """Facts for the T module: bookkeeping keys always, the RL details (read only by ``T=full``) after.

        Bookkeeping: ``total_rounds``, ``epochs``, ``num_samples``, ``num_agents``. Full adds ``algorithm``,
        ``objective``, ``reward`` and ``hyperparameters`` (from the training preset when it is readable).
        """
        exp = self.exp
        details: dict[str, Any] = {
            "total_rounds": exp.rounds,
            "epochs": exp.epochs_per_round,
            "num_samples": exp.samples_per_round,
            "num_agents": exp.num_agents,
            "algorithm": "GRPO (group relative policy optimisation, TRL GRPOTrainer)",
            "objective": "maximise the mean reward of sampled plans relative to their group "
            "(advantage = reward minus the group mean, divided by the group's standard deviation)",
        }
        try:
            from envengineer.training.presets import load_preset

            preset = load_preset(exp.training.preset, "grpo")
        except Exception as exc:  # no training extra or an unreadable preset: bookkeeping works
            log.debug("training preset not readable for the full training details: %s", exc)
            return details
        shape = getattr(preset, "reward_shape", None)
        details["reward"] = f"{shape}: " + _REWARD_TEXT.get(
            str(shape), "the testbed's reward on validated plans"
        )
        hyper = {k: v for k, v in dict(getattr(preset, "grpo", {}) or {}).items() if k in _HYPER_KEYS}
        hyper["max_completion_length"] = getattr(preset, "max_completion_length", None)
        lora = getattr(preset, "lora", None)
        if lora is not None and getattr(lora, "enabled", False):
            hyper["lora_rank"] = lora.r
        if exp.training.max_steps:
            hyper["max_steps"] = exp.training.max_steps
        details["hyperparameters"] = hyper
        return details

    def _write_engineer(self, d: Path, record: dict[str, Any]) -> None:
        """The engineer's notebook: prompt (messages and readable text), responses, rationale, attempts."""
        prompt = record.get("prompt")
        if prompt:
            atomic_write_json(d / "prompt.json", prompt)
            atomic_write_text(
                d / "prompt.md",
                "\n\n".join(f"## {m.get('role', '?')}\n\n{m.get('content', '')}" for m in prompt) + "\n",
            )
        if record.get("responses"):
            atomic_write_json(d / "responses.json", record["responses"])
        if record.get("rationale"):
            atomic_write_text(d / "rationale.txt", str(record["rationale"]) + "\n")
        atomic_write_json(d / "attempts.json", record.get("attempts") or [])
        atomic_write_json(d / "decision.json", record)

    # data ---------------------------------------------------------------------------------------------
    def _stage_data(self, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
        r = state.index
        d = self.rd.round_dir(r) / "dataset"
        seed = round_seed(self.exp.seeds.data, "data", r)
        instances = self.comps.generator(
            state.config, seed, split="train", exclude=self.exclude, progress=self.progress
        )
        clash = {i.board_hash() for i in instances} & self.exclude
        if clash:
            raise ConfigError(f"round {r}: {len(clash)} training boards are validation or benchmark boards")
        save_instances(instances, d / "instances.jsonl.gz")
        atomic_write_jsonl(d / "manifest.jsonl", (_manifest_row(i) for i in instances))
        by_size: dict[int, int] = {}
        for inst in instances:
            by_size[inst.size] = by_size.get(inst.size, 0) + 1
        info = {
            "seed": seed,
            "instances": len(instances),
            "per_size": {str(k): v for k, v in sorted(by_size.items())},
            "needs_wait": sum(bool(i.needs_wait) for i in instances),
        }
        atomic_write_json(d / "summary.json", info)
        return {"manifest": d / "manifest.jsonl", "instances": d / "instances.jsonl.gz"}, info

    def _instances(self, r: int) -> list[Instance]:
        return load_instances(self.rd.round_dir(r) / "dataset" / "instances.jsonl.gz")

    # train --------------------------------------------------------------------------------------------
    def _stage_train(self, state: RoundState) -> tuple[dict[str, Any], dict[str, Any], str]:
        r = state.index
        d = self.rd.round_dir(r) / "train"
        exp = self.exp
        if not exp.trains:
            reason = (
                "scripted policy: nothing to train" if exp.scripted else "training disabled in the experiment"
            )
            state.checkpoint = state.model_in
            atomic_write_json(
                d / "metrics.json",
                {
                    "skipped": reason,
                    "checkpoint": state.checkpoint,
                    "model_in": state.model_in,
                    "metrics": {},
                    "steps": 0,
                    "seconds": 0.0,
                },
            )
            return (
                {"metrics": d / "metrics.json"},
                {"skipped": reason, "checkpoint": state.checkpoint},
                "skipped",
            )
        seed = round_seed(exp.seeds.training, "training", r)
        release_shared_backend()
        result = self.comps.trainer(
            state.model_in,
            self._instances(r),
            out_dir=d,
            preset=preset_with_report_to(exp.training.preset, exp.training.report_to),
            epochs=exp.epochs_per_round,
            seed=seed,
            max_steps=exp.training.max_steps,
        )
        record = _train_record(
            result,
            model_in=state.model_in,
            seed=seed,
            preset=exp.training.preset,
            epochs=exp.epochs_per_round,
        )
        checkpoint = record["checkpoint"]
        atomic_write_json(d / "metrics.json", record)
        state.checkpoint = checkpoint
        return (
            {"metrics": d / "metrics.json", "checkpoint": checkpoint},
            {"checkpoint": checkpoint, "steps": record["steps"]},
            "done",
        )

    def _load_train(self, state: RoundState, entry: Any) -> None:
        state.checkpoint = entry.info.get("checkpoint", state.model_in)

    # validation ---------------------------------------------------------------------------------------
    def _stage_validation(self, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
        r = state.index
        files, scores = self._validate(state.checkpoint, self.rd.round_dir(r) / "validation", "validation", r)
        state.validation = scores
        log_round(self.exp.training.report_to, self.rd.root, r, scores, state.config, state.rationale)
        return files, dict(scores.get("summary", {}))

    def _stage_start_validation(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The starting model (the warm-start checkpoint, else the experiment model) on the validation set."""
        files, scores = self._validate(
            self.start_model, self.rd.root / "start" / "validation", "start_validation", 0
        )
        return files, dict(scores.get("summary", {}))

    def _validate(
        self, model: str | None, d: Path, purpose: str, r: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Answer the validation set with ``model`` into ``d``; the stage's files and the scores."""
        report = self.comps.evaluator(
            model,
            self.validation_set,
            out_dir=d,
            experiment=self.exp,
            seed=round_seed(self.exp.seeds.evaluation, purpose, r),
            progress=self.progress,
        )
        scores = _write_scores(d / "scores.json", report)
        return {"scores": d / "scores.json", "responses": d / "responses.jsonl"}, scores

    def _load_validation(self, state: RoundState) -> None:
        state.validation = read_json(self.rd.round_dir(state.index) / "validation" / "scores.json")

    # final --------------------------------------------------------------------------------------------
    def _final(self) -> dict[str, Any]:
        model = self.rounds[-1].checkpoint if self.rounds else self.start_model
        d = self.rd.benchmark_dir
        holder: dict[str, Any] = {}

        def run() -> tuple[dict[str, Any], dict[str, Any]]:
            report = self.comps.evaluator(
                model,
                self.benchmark_set,
                out_dir=d,
                experiment=self.exp,
                seed=round_seed(self.exp.seeds.evaluation, "benchmark", 0),
                progress=self.progress,
            )
            scores = _write_scores(d / "scores.json", report)
            atomic_write_text(
                d / "table.md", benchmark_table_md(scores, title=self.exp.name, model=model) + "\n"
            )
            holder["scores"] = scores
            return {"scores": d / "scores.json", "table": d / "table.md"}, {
                "model": model,
                **scores["summary"],
            }

        self._stage(None, "benchmark", run, lambda e: holder.update(scores=read_json(d / "scores.json")))
        return holder["scores"]["summary"]

    # the fixed sets -----------------------------------------------------------------------------------
    def _check_sets(self) -> None:
        """An empty validation or benchmark set is an error before anything runs (no run with n = 0)."""
        if self.exp.rounds > 0 and not self.validation_set:
            v = self.exp.validation
            raise ConfigError(
                f"the validation set is empty (agents {list(v.agents)}, max_size {v.max_size}); "
                "choose agent counts that fit the sizes (agents <= max_size)"
            )
        if not self.benchmark_set:
            raise ConfigError(
                "the benchmark set is empty; check evaluation.benchmark_path, benchmark_per_cell and "
                "benchmark_limit"
            )

    @property
    def validation_set(self) -> list[Instance]:
        """The validation set, built once per run and kept in ``validation_set.jsonl`` (resume reuses it)."""
        if self._validation is None:
            path = self.rd.root / VALIDATION_SET
            if path.exists() and not self.verifier.check_validation_set(VALIDATION_SET):
                path.unlink()  # damaged, and redo_damaged: rebuilt below
            if path.exists():
                self._validation = load_instances(path)
            else:
                from envengineer.mapf.benchmark import build_set

                v = self.exp.validation
                log.info("building the validation set (%d per cell, agents %s)", v.per_cell, list(v.agents))
                built = build_set(
                    seed=v.seed,
                    split="validation",
                    per_cell=v.per_cell,
                    agents=v.agents,
                    max_size=v.max_size,
                    min_size=v.min_size,
                    exclude={i.board_hash() for i in self._full_benchmark()},
                    progress=self.progress,
                )
                self._validation = select_benchmark(built, None, v.limit)
                save_instances(self._validation, path)
        return self._validation

    @property
    def benchmark_set(self) -> list[Instance]:
        """The benchmark, or the part ``benchmark_per_cell`` and ``benchmark_limit`` keep (CPU scale)."""
        if self._benchmark is None:
            ev = self.exp.evaluation
            self._benchmark = select_benchmark(
                self._full_benchmark(), ev.benchmark_per_cell, ev.benchmark_limit
            )
        return self._benchmark

    def _full_benchmark(self) -> list[Instance]:
        if self.exp.evaluation.benchmark_path:
            return load_instances(self.exp.evaluation.benchmark_path)
        from envengineer.mapf.benchmark import load_benchmark

        return load_benchmark()

    @property
    def exclude(self) -> frozenset[str]:
        """Board hashes no training instance may have: the validation set and the whole benchmark."""
        if self._exclude is None:
            self._exclude = frozenset(i.board_hash() for i in self.validation_set) | frozenset(
                i.board_hash() for i in self._full_benchmark()
            )
        return self._exclude


def run_experiment(
    experiment: Experiment | None,
    run_dir: str | Path,
    *,
    resume: bool = False,
    components: Components | None = None,
    progress: bool = False,
    redo_damaged: bool = False,
) -> dict[str, Any]:
    """Start (or resume) a run; returns the benchmark summary. See :class:`LoopRunner`."""
    if resume:
        runner = LoopRunner.resume(
            run_dir, components=components, progress=progress, redo_damaged=redo_damaged
        )
        if experiment is not None and experiment != runner.exp:
            raise ConfigError(
                f"{run_dir}: the experiment differs from the run's experiment.yaml; resume "
                "without an experiment file, or start a new run with --out"
            )
    else:
        if experiment is None:
            raise ConfigError("a new run needs an experiment file")
        runner = LoopRunner.start(experiment, run_dir, components=components, progress=progress)
    return runner.run()


# -- helpers ----------------------------------------------------------------------------------------------
def select_benchmark(
    instances: Sequence[Instance], per_cell: int | None, limit: int | None = None
) -> list[Instance]:
    """The benchmark part ``benchmark_per_cell`` / ``benchmark_limit`` keep: a seeded, stratified subset.

    See :func:`envengineer.mapf.benchmark.draw_subset`: every cell keeps its share of instances that need a
    wait, and the same arguments give the same subset in every run.
    """
    from envengineer.mapf.benchmark import draw_subset

    return draw_subset(instances, per_cell=per_cell, limit=limit)


def _warm_start_cache_dir(exp: Experiment, instances: Sequence[Instance]) -> Path:
    """Where a warm-start with exactly these settings, seeds and data is kept between runs."""
    import hashlib

    from envengineer import __version__
    from envengineer.models.embedded import cache_root

    try:
        from envengineer.training.presets import load_preset

        preset = load_preset(exp.warm_start.preset, "sft").model_dump(mode="json")
    except Exception:  # the preset's name stands in when it cannot be read here
        preset = exp.warm_start.preset
    key = {
        "version": __version__,
        "model": exp.model,
        "warm_start": exp.warm_start.model_dump(mode="json", exclude={"enabled", "cache"}),
        "preset": preset,
        "seed": exp.seeds.training if exp.warm_start.seed is None else exp.warm_start.seed,
        "data": hashlib.sha256("".join(i.to_json() for i in instances).encode()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "warm_start" / digest


def _store_warm_start(cache: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Copy the warm-start checkpoint into the cache (atomically) and return the record pointing there."""
    import shutil

    source = Path(record["checkpoint"])
    if not source.is_dir():
        return record
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".checkpoint.{time.time_ns()}.tmp"
    shutil.copytree(source, tmp)
    target = cache / "checkpoint"
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    cached = {**record, "checkpoint": str(target), "trained_in": str(source)}
    atomic_write_json(cache / "record.json", cached)
    log.info("warm-start checkpoint kept in %s for runs with the same settings", target)
    return record


def _write_scores(path: Path, report: Any) -> dict[str, Any]:
    """The report's JSON, written to ``path`` unless the evaluator already wrote exactly that."""
    scores = report.to_json() if hasattr(report, "to_json") else dict(report)
    if not (path.exists() and read_json(path) == json.loads(json.dumps(scores))):
        atomic_write_json(path, scores)
    return scores


def _train_record(
    result: Any, *, model_in: str | None, seed: int, preset: str, epochs: float | None
) -> dict[str, Any]:
    return {
        "model_in": model_in,
        "checkpoint": str(_get(result, "checkpoint")),
        "seed": seed,
        "preset": preset,
        "epochs": epochs,
        "steps": int(_get(result, "steps", 0) or 0),
        "seconds": float(_get(result, "seconds", 0.0) or 0.0),
        "metrics": _jsonable(_get(result, "metrics", {}) or {}),
    }


def _manifest_row(inst: Instance) -> dict[str, Any]:
    return {
        "id": inst.id,
        "seed": list(inst.seed),
        "board_hash": inst.board_hash(),
        "size": inst.size,
        "num_agents": inst.num_agents,
        "hole_ratio": round(inst.hole_ratio, 4),
        "needs_wait": inst.needs_wait,
        "optimal_soc": inst.optimal_soc,
    }


def _get(obj: Any, name: str, *default: Any) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, *default) if default else obj[name]
    return getattr(obj, name, *default)


def _jsonable(obj: Any) -> Any:
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if hasattr(obj, "item"):
        return obj.item()
    return repr(obj)


def _complete(components: Components | None, experiment: Experiment, root: Path) -> Components:
    """Fill missing parts: the experiment's subprocess stages (``launch``), then the in-process defaults."""
    from envengineer.loop.stages import subprocess_components

    comps = replace(components) if components is not None else Components()
    missing = [f.name for f in fields(Components) if f.name != "space" and getattr(comps, f.name) is None]
    if missing:
        launched = subprocess_components(experiment, root)
        defaults = default_components()
        for name in missing:
            setattr(comps, name, launched.get(name, getattr(defaults, name)))
    return comps


def _progress_bar(total: int, initial: int, enabled: bool, name: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="stage", dynamic_ncols=True)
