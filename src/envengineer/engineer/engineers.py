"""Engineers: who writes the next round's configuration (SPEC §5).

* :class:`LLMEngineer` wraps any ``ChatBackend``; it is the ``self`` (current checkpoint), ``base``
  (untrained starting model) and ``openai`` (any OpenAI-compatible endpoint) engineer.
* :class:`FixedEngineer` returns the round-0 configuration every round (the fixed-environment baseline).
* :class:`RandomEngineer` draws a fresh random configuration each round.
* :class:`envengineer.engineer.curriculum.ThresholdCurriculum` moves a per-size difficulty ladder.

All of them take an :class:`EngineerRequest` and return an :class:`EngineerDecision` that records
everything: the applied configuration, the raw proposal, what projection changed, and for LLM engineers
every attempt's messages, response and errors. Nothing here imports torch; model backends are imported only
when :func:`make_engineer` builds one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any, get_args

import numpy as np

from envengineer.engineer.decision import (
    Attempt,
    Engineer,
    EngineerDecision,
    EngineerKind,
    EngineerRequest,
)
from envengineer.engineer.moves import (
    ANSWER_STYLES,
    AnswerStyle,
    apply_moves,
    check_moves,
    moves_body,
    parse_moves,
    read_moves,
)
from envengineer.engineer.prompt import (
    RATIONALE_MAX_CHARS,
    SchemaStyle,
    answer_schema,
    build_messages,
    build_retry_messages,
    moves_schema,
)
from envengineer.engineer.proposal import ParsedAnswer, check_answer, parse_answer, proposal_issues
from envengineer.errors import ConfigError
from envengineer.mapf.config import RoundConfig, project, random_config

log = logging.getLogger(__name__)


# -- the LLM engineer -------------------------------------------------------------------------------------
def attempt_seed(seed: int | None, round_index: int, attempt: int) -> int:
    """The sampling seed of one attempt: distinct per (seed, round, attempt), stable across runs.

    >>> attempt_seed(0, 1, 0) == attempt_seed(0, 1, 0) != attempt_seed(0, 1, 1)
    True
    """
    ss = np.random.SeedSequence((int(seed or 0), round_index, attempt, 0xE461))
    return int(ss.generate_state(1)[0])


class LLMEngineer:
    """An engineer backed by a chat model: prompt, parse, validate, retry with the errors, project.

    Each attempt sends the prompt (or, on a retry, the prompt, the failed answer and the errors to fix) and
    reads the answer with :func:`parse_answer`. Only an answer without a configuration (nothing parseable,
    no ``sizes``; :func:`check_answer`) is rejected and retried; a backend error counts as a failed attempt
    (the same prompt is sent again). After ``max_retries`` retries without a usable answer the previous
    configuration is kept (``fell_back=True``). A configuration that parses is accepted and projected onto
    the legal space with :func:`project` whatever its values (out of range values clipped, unknown keys and
    sizes dropped, each change recorded); what was wrong with it is in the attempt's ``issues``
    (:func:`proposal_issues`).

    Args:
        backend: A ``ChatBackend``: ``generate(conversations, params) -> list[Completion]``.
        name: The engineer's name in records (``self``, ``base``, ``openai:<model>`` ...).
        params: ``SamplingParams``; None builds the default (temperature 0.7, 1,024 new tokens). Each
            attempt uses a seed derived from ``params.seed``, the round and the attempt.
        max_retries: Extra attempts after the first (2 gives at most 3 requests).
        constrained: Set ``params.json_schema`` to :func:`answer_schema` so that backends with constrained
            decoding enforce the answer's structure (backends without it ignore the field).
        schema: How the prompt shows the configuration format: ``compact`` or ``json``.
        rationale_max_chars: Longest rationale the answer schema allows under constrained decoding.
        answer: ``numbers`` (a full configuration) or ``moves`` (per-size ladder and data moves, mapped
            onto a configuration by :func:`~envengineer.engineer.moves.apply_moves` and then projected like
            a numbers answer; :mod:`envengineer.engineer.moves`).
    """

    def __init__(
        self,
        backend: Any,
        name: str = "llm",
        params: Any = None,
        max_retries: int = 2,
        *,
        constrained: bool = True,
        schema: SchemaStyle = "compact",
        rationale_max_chars: int = RATIONALE_MAX_CHARS,
        answer: AnswerStyle = "numbers",
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(
                f"max_retries must be an int >= 0 (extra attempts after the first), got {max_retries!r}"
            )
        if schema not in ("compact", "json"):
            raise ConfigError(f"schema must be 'compact' or 'json', got {schema!r}")
        if answer not in ANSWER_STYLES:
            raise ConfigError(f"answer must be 'numbers' or 'moves', got {answer!r}")
        self.backend = backend
        self.name = name
        self.params = params if params is not None else default_params()
        self.max_retries = max_retries
        self.constrained = constrained
        self.schema: SchemaStyle = schema
        self.rationale_max_chars = rationale_max_chars
        self.answer: AnswerStyle = answer

    def _generate(self, messages: list[dict[str, str]], params: Any) -> tuple[str, int | None, str | None]:
        try:
            out = self.backend.generate([messages], params)
        except Exception as exc:  # a failing backend is a failed attempt, recorded
            log.warning("engineer %s: backend raised %s: %s", self.name, type(exc).__name__, exc)
            return "", None, f"{type(exc).__name__}: {exc}"
        if len(out) != 1:
            return "", None, f"the backend returned {len(out)} completions for 1 conversation"
        c = out[0]
        text = getattr(c, "text", "") or ""
        return text, getattr(c, "completion_tokens", None), getattr(c, "error", None)

    def propose(self, request: EngineerRequest) -> EngineerDecision:
        """Ask the model for the next configuration; see the class docstring."""
        t0 = time.perf_counter()
        first = build_messages(request, schema=self.schema, answer=self.answer)
        messages = first
        schema_of = moves_schema if self.answer == "moves" else answer_schema
        json_schema = (
            schema_of(request.space, rationale_max_chars=self.rationale_max_chars)
            if self.constrained
            else None
        )
        attempts: list[Attempt] = []
        for k in range(self.max_retries + 1):
            attempt = self._attempt(request, messages, k, json_schema)
            attempts.append(attempt)
            if attempt.accepted:
                return self._accepted(request, attempt, tuple(attempts), t0)
            log.warning(
                "engineer %s: round %d attempt %d rejected: %s",
                self.name,
                request.round_index,
                k + 1,
                "; ".join(attempt.errors),
            )
            messages = (
                first
                if attempt.backend_error
                else build_retry_messages(
                    first, attempt.response, attempt.errors, request.space, answer=self.answer
                )
            )
        return self._fell_back(request, tuple(attempts), t0)

    def _attempt(
        self, request: EngineerRequest, messages: list[dict[str, str]], k: int, json_schema: Any
    ) -> Attempt:
        """Ask once (attempt ``k``) and check the answer against the request's space."""
        seed = attempt_seed(getattr(self.params, "seed", 0), request.round_index, k)
        params = dataclasses.replace(self.params, seed=seed, json_schema=json_schema)
        t = time.perf_counter()
        text, tokens, backend_error = self._generate(messages, params)
        issues: list[str] = []
        if backend_error:
            parsed = ParsedAnswer(None, None, "", "none")
            errors = [f"backend error: {backend_error}"]
        elif self.answer == "moves":
            parsed = parse_moves(text)
            errors = check_moves(parsed)
            if not errors:
                issues = read_moves(parsed.proposal, request.space)[1]
        else:
            parsed = parse_answer(text)
            errors = check_answer(parsed, request.space)
            if not errors:
                issues = proposal_issues(parsed, request.space)
        return Attempt(
            index=k,
            messages=tuple(dict(m) for m in messages),
            response=text,
            errors=tuple(errors),
            accepted=not errors,
            rationale=parsed.rationale,
            proposal=parsed.proposal,
            source=parsed.source,
            completion_tokens=tokens,
            backend_error=backend_error,
            seed=seed,
            seconds=time.perf_counter() - t,
            issues=tuple(issues),
        )

    def _accepted(
        self, request: EngineerRequest, attempt: Attempt, attempts: tuple[Attempt, ...], t0: float
    ) -> EngineerDecision:
        """The decision for an accepted attempt: its proposal (a moves answer's mapped configuration)
        projected onto the space."""
        raw, details, proposal = attempt.proposal, {}, attempt.proposal
        if self.answer == "moves":
            raw, details = self._mapped(request, attempt)
            proposal = {"sizes": raw["sizes"]}
        projection = project(proposal, request.config, request.space)
        log.info(
            "engineer %s: round %d proposal accepted at attempt %d (%d projection changes)",
            self.name,
            request.round_index,
            attempt.index + 1,
            len(projection.changes),
        )
        return EngineerDecision(
            engineer=self.name,
            round_index=request.round_index,
            config=projection.config,
            previous=request.config,
            raw_proposal=raw,
            changes=projection.changes,
            rationale=attempt.rationale or None,
            attempts=attempts,
            context=request.context,
            details={
                "accepted_attempt": attempt.index,
                "constrained": self.constrained,
                "schema": self.schema,
                "issues": list(attempt.issues),
                **details,
            },
            seconds=time.perf_counter() - t0,
        )

    def _mapped(self, request: EngineerRequest, attempt: Attempt) -> tuple[dict[str, Any], dict[str, Any]]:
        """A moves answer's raw proposal (the moves as written and the configuration they map to) and the
        decision's details on them (``answer``, per-size ``moves``: words, levels, knobs and shares)."""
        moves, _ = read_moves(attempt.proposal, request.space)
        proposal, records = apply_moves(moves, request.config, request.space)
        raw = {"moves": moves_body(attempt.proposal), "sizes": proposal["sizes"]}
        return raw, {"answer": "moves", "moves": records}

    def _fell_back(
        self, request: EngineerRequest, attempts: tuple[Attempt, ...], t0: float
    ) -> EngineerDecision:
        """The decision when no attempt was accepted: the previous configuration kept.

        Its raw proposal is the last one read from an answer (attempts the backend failed have none).
        """
        answered = [a for a in attempts if not a.backend_error]
        reason = (
            f"no acceptable configuration after {len(attempts)} attempt(s); kept the previous "
            f"configuration. Last errors: {'; '.join(attempts[-1].errors)}"
        )
        log.warning("engineer %s: round %d fell back: %s", self.name, request.round_index, reason)
        return EngineerDecision(
            engineer=self.name,
            round_index=request.round_index,
            config=request.config,
            previous=request.config,
            raw_proposal=answered[-1].proposal if answered else None,
            rationale=None,
            attempts=attempts,
            fell_back=True,
            fallback_reason=reason,
            context=request.context,
            details={
                "accepted_attempt": None,
                "constrained": self.constrained,
                "schema": self.schema,
                **({"answer": "moves"} if self.answer == "moves" else {}),
            },
            seconds=time.perf_counter() - t0,
        )


