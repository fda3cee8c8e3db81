"""The engineer's prompt: task, configuration format, current configuration, context modules, the request.

How much schema to show. The pydantic JSON schema of :class:`RoundConfig` (``$defs``, titles, the
experiment-level fields) costs several hundred tokens and buries the three numbers per size that the
engineer may change; a 135M model copies it back instead of answering. The default ``schema="compact"``
therefore shows one line per knob (its description and bounds, taken from the pydantic fields and the
:class:`ConfigSpace`) and the current configuration in exactly the answer's format, so that even a small
model can answer by editing numbers. ``schema="json"`` shows the full JSON schema of the answer
(:func:`answer_schema`) for models that use it well. Either way a backend that supports constrained decoding
receives :func:`answer_schema` through ``SamplingParams.json_schema``, which enforces the structure.

The answer is one JSON object ``{"rationale": "...", "sizes": {"3": {...}, ...}}``: the rationale sits inside
the object so that it survives JSON-only constrained decoding.

The prompt never names the round index, the number of rounds or the training algorithm unless the T module
is on, so the context ablation stays clean.

With ``answer="moves"`` (:mod:`envengineer.engineer.moves`) only the closing request (and the retry's
reminder, and the JSON schema) changes: the engineer answers ``{"rationale": "...", "moves": {"3":
{"difficulty": "harder", "data": "more"}, ...}}``, the words explained one line each, the ladder and each
size's level on it shown. With the default ``answer="numbers"`` every prompt is what it was before moves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from envengineer.engineer.context import (
    HistoryEntry,
    render_failures,
    render_guidelines,
    render_history,
    render_learnability,
    render_self_summary,
    render_training_details,
)
from envengineer.engineer.curriculum import DEFAULT_LEVELS, clip_ladder
from envengineer.engineer.decision import EngineerRequest
from envengineer.engineer.effects import render_effects
from envengineer.engineer.moves import DATA_FACTOR, DATA_WORDS, DIFFICULTY_WORDS, AnswerStyle, levels_now
from envengineer.mapf.config import HOLE_RATIO_MAX, ConfigSpace, RoundConfig, SizeConfig

SchemaStyle = Literal["compact", "json"]
Message = dict[str, str]

#: Longest rationale under constrained decoding: two or three sentences, so that a small model cannot
#: spend its token budget before the numbers.
RATIONALE_MAX_CHARS = 400
KNOBS: tuple[str, ...] = ("data_ratio", "hole_ratio", "wait_ratio")

SYSTEM_PROMPT = (
    "You are the environment engineer of a reinforcement-learning run. A language model (the trainee) is "
    "being trained to solve multi-agent path-finding puzzles. After each training round you read how the "
    "trainee did on a fixed validation set and choose the training data for the next round. You can change "
    "only the training data distribution; the reward, the validator and the evaluation sets are fixed. "
    "You answer with one JSON object."
)

TASK = (
    "## The trainee's task\n"
    "\n"
    "Each puzzle is an n x n grid of frozen cells and holes with k agents. Every agent has a start and "
    "its own goal. The trainee sees the board once and writes the whole joint plan: one sequence of moves "
    "(UP, DOWN, LEFT, RIGHT, WAIT) per agent. A plan is valid when no agent leaves the grid or steps on a "
    "hole, no two agents meet on a cell or swap cells, and every agent ends on its goal; it is optimal "
    "when the sum of the agents' arrival times is as small as possible. Some instances need a wait: the "
    "agents cannot all take a shortest path without a conflict, so one of them has to wait or detour."
)


def answer_schema(space: ConfigSpace, *, rationale_max_chars: int = RATIONALE_MAX_CHARS) -> dict[str, Any]:
    """JSON schema of the engineer's answer, for constrained decoding: a rationale, then every size.

    >>> s = answer_schema(ConfigSpace(sizes=(3, 4)))
    >>> list(s["properties"]), s["properties"]["sizes"]["required"]
    (['rationale', 'sizes'], ['3', '4'])
    """
    bounds = {"data_ratio": (0.0, 1.0), "hole_ratio": (0.0, space.hole_ratio_max), "wait_ratio": (0.0, 1.0)}
    size_schema = {
        "type": "object",
        "properties": {
            k: {"type": "number", "minimum": lo, "maximum": hi, "description": _description(k)}
            for k, (lo, hi) in bounds.items()
        },
        "required": list(KNOBS),
        "additionalProperties": False,
    }
    keys = [str(n) for n in space.sizes]
    return {
        "title": "EngineerAnswer",
        "type": "object",
        "properties": {
            "rationale": {
                "type": "string",
                "maxLength": rationale_max_chars,
                "description": "Two or three sentences: what the results show and what you change.",
            },
            "sizes": {
                "type": "object",
                "properties": {k: size_schema for k in keys},
                "required": keys,
                "additionalProperties": False,
            },
        },
        "required": ["rationale", "sizes"],
        "additionalProperties": False,
    }


def moves_schema(space: ConfigSpace, *, rationale_max_chars: int = RATIONALE_MAX_CHARS) -> dict[str, Any]:
    """JSON schema of a moves answer, for constrained decoding: a rationale, then every size's two words.

    >>> s = moves_schema(ConfigSpace(sizes=(3, 4)))
    >>> list(s["properties"]), s["properties"]["moves"]["properties"]["3"]["properties"]["data"]["enum"]
    (['rationale', 'moves'], ['more', 'same', 'less'])
    """
    size_schema = {
        "type": "object",
        "properties": {
            "difficulty": {
                "type": "string",
                "enum": list(DIFFICULTY_WORDS),
                "description": "harder: one ladder level up; easier: one level down; same: keep.",
            },
            "data": {
                "type": "string",
                "enum": list(DATA_WORDS),
                "description": f"more: the size's share times {DATA_FACTOR:g}; less: divided by it; "
                "same: keep.",
            },
        },
        "required": ["difficulty", "data"],
        "additionalProperties": False,
    }
    keys = [str(n) for n in space.sizes]
    schema = answer_schema(space, rationale_max_chars=rationale_max_chars)
    schema["properties"].pop("sizes")
    schema["properties"]["moves"] = {
        "type": "object",
        "properties": {k: size_schema for k in keys},
        "required": keys,
        "additionalProperties": False,
    }
    schema["required"] = ["rationale", "moves"]
    return schema


def _description(knob: str) -> str:
    return SizeConfig.model_fields[knob].description or knob


def render_schema(
    space: ConfigSpace,
    num_agents: int | Sequence[int],
    num_samples: int,
    style: SchemaStyle = "compact",
    answer: AnswerStyle = "numbers",
) -> str:
    """The configuration format: one line per knob (compact) or the answer's full JSON schema.

    ``num_agents``: the round's agent count, or its counts (``training.agents``, equal shares), all named.
    ``answer``: which answer's schema the ``json`` style shows (``numbers`` or ``moves``).
    """
    lines = ["## Configuration format", ""]
    sizes = ", ".join(str(n) for n in space.sizes)
    if style == "json":
        schema = moves_schema(space) if answer == "moves" else answer_schema(space)
        lines += [
            "Your answer must follow this JSON schema:",
            "",
            "```json",
            json.dumps(schema, indent=1),
            "```",
        ]
    else:
        lines.append(
            f"A configuration gives, for every map size n in {sizes} (an n x n grid), three numbers:"
        )
        for knob in KNOBS:
            line = f"- {knob}: {_description(knob)}"
            if knob == "hole_ratio" and space.hole_ratio_max != HOLE_RATIO_MAX:
                line += f" In this experiment at most {space.hole_ratio_max}."
            lines.append(line)
    counts = [num_agents] if isinstance(num_agents, int) else list(num_agents)
    agents = (
        f"The number of agents per training instance ({counts[0]})"
        if len(counts) == 1
        else f"The numbers of agents per training instance ({' or '.join(map(str, counts))}, in equal "
        "shares of the round's instances)"
    )
    lines += [
        "",
        f"{agents} and the number of instances per round ({num_samples}) are fixed by the experiment; "
        "do not include them.",
    ]
    return "\n".join(lines)


def render_config(config: RoundConfig) -> str:
    """A configuration in the answer's format: one size per line, 3 decimals, data ratios normalised.

    >>> cfg = RoundConfig.model_validate(
    ...     {"sizes": {"3": {"data_ratio": 2, "hole_ratio": 0.1, "wait_ratio": 0}}})
    >>> print(render_config(cfg))
    {"sizes": {
      "3": {"data_ratio": 1.000, "hole_ratio": 0.100, "wait_ratio": 0.000}
    }}
    """
    ratios = config.normalised_ratios()
    rows = [
        f'  "{n}": {{"data_ratio": {ratios[n]:.3f}, "hole_ratio": {s.hole_ratio:.3f}, '
        f'"wait_ratio": {s.wait_ratio:.3f}}}'
        for n, s in sorted(config.sizes.items())
    ]
    return '{"sizes": {\n' + ",\n".join(rows) + "\n}}"


def _answer_example(space: ConfigSpace) -> str:
    first, last = space.sizes[0], space.sizes[-1]
    middle = ", ..., " if len(space.sizes) > 2 else ", "
    one = '{"data_ratio": ..., "hole_ratio": ..., "wait_ratio": ...}'
    body = f'"{first}": {one}' + (f'{middle}"{last}": {one}' if last != first else "")
    return '{"rationale": "...", "sizes": {' + body + "}}"


def _moves_example(space: ConfigSpace) -> str:
    first, last = space.sizes[0], space.sizes[-1]
    middle = ", ..., " if len(space.sizes) > 2 else ", "
    body = f'"{first}": {{"difficulty": "harder", "data": "more"}}'
    if last != first:
        body += f'{middle}"{last}": {{"difficulty": "easier", "data": "less"}}'
    return '{"rationale": "...", "moves": {' + body + "}}"


def render_moves_request(space: ConfigSpace, config: RoundConfig) -> str:
    """The closing instruction of a moves answer: the form, the ladder, each size's level, the words."""
    sizes = ", ".join(str(n) for n in space.sizes)
    ladder = ", ".join(f"({h:g}, {w:g})" for h, w in clip_ladder(DEFAULT_LEVELS, space.hole_ratio_max))
    factor = f"{DATA_FACTOR:g}"
    return "\n".join(
        [
            "## Your answer",
            "",
            "Choose one move per map size for the next training round. Answer with one JSON object:",
            "",
            _moves_example(space),
            "",
            f"The difficulty ladder, easiest level (0) first, as (hole_ratio, wait_ratio): {ladder}.",
            f"Levels now: {levels_now(config, space)}.",
            "- harder: one level up the ladder (more holes and/or more waits; from between two levels, the "
            "one above).",
            "- easier: one level down the ladder (fewer holes and/or fewer waits; from between two levels, "
            "the one below).",
            f"- more: the size's share times {factor}, then all shares renormalised to sum to 1.",
            f"- less: the size's share divided by {factor}, then all shares renormalised to sum to 1.",
            "- same: no change (difficulty: the size keeps its hole_ratio and wait_ratio; data: its share).",
            "",
            f'"rationale": two or three sentences on what the results show and what you change and why. '
            f'"moves": every size {sizes}, each with "difficulty" (harder, same or easier) and "data" (more, '
            "same or less). Write nothing after the JSON object.",
        ]
    )


