"""The environment engineer: context modules, prompt, proposal parsing and the engineers (SPEC §5).

Imports numpy, pydantic and PyYAML only; model backends are imported when an LLM engineer is built.

>>> from envengineer.engineer import V6
>>> V6.label
'F+G+H(without default)+S+T(bookkeeping)'
"""

from __future__ import annotations

from envengineer.engineer.context import (
    FINAL,
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    V6_FULL,
    VARIANTS,
    ContextSpec,
    HistoryEntry,
    context_spec,
    per_size_failures,
    per_size_rates,
)
from envengineer.engineer.curriculum import ThresholdCurriculum
from envengineer.engineer.decision import Attempt, Engineer, EngineerDecision, EngineerKind, EngineerRequest
from envengineer.engineer.engineers import (
    FixedEngineer,
    LLMEngineer,
    RandomEngineer,
    default_params,
    make_engineer,
)
from envengineer.engineer.prompt import (
    answer_schema,
    build_messages,
    build_user_prompt,
    context_sections,
    render_config,
    render_context,
)
from envengineer.engineer.proposal import ParsedAnswer, check_answer, parse_answer

__all__ = [
    "FINAL",
    "V1",
    "V2",
    "V3",
    "V4",
    "V5",
    "V6",
    "V6_FULL",
    "VARIANTS",
    "Attempt",
    "ContextSpec",
    "Engineer",
    "EngineerDecision",
    "EngineerKind",
    "EngineerRequest",
    "FixedEngineer",
    "HistoryEntry",
    "LLMEngineer",
    "ParsedAnswer",
    "RandomEngineer",
    "ThresholdCurriculum",
    "answer_schema",
    "build_messages",
    "build_user_prompt",
    "check_answer",
    "context_sections",
    "context_spec",
    "default_params",
    "make_engineer",
    "parse_answer",
    "per_size_failures",
    "per_size_rates",
    "render_config",
    "render_context",
]
