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
from envengineer.sanitize import safe_text

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
        agents: The agent counts of the round's boards, in equal shares (the experiment's
            ``training.agents``); empty: ``config.num_agents`` alone. The prompt names every count.
        start_report: The starting model's validation ScoreReport JSON (``validation.start``), the first
            point of the E module; None when not validated (the loop passes it only where E is on).
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
    agents: Sequence[int] = ()
    start_report: Mapping[str, Any] | None = None

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
        agents = tuple(self.agents or ())
        if any(isinstance(a, bool) or not isinstance(a, int) or a < 1 for a in agents):
            raise ConfigError(
                f"agents must be agent counts (ints >= 1), got {agents!r:.80}; or leave it empty"
            )
        object.__setattr__(self, "agents", tuple(sorted(set(agents))))

    @property
    def agent_counts(self) -> tuple[int, ...]:
        """The agent counts the round trains on: ``agents``, or ``config.num_agents`` alone."""
        return self.agents or (self.config.num_agents,)


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
        """A strict-JSON record of the attempt (every string made writable, see :func:`jsonable`)."""
        return jsonable(
            {
                "index": self.index,
                "messages": [dict(m) for m in self.messages],
                "response": self.response,
                "errors": list(self.errors),
                "issues": list(self.issues),
                "accepted": self.accepted,
                "rationale": self.rationale,
                "proposal": self.proposal,
                "source": self.source,
                "completion_tokens": self.completion_tokens,
                "backend_error": self.backend_error,
                "seed": self.seed,
                "seconds": round(self.seconds, 4),
            }
        )


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
        """A strict-JSON record for the run directory, whatever the model wrote.

        ``json.dumps(d, allow_nan=False, ensure_ascii=False)`` works and encodes as UTF-8: every value passes
        through :func:`jsonable` (no NaN or infinity, no lone surrogate, no integer too long to print).
        """
        return jsonable(
            {
                "engineer": self.engineer,
                "round_index": self.round_index,
                "next_round": self.round_index + 1,
                "config": self.config.model_dump(mode="json"),
                "previous": self.previous.model_dump(mode="json"),
                "raw_proposal": self.raw_proposal,
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
                "details": self.details,
                "seconds": round(self.seconds, 4),
            }
        )


def jsonable(obj: Any) -> Any:
    """Parsed model data made strict JSON: string keys, lists for tuples/sets, strings for anything else.

    Strings (keys too) lose their lone surrogates and known secrets (:func:`~envengineer.sanitize.safe_text`:
    a surrogate cannot be written as UTF-8); NaN and infinities become their names; an integer too long
    for ``str`` (a YAML ``0x`` literal of thousands of digits) becomes its hex string.

    >>> jsonable({3: {1.5, 0.5}, "x": float("nan")})
    {'3': [0.5, 1.5], 'x': 'nan'}
    >>> jsonable("a\\ud800") == "a\\ufffd", jsonable(16**5000)[:6]
    (True, '0x1000')
    """
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return safe_text(obj)
    if isinstance(obj, int):
        return _printable_int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Mapping):
        return {jsonable(str(k)): jsonable(v) for k, v in obj.items()}
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


def _printable_int(value: int) -> int | str:
    """``value``, or its hex string when it has more digits than ``str`` prints (``json.dumps`` raises)."""
    try:
        str(value)
    except ValueError:
        return hex(value)
    return int(value)


class Engineer(Protocol):
    """Anything that turns a finished round into the next round's configuration."""

    name: str

    def propose(self, request: EngineerRequest) -> EngineerDecision: ...