def render_request(space: ConfigSpace) -> str:
    """The closing instruction: a short rationale and the next configuration, as one JSON object."""
    sizes = ", ".join(str(n) for n in space.sizes)
    return "\n".join(
        [
            "## Your answer",
            "",
            "Write the configuration for the next training round. Answer with one JSON object:",
            "",
            _answer_example(space),
            "",
            f'"rationale": two or three sentences on what the results show and what you change and why. '
            f'"sizes": every size {sizes}, each with data_ratio, hole_ratio and wait_ratio as numbers within '
            "their ranges. Write nothing after the JSON object.",
        ]
    )


def build_user_prompt(
    request: EngineerRequest, *, schema: SchemaStyle = "compact", answer: AnswerStyle = "numbers"
) -> str:
    """The user message: task, configuration format, current configuration, context modules, request."""
    cfg = request.config
    parts = [
        TASK,
        render_schema(request.space, request.agent_counts, cfg.num_samples, schema, answer),
        "## Current configuration\n\nThe round that just finished trained on:\n\n```json\n"
        + render_config(cfg)
        + "\n```",
    ]
    context = render_context(request)
    if context:
        parts.append(context)
    request_text = (
        render_moves_request(request.space, cfg) if answer == "moves" else render_request(request.space)
    )
    parts.append(request_text)
    return "\n\n".join(parts) + "\n"


