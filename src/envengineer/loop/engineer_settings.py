"""``engineer``: who writes the next round's configuration, what it reads and how it is asked.

The experiment file's ``engineer`` section (:class:`EngineerSettings`); it lives here so that
:mod:`envengineer.loop.experiment` stays short, and :mod:`envengineer.loop.experiment` re-exports it.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from envengineer.engineer.trust_region import TrustRegion
from envengineer.loop.context_settings import ContextSettings
from envengineer.loop.screen_settings import ScreenSettings, screen_problem

EngineerKind = Literal["self", "base", "openai", "fixed", "random", "threshold", "learnability"]
#: Engineer kinds that are asked with a prompt (the others are rules).
LLM_KINDS = ("self", "base", "openai")


class EngineerSettings(BaseModel):
    """Who writes the next round's configuration, what it reads and how it is asked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EngineerKind = Field(
        default="self",
        description="self: the current checkpoint; base: the untrained starting model; openai: an "
        "OpenAI-compatible endpoint; fixed: the round-0 configuration every round; random: a fresh random "
        "configuration each round; threshold: a per-size difficulty ladder moved by validation success; "
        "learnability: the same ladder moved by the policy's sampled success in training, data where it "
        "is intermediate (p (1 - p)).",
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
    answer: Literal["numbers", "moves"] = Field(
        default="numbers",
        description="LLM engineers: how they answer. numbers: a full configuration (per size data_ratio, "
        "hole_ratio, wait_ratio); moves: per size a difficulty move (harder, same, easier: one level on the "
        "threshold ladder) and a data move (more, same, less: the share times or divided by 1.5), mapped "
        "onto a configuration by code (docs/engineer.md).",
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
    trust_region: TrustRegion | None = Field(
        default=None,
        description="Bound how far any knob moves in one round (data_ratio, hole_ratio, wait_ratio); applied "
        "after projection and recorded in projection.json. None (the paper's setting): no bound.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Kind-specific options (threshold and learnability only: upper, lower, step, levels, "
        "floor, momentum, metric).",
    )
    screen: ScreenSettings | None = Field(
        default=None,
        description="Ask several proposals per round and keep the one whose boards the current policy finds "
        "most learnable (a probe of proposals x boards answers). None: one proposal, as in the paper.",
    )

    @model_validator(mode="after")
    def _check(self) -> EngineerSettings:
        if problem := screen_problem(self.kind, self.screen):
            raise ValueError(problem)
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError(
                "engineer kind 'openai' needs base_url and model (and api_key_env for hosted APIs)"
            )
        if self.answer != "numbers" and self.kind not in LLM_KINDS:
            raise ValueError(
                f"engineer.answer {self.answer!r} applies to LLM engineers ({', '.join(LLM_KINDS)}), not "
                f"{self.kind!r}: a rule writes no answer"
            )
        if self.kind != "openai" and (self.base_url or self.api_key_env):
            raise ValueError(
                f"base_url and api_key_env apply to engineer kind 'openai' only, not {self.kind!r}"
            )
        return self

    @pydantic.model_serializer(mode="wrap")
    def _dump(self, handler: pydantic.SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.screen is None:  # off: a run's experiment.yaml stays what it was before the screen existed
            data.pop("screen", None)
        if self.answer == "numbers":  # the default: likewise, as before the moves answer existed
            data.pop("answer", None)
        return data

    @property
    def is_llm(self) -> bool:
        return self.kind in LLM_KINDS
