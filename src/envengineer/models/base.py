"""The one interface every chat model sits behind (backends are built by name in :mod:`.registry`).

A backend turns a batch of chat conversations into a batch of completions. It never raises on what a
model writes, and a backend that talks to a remote service records a request that finally failed as a
:class:`Completion` with ``error`` set instead of raising, so one bad request cannot end an evaluation.

>>> params = SamplingParams(temperature=0.0, max_new_tokens=64)
>>> params.greedy
True
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from envengineer.errors import EnvEngineerError

log = logging.getLogger(__name__)

Message = dict[str, str]
Conversation = list[Message]
BackendKind = Literal["hf", "vllm", "openai", "scripted"]


class ModelError(EnvEngineerError):
    """A model or backend cannot be loaded or configured as asked (missing package, bad path, bad option)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch of completions.

    Attributes:
        temperature: Softmax temperature; ``0`` means greedy decoding.
        top_p: Nucleus-sampling mass in ``(0, 1]``.
        max_new_tokens: Token budget of each completion.
        seed: Base seed; backends derive their per-batch seeds from it, so a rerun reproduces a run.
        json_schema: When set, the completion is constrained to JSON that follows this schema
            (xgrammar for ``hf``, structured outputs for ``vllm``, ``response_format`` for ``openai``).
    """

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ModelError(
                f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise ModelError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if (
            isinstance(self.max_new_tokens, bool)
            or not isinstance(self.max_new_tokens, int)
            or self.max_new_tokens < 1
        ):
            raise ModelError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ModelError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.json_schema is not None and not isinstance(self.json_schema, dict):
            raise ModelError(
                f"json_schema must be a JSON-schema dict or None, got {type(self.json_schema).__name__}"
            )

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic (temperature 0)."""
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        """The parameters as plain JSON data (for run records)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "json_schema": self.json_schema,
        }


@dataclass(frozen=True)
class Completion:
    """One completion of one conversation.

    Attributes:
        text: The generated text (the assistant message), ``""`` when the request failed.
        completion_tokens: Tokens the model generated, where the backend knows it.
        error: Why no completion could be had (after retries), or ``None`` on success.
    """

    text: str
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class ChatBackend(Protocol):
    """Anything that completes a batch of chat conversations.

    ``generate`` returns exactly one :class:`Completion` per conversation, in order. Conversations are
    lists of ``{"role": "system" | "user" | "assistant", "content": str}`` dicts.
    """

    name: str

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Completion]: ...


def check_conversations(conversations: Sequence[Conversation]) -> None:
    """Raise :class:`ModelError` when a conversation is not a list of role/content dicts."""
    for i, conv in enumerate(conversations):
        if not isinstance(conv, (list, tuple)) or not conv:
            raise ModelError(f"conversation {i} must be a non-empty list of messages, got {conv!r:.80}")
        for msg in conv:
            if (
                not isinstance(msg, dict)
                or not isinstance(msg.get("role"), str)
                or not isinstance(msg.get("content"), str)
            ):
                raise ModelError(
                    f"conversation {i}: every message must be "
                    f'{{"role": str, "content": str}}, got {msg!r:.80}'
                )


def last_user_message(conversation: Conversation) -> str | None:
    """The content of the last ``user`` message of a conversation, or ``None`` when there is none.

    >>> last_user_message([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    'u'
    """
    for msg in reversed(conversation):
        if msg.get("role") == "user":
            return msg.get("content")
    return None
