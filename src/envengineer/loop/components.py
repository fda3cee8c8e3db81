"""The loop's parts that do real work, behind small protocols, and their default wiring.

The round learners (GRPO, SFT, teach), the warm starter, the evaluator, the engineer factory and the
generator are injectable (:class:`Components`) so that tests run the whole loop with fakes;
:func:`default_components` wires the real ones, imported lazily. One loaded model backend is shared
between a round's validation and the ``self`` engineer (:func:`shared_backend`) and released before
training needs the memory.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.launch import engineer_backend, subprocess_components
from envengineer.loop.seeds import round_seed
from envengineer.mapf.config import DEFAULT_SPACE, ConfigSpace, RoundConfig
from envengineer.mapf.instance import Instance

log = logging.getLogger(__name__)


class Trainer(Protocol):
    """One training round (GRPO, or SFT for ``training.learner: sft``); returns a record with
    ``checkpoint``, ``metrics``, ``steps``, ``seconds``."""

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
    """The engineer proposing round ``round``'s configuration; ``model``: the current checkpoint.

    ``seed`` is passed only by ``engineer.screen`` (one per proposal): the sampling seed of an LLM engineer,
    the base seed of the random one; the loop calls without it otherwise, so a factory may leave it out.
    """

    def __call__(
        self,
        experiment: Experiment,
        *,
        model: str | None,
        round: int,
        round0: RoundConfig,
        seed: int | None = None,
    ) -> Any: ...


Generator = Callable[..., list[Instance]]


@dataclass
class Components:
    """The parts of the loop that do real work; ``None`` fields take :func:`default_components`' value."""

    trainer: Trainer | None = None
    sft_trainer: Trainer | None = None
    teacher: Trainer | None = None
    evaluator: Evaluator | None = None
    engineer_factory: EngineerFactory | None = None
    generator: Generator | None = None
    warm_starter: WarmStarter | None = None
    space: ConfigSpace = DEFAULT_SPACE


def default_components() -> Components:
    """The real learners (TRL GRPO, TRL SFT, teach), evaluator (model backends), engineers and generator."""
    from envengineer.mapf.generator import generate_round

    return Components(
        trainer=_lazy("envengineer.training.grpo", "train_round"),
        sft_trainer=_lazy("envengineer.training.sft", "sft"),  # the warm-start's learner on a round's boards
        teacher=_lazy("envengineer.training.teach", "teach_round"),
        evaluator=_default_evaluator,
        engineer_factory=_default_engineer_factory,
        generator=generate_round,
        warm_starter=_lazy("envengineer.training.sft", "sft"),
    )


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported at its first call: torch and TRL load only when a stage trains."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"{module}.{name}"
    return call


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
    experiment: Experiment,
    *,
    model: str | None,
    round: int,
    round0: RoundConfig,
    seed: int | None = None,
) -> Any:
    """The engineer of the experiment; ``model`` is the current checkpoint (used by ``self``); ``seed``
    (a screen's proposal) replaces the round's sampling seed, and the random engineer's base seed."""
    from envengineer.engineer.engineers import make_engineer

    spec = experiment.engineer
    kw: dict[str, Any] = {
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_new_tokens": spec.max_new_tokens,
        "max_retries": spec.retries,
        "constrained": spec.constrained,
        "answer": spec.answer,
        "seed": round_seed(experiment.seeds.evaluation, "engineer", round) if seed is None else seed,
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
        engineer_model = experiment.engineer_model(model)
        if engineer_model is not None and engineer_model.startswith("scripted:"):
            raise ConfigError(experiment.scripted_engineer_problem() or f"{engineer_model} is no model")
        resolved = _resolve_model(engineer_model)
        kind = engineer_backend(experiment)  # never a vLLM engine in the loop's process when stages hold GPUs
        backend = shared_backend(kind, resolved, **_model_options(experiment, kind))
        return make_engineer(spec.kind, model=resolved, backend=backend, **kw)
    if spec.kind == "fixed":
        return make_engineer("fixed", config=round0)
    if spec.kind == "random":
        return make_engineer("random", seed=experiment.seeds.round0 if seed is None else seed)
    return make_engineer(spec.kind, **spec.options)  # threshold or learnability


def _resolve_model(model: str | None) -> str:
    from envengineer.models import resolve_model

    return resolve_model(model)


def complete_components(components: Components | None, experiment: Experiment, root: Path) -> Components:
    """Fill missing parts: the experiment's subprocess stages (``launch``), then the in-process defaults."""
    comps = replace(components) if components is not None else Components()
    missing = [f.name for f in fields(Components) if f.name != "space" and getattr(comps, f.name) is None]
    if missing:
        launched = subprocess_components(experiment, root)
        defaults = default_components()
        for name in missing:
            setattr(comps, name, launched.get(name, getattr(defaults, name)))
    return comps