def default_params(
    *, temperature: float = 0.7, top_p: float = 1.0, max_new_tokens: int = 1024, seed: int = 0
) -> Any:
    """``envengineer.models.SamplingParams`` for an engineer (imported here, not at module import)."""
    from envengineer.models import SamplingParams

    return SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)


# -- non-LLM baselines ------------------------------------------------------------------------------------
class FixedEngineer:
    """The fixed-environment baseline: the same (round-0) configuration every round, exactly as given."""

    def __init__(self, config: RoundConfig, name: str = "fixed") -> None:
        if not isinstance(config, RoundConfig):
            raise ConfigError(
                f"FixedEngineer needs a RoundConfig (the round-0 configuration), got {config!r:.60}"
            )
        self.config = config
        self.name = name

    def propose(self, request: EngineerRequest) -> EngineerDecision:
        return EngineerDecision(
            engineer=self.name,
            round_index=request.round_index,
            config=self.config,
            previous=request.config,
            raw_proposal=self.config.model_dump(mode="json"),
            details={"baseline": "fixed"},
        )


class RandomEngineer:
    """A fresh random legal configuration each round, seeded by ``SeedSequence((seed, round_index))``.

    ``round_index`` is the round that just finished; ``num_agents`` and ``num_samples`` are kept.
    """

    def __init__(self, seed: int = 0, name: str = "random") -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"RandomEngineer seed must be an int >= 0, got {seed!r}")
        self.seed = seed
        self.name = name

    def propose(self, request: EngineerRequest) -> EngineerDecision:
        rng = np.random.default_rng(np.random.SeedSequence((self.seed, request.round_index)))
        cfg = random_config(
            rng, request.space, num_agents=request.config.num_agents, num_samples=request.config.num_samples
        )
        return EngineerDecision(
            engineer=self.name,
            round_index=request.round_index,
            config=cfg,
            previous=request.config,
            raw_proposal=cfg.model_dump(mode="json"),
            details={"baseline": "random", "seed_sequence": [self.seed, request.round_index]},
        )