def build_messages(
    request: EngineerRequest, *, schema: SchemaStyle = "compact", answer: AnswerStyle = "numbers"
) -> list[Message]:
    """The chat messages of a first attempt: a system message and the user prompt."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": build_user_prompt(request, schema=schema, answer=answer)},
    ]


def build_retry_messages(
    first: Sequence[Message],
    response: str,
    errors: Sequence[str],
    space: ConfigSpace,
    *,
    answer: AnswerStyle = "numbers",
) -> list[Message]:
    """A retry: the first prompt, the failed answer and the errors to fix.

    Only the last failed exchange is kept (not every earlier one), so the conversation stays short enough
    for small context windows.
    """
    form = (
        ("every move one of the words above:", _moves_example(space))
        if answer == "moves"
        else ("every value a number within its range:", _answer_example(space))
    )
    feedback = "\n".join(
        [
            "Your answer could not be used:",
            *(f"- {e}" for e in errors),
            "",
            f"Answer again with one JSON object of this form, {form[0]}",
            form[1],
        ]
    )
    msgs = [dict(m) for m in first]
    msgs.append({"role": "assistant", "content": response})
    msgs.append({"role": "user", "content": feedback})
    return msgs


# -- the whole context ------------------------------------------------------------------------------------
def context_sections(request: EngineerRequest) -> list[tuple[str, str]]:
    """The enabled modules as ``(code, text)`` pairs, in the order F, L, G, H, E, S, T."""
    spec = request.context
    out: list[tuple[str, str]] = []
    if spec.failures:
        out.append(("F", render_failures(request.report)))
    if spec.learnability:
        out.append(("L", render_learnability(request.sampled)))
    if spec.guidelines:
        out.append(("G", render_guidelines()))
    current = HistoryEntry.from_report(request.round_index, request.config, request.report)
    if spec.history:
        out.append(
            ("H", render_history(request.history, current, include_default=spec.history_include_default))
        )
    if spec.effects:
        out.append(("E", render_effects(request.history, current, start=request.start_report)))
    if spec.self_summary:
        out.append(("S", render_self_summary(request.previous_rationale)))
    if spec.training_details != "none":
        out.append(
            (
                "T",
                render_training_details(
                    request.round_index, _with_agents(request), spec.training_details, request.config
                ),
            )
        )
    return out


def _with_agents(request: EngineerRequest) -> dict[str, Any]:
    """The request's training details, ``num_agents`` the round's counts when it trains on several."""
    details = dict(request.training)
    if len(request.agent_counts) > 1:
        details["num_agents"] = list(request.agent_counts)
    return details


def render_context(request: EngineerRequest) -> str:
    """The enabled context modules as one Markdown text (sections separated by a blank line)."""
    return "\n\n".join(text for _, text in context_sections(request))
