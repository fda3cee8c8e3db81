"""What an engineer reads and what it decides: :class:`EngineerRequest` in, :class:`EngineerDecision` out.

Plain data shared by every engineer (:mod:`.engineers`, :mod:`.curriculum`) and by the prompt that renders a
request (:mod:`.prompt`); it imports no engineer.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from envengineer.engineer.context import FINAL, ContextSpec, HistoryEntry, context_spec
from envengineer.errors import ConfigError
from envengineer.mapf.config import DEFAULT_SPACE, ConfigSpace, RoundConfig

EngineerKind = Literal["self", "base", "openai", "fixed", "random", "threshold", "learnability"]


@dataclass(frozen=True)
class EngineerRequest:
    """Everything an engineer may read after a round (the context switches decide what LLMs see).

    Attributes:
        round_index: The round that just finished (0 is the first); the decision is for ``round_index + 1``.
        config: The configuration that round trained on (the "previous" configuration for projection).
        report: The round's validation ScoreReport JSON (``summary``, ``table``, ``failures``).
        space: The legal configuration space.
        history: Earlier rounds (``round_index`` below this one), the round-0 default marked ``is_default``.
        previous_rationale: The rationale of the previous accepted proposal (the S module), or None.
        training: Training details for the T module: ``total_rounds``, ``epochs``, ``num_samples``,
            ``num_agents`` (bookkeeping); ``algorithm``, ``objective``, ``reward``, ``hyperparameters``
            (full).
        context: Which context modules an LLM engineer reads; a :class:`ContextSpec` or a variant name.
        sampled: What the round's training sampled, per map size (``metrics.json["sampled"]`` of the
            train stage: ``completions``, ``valid`` and ``optimal`` rates as fractions, ``zero_std``, the
            share of GRPO groups without reward variance), or None (no training, or not recorded). Read by
            the ``learnability`` baseline and, with the L module, by LLM engineers.
    """

    round_index: int
    config: RoundConfig
    report: Mapping[str, Any] | None
    space: ConfigSpace = DEFAULT_SPACE
    history: Sequence[HistoryEntry] = ()
    previous_rationale: str | None = None
    training: Mapping[str, Any] = field(default_factory=dict)
    context: ContextSpec = FINAL
    sampled: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.round_index, bool)
            or not isinstance(self.round_index, int)
            or self.round_index < 0
        ):
            raise ConfigError(
                f"round_index must be a non-negative int (the round just finished), got {self.round_index!r}"
            )
        object.__setattr__(self, "history", tuple(self.history))
        object.__setattr__(self, "context", context_spec(self.context))
        object.__setattr__(self, "training", dict(self.training or {}))


@dataclass(frozen=True)
class Attempt:
    """One request to a model and what came of it."""

    index: int
    messages: tuple[dict[str, str], ...]
    response: str
    errors: tuple[str, ...]
    accepted: bool
    rationale: str = ""
    proposal: Any = None
    source: str = "none"
    completion_tokens: int | None = None
    backend_error: str | None = None
    seed: int | None = None
    seconds: float = 0.0
    issues: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "messages": [dict(m) for m in self.messages],
            "response": self.response,
            "errors": list(self.errors),
            "issues": list(self.issues),
            "accepted": self.accepted,
            "rationale": self.rationale,
            "proposal": jsonable(self.proposal),
            "source": self.source,
            "completion_tokens": self.completion_tokens,
            "backend_error": self.backend_error,
            "seed": self.seed,
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True)
class EngineerDecision:
    """What an engineer decided for the next round, and how.

    Attributes:
        engineer: The engineer's name.
        round_index: The round that just finished; ``config`` is for ``round_index + 1``.
        config: The applied (projected) configuration.
        previous: The configuration of the round that just finished.
        raw_proposal: The configuration as the engineer wrote it (data), or None.
        changes: What projection changed, in words.
        rationale: The engineer's rationale (None when there is none or the engineer fell back).
        attempts: Every model request (LLM engineers), in order.
        fell_back: True when no acceptable proposal came and the previous configuration was kept.
        fallback_reason: Why, when ``fell_back``.
        context: The context switches used (LLM engineers).
        details: Engineer-specific facts (seeds, ladder moves, ...), JSON-serialisable.
        seconds: Wall-clock time of the decision.
    """

    engineer: str
    round_index: int
    config: RoundConfig
    previous: RoundConfig
    raw_proposal: Any = None
    changes: tuple[str, ...] = ()
    rationale: str | None = None
    attempts: tuple[Attempt, ...] = ()
    fell_back: bool = False
    fallback_reason: str | None = None
    context: ContextSpec | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def prompt(self) -> list[dict[str, str]] | None:
        """The messages of the first attempt (None for non-LLM engineers)."""
        return [dict(m) for m in self.attempts[0].messages] if self.attempts else None

    @property
    def responses(self) -> list[str]:
        return [a.response for a in self.attempts]

    @property
    def errors(self) -> list[str]:
        """Every error of every attempt, prefixed with the attempt number."""
        return [f"attempt {a.index + 1}: {e}" for a in self.attempts for e in a.errors]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record (``json.dumps(d, allow_nan=False)`` works) for the run directory."""
        return {
            "engineer": self.engineer,
            "round_index": self.round_index,
            "next_round": self.round_index + 1,
            "config": self.config.model_dump(mode="json"),
            "previous": self.previous.model_dump(mode="json"),
            "raw_proposal": jsonable(self.raw_proposal),
            "changes": list(self.changes),
            "rationale": self.rationale,
            "fell_back": self.fell_back,
            "fallback_reason": self.fallback_reason,
            "context": None
            if self.context is None
            else {**self.context.model_dump(), "label": self.context.label},
            "prompt": self.prompt,
            "responses": self.responses,
            "errors": self.errors,
            "attempts": [a.to_dict() for a in self.attempts],
            "details": jsonable(self.details),
            "seconds": round(self.seconds, 4),
        }


def jsonable(obj: Any) -> Any:
    """Parsed model data made JSON-safe: string keys, lists for tuples/sets, strings for anything else.

    >>> jsonable({3: {1.5, 0.5}, "x": float("nan")})
    {'3': [0.5, 1.5], 'x': 'nan'}
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((jsonable(v) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if hasattr(obj, "model_dump"):
        return jsonable(obj.model_dump(mode="json"))
    return str(obj)


class Engineer(Protocol):
    """Anything that turns a finished round into the next round's configuration."""

    name: str

    def propose(self, request: EngineerRequest) -> EngineerDecision: ...