# -- building engineers from experiment settings ----------------------------------------------------------
def _settings_problem(kind: str, answer: str, options: Mapping[str, Any]) -> str | None:
    """Why ``answer`` or ``options`` do not apply to an engineer of ``kind``, or None."""
    if answer != "numbers" and kind not in ("self", "base", "openai"):
        return f"answer {answer!r} applies to LLM engineers (self, base, openai), not {kind!r}"
    if options and kind not in ("threshold", "learnability"):
        return (
            f"engineer {kind!r} takes no options {sorted(options)}; options apply to 'threshold' and "
            "'learnability'"
        )
    return None


def make_engineer(
    kind: EngineerKind,
    *,
    name: str | None = None,
    model: str | None = None,
    backend: Any = None,
    backend_kind: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    params: Any = None,
    temperature: float = 0.7,
    top_p: float = 1.0,
    max_new_tokens: int = 1024,
    max_retries: int = 2,
    constrained: bool | None = None,
    schema: SchemaStyle = "compact",
    answer: AnswerStyle = "numbers",
    config: RoundConfig | None = None,
    seed: int = 0,
    **options: Any,
) -> Engineer:
    """Build an engineer from simple settings (an experiment file's ``engineer`` section).

    Args:
        kind: ``self`` / ``base`` / ``openai`` (LLM engineers), ``fixed``, ``random``, ``threshold`` or
            ``learnability``.
        name: Name in records (default: the kind; ``openai:<model>`` for endpoints).
        model: ``self``: the current checkpoint; ``base``: the starting model; ``openai``: the served model.
        backend: An already-built ``ChatBackend`` (tests, or a backend shared with evaluation); when given,
            ``model``, ``backend_kind`` and ``backend_options`` are not used.
        backend_kind: ``self``/``base``: ``hf`` (default) or ``vllm``; ``openai``: ``openai``.
        backend_options: Passed to ``envengineer.models.load_backend`` (e.g. ``base_url``, ``api_key_env``).
        params: ``SamplingParams``; None builds them from ``temperature``, ``top_p``, ``max_new_tokens``,
            ``seed``.
        max_retries: LLM engineers: extra attempts after a rejected answer.
        constrained: LLM engineers: decode under the answer's JSON schema. None: on for ``self``/``base``,
            off for ``openai`` (not every endpoint accepts ``response_format`` with a schema).
        schema: LLM engineers: ``compact`` or ``json`` configuration format in the prompt.
        answer: LLM engineers: ``numbers`` (a full configuration) or ``moves`` (per-size moves).
        config: ``fixed``: the round-0 configuration.
        seed: ``random``: base seed; LLM engineers: sampling seed.
        **options: ``threshold`` and ``learnability`` only: the fields of
            :class:`~envengineer.engineer.curriculum.ThresholdCurriculum`.

    Raises:
        ConfigError: a missing or unknown setting, with what to set instead.
    """
    if problem := _settings_problem(kind, answer, options):
        raise ConfigError(problem)
    match kind:
        case "self" | "base" | "openai":
            if backend is None:
                from envengineer.models import load_backend

                bk = backend_kind or ("openai" if kind == "openai" else "hf")
                if kind == "openai" and not model:
                    raise ConfigError("engineer 'openai' needs model (the served model name) and base_url")
                backend = load_backend(bk, model, **dict(backend_options or {}))
            if params is None:
                params = default_params(
                    temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
                )
            label = name or (f"openai:{model}" if kind == "openai" and model else kind)
            use_schema = (kind != "openai") if constrained is None else constrained
            return LLMEngineer(
                backend, label, params, max_retries, constrained=use_schema, schema=schema, answer=answer
            )
        case "fixed":
            if config is None:
                raise ConfigError("engineer 'fixed' needs config: the round-0 configuration to repeat")
            return FixedEngineer(config, name or "fixed")
        case "random":
            return RandomEngineer(seed, name or "random")
        case "threshold" | "learnability":
            from envengineer.engineer.curriculum import LearnabilityCurriculum, ThresholdCurriculum

            ladder = LearnabilityCurriculum if kind == "learnability" else ThresholdCurriculum
            return ladder.from_options(options, name=name)
        case _:
            raise ConfigError(f"unknown engineer kind {kind!r}; use {', '.join(get_args(EngineerKind))}")
