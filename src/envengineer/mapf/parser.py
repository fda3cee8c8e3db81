"""Model response -> answer lines -> per-agent action sequences. Never raises on model text.

The canonical answer is one ``<answer>`` block with one line per agent::

    <answer>
    A0: RIGHT DOWN WAIT
    A1: UP
    </answer>

Parsing covers the first three checks of SPEC §2.1 (``parse_error``, ``agent_mismatch``,
``invalid_action``); the rules are documented in ``docs/testbed-answers.md``:

* The answer is the **last** complete ``<answer>...</answer>`` block in the text after the last
  ``</think>`` (the whole text when there is none). Tags are matched case-insensitively (``<ANSWER>``).
  No complete block (an opening tag followed by a closing tag) is a ``parse_error``.
* Inside the block, ``*`` and backticks are dropped (markdown emphasis, code fences), blank lines are
  ignored and a leading bullet (``-``, ``•``, ``>``) is stripped. Every other line must start with a
  label ``<letters><digits>``: ``A0``, ``a0``, ``Agent 0``, ``agent_0``, ``AGENT-0``, ``Agent #0``,
  optionally followed by ``:``. A line without such a label is a ``parse_error``.
* Several labelled sequences on one line are split at each further ``A<i>:``/``Agent <i>:`` label.
* A label whose letters are not ``A``/``Agent`` (``B1``, ``Robot 0``) or whose number is not an agent
  (``A7`` with two agents), a repeated agent and a missing agent are ``agent_mismatch``.
* Tokens are separated by whitespace and ``, ; . : | / ( ) [ ] { } < > = " '`` and dashes/arrows; case
  does not matter. An empty sequence is allowed (the agent waits in place). A token that is not one of
  ``UP DOWN LEFT RIGHT WAIT`` (e.g. ``NORTH``, ``U``, ``2``) is ``invalid_action``.

Every function here is linear in the length of the text: tags are found with ``str.rfind`` and the
regular expressions have no overlapping quantifiers, so they cannot backtrack catastrophically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from envengineer.mapf.instance import MOVES, agent_name

__all__ = [
    "AnswerLine",
    "ParsedAnswer",
    "PlanParse",
    "check_plan_tokens",
    "completion_text",
    "extract_answer_block",
    "parse_answer",
    "parse_plan",
    "parse_plan_fast",
]

_THINK_CLOSE, _ANSWER_OPEN, _ANSWER_CLOSE = "</think>", "<answer>", "</answer>"
_ASCII_LOWER = str.maketrans({c: c.lower() for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"})
# A label at the start of a line: letters, an optional separator, digits, an optional colon-like mark.
_LABEL = re.compile(r"([^\W\d_]+)[ \t_#-]*(\d+)[ \t]*[:)\]=.-]?")
# A further agent label inside a line; a colon is required so that prose is not split.
_INLINE_LABEL = re.compile(r"(?<![^\W_])(?:agent|a)[ \t_#-]*\d+[ \t]*:", re.IGNORECASE)
_AGENT_WORDS = frozenset({"a", "agent"})
_MAX_LABEL_DIGITS = 6  # keeps int() far from Python's digit limit; longer numbers name no agent

_DROP = str.maketrans("", "", "*`")
_SEPARATORS = str.maketrans({ch: " " for ch in ",;.:|/()[]{}<>=\"'-→⇒⟶–—"})
_BULLETS = "-•>·+ \t"
_ACTION_SET = frozenset(MOVES)

_MAX_DETAIL = 60  # characters of model text quoted in a failure detail


@dataclass(frozen=True)
class AnswerLine:
    """One labelled line of an answer block.

    Attributes:
        label: The label as written (``"Agent 0"``), for messages.
        agent: The agent index it names, or ``None`` when the label does not name an agent (``"B1"``).
        tokens: The action tokens, upper-cased, in order (not yet checked against the five actions).
    """

    label: str
    agent: int | None
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class ParsedAnswer:
    """The answer block of a response split into labelled lines (check 1 of SPEC §2.1).

    Attributes:
        ok: True when a complete block was found and every non-blank line carries a label.
        lines: The labelled lines in the order written (empty when not ``ok``).
        detail: Why parsing failed (empty when ``ok``).
    """

    ok: bool
    lines: tuple[AnswerLine, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class PlanParse:
    """Outcome of checks 1-3: a plan with one action sequence per agent, or the first failure.

    Attributes:
        plan: Per agent (index order) the upper-cased action tokens; ``None`` when a check failed.
        failure: ``None``, ``"parse_error"``, ``"agent_mismatch"`` or ``"invalid_action"``.
        agent: The agent the failure concerns, when there is one.
        step: For ``invalid_action``, the 1-based position of the offending token (the time step it
            would reach).
        detail: A short human-readable explanation.
    """

    plan: tuple[tuple[str, ...], ...] | None
    failure: str | None = None
    agent: int | None = None
    step: int | None = None
    detail: str = ""

    @property
    def checks_passed(self) -> int:
        """How many of checks 1-3 passed in order."""
        if self.failure is None:
            return 3
        return {"parse_error": 0, "agent_mismatch": 1, "invalid_action": 2}[self.failure]


def _quote(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "...")


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or TRL's conversational format (a list of messages).

    For a list of message dicts the content of the last ``assistant`` message is taken (the last message
    when none has that role); a content given as a list of parts is joined from its ``text`` parts.
    Anything else gives ``""``.

    >>> completion_text([{"role": "assistant", "content": "<answer>A0: UP</answer>"}])
    '<answer>A0: UP</answer>'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        if not messages:
            return ""
        assistant = [m for m in messages if m.get("role") == "assistant"]
        return _content_text((assistant or messages)[-1].get("content"))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def extract_answer_block(text: str) -> str | None:
    """The inside of the last complete ``<answer>`` block after the last ``</think>``, or ``None``.

    Tags are matched case-insensitively (``<ANSWER>``, ``</Think>``).

    >>> extract_answer_block("<think><answer>A0: UP</answer></think> <answer>A0: DOWN</answer>")
    'A0: DOWN'
    >>> extract_answer_block("A0: DOWN") is None
    True
    """
    if not isinstance(text, str):
        return None
    low = text.lower()
    if len(low) != len(text):  # a few non-ASCII letters change length when lowered; keep indices aligned
        low = text.translate(_ASCII_LOWER)
    start = low.rfind(_THINK_CLOSE)
    start = 0 if start < 0 else start + len(_THINK_CLOSE)
    close = low.rfind(_ANSWER_CLOSE, start)
    if close < 0:
        return None
    opening = low.rfind(_ANSWER_OPEN, start, close)
    if opening < 0:
        return None
    return text[opening + len(_ANSWER_OPEN) : close]


def _split_inline(line: str) -> list[str]:
    cuts = [m.start() for m in _INLINE_LABEL.finditer(line) if m.start() > 0]
    if not cuts:
        return [line]
    bounds = [0, *cuts, len(line)]
    return [line[a:b] for a, b in pairwise(bounds)]


_Line = tuple[str, "int | None", tuple[str, ...]]


def _parse_segment(segment: str) -> _Line | str | None:
    """One labelled sequence ``(label, agent, tokens)``; ``None`` for a blank segment; a message on error."""
    stripped = segment.strip().lstrip(_BULLETS)
    if not stripped:
        return None
    m = _LABEL.match(stripped)
    if m is None:
        return f"line {_quote(stripped)} does not start with an agent label"
    word, digits = m.group(1, 2)
    agent = int(digits) if len(digits) <= _MAX_LABEL_DIGITS and word.lower() in _AGENT_WORDS else None
    rest = stripped[m.end() :]
    tokens = rest.upper().split()
    if not _ACTION_SET.issuperset(tokens):  # separators other than spaces, or unknown tokens
        tokens = rest.translate(_SEPARATORS).upper().split()
    return stripped[: min(m.end(2), _MAX_DETAIL)], agent, tuple(tokens)


def _parse_lines(text: Any) -> list[_Line] | str:
    """The labelled lines ``(label, agent or None, tokens)`` of the answer block, or why there are none."""
    block = extract_answer_block(completion_text(text))
    if block is None:
        return "no complete <answer>...</answer> block after the reasoning"
    if "*" in block or "`" in block:
        block = block.translate(_DROP)
    lines: list[_Line] = []
    for raw in block.splitlines():
        if not raw or raw.isspace():
            continue
        head, colon, rest = raw.partition(":")
        label = head.strip()
        digits = label[1:]
        if colon and label[:1] in "Aa" and digits.isdigit() and digits.isascii() and len(digits) <= 6:
            tokens = rest.upper().split()
            if _ACTION_SET.issuperset(tokens):  # the canonical line "A0: RIGHT DOWN WAIT", any case
                lines.append((label, int(digits), tuple(tokens)))
                continue
        line = _parse_segment(raw)
        if line is None:
            continue
        if isinstance(line, str):
            return line
        if not _ACTION_SET.issuperset(line[2]) and _INLINE_LABEL.search(raw, 1) is not None:
            for segment in _split_inline(raw):  # several sequences on one line: "A0: UP, A1: DOWN"
                part = _parse_segment(segment)
                if isinstance(part, str):
                    return part
                if part is not None:
                    lines.append(part)
        else:
            lines.append(line)
    if not lines:
        return "the <answer> block is empty"
    return lines


def parse_answer(text: Any) -> ParsedAnswer:
    """Find the answer block and split it into labelled lines (check 1). Never raises.

    Args:
        text: The model's response (a string, or TRL's list of chat messages).

    Returns:
        A :class:`ParsedAnswer`; ``ok`` is False (a ``parse_error``) when there is no complete block or a
        non-blank line has no agent label.

    >>> parse_answer("<answer>\\nAgent 0: right, Right\\n\\nA1:\\n</answer>").lines[0]
    AnswerLine(label='Agent 0', agent=0, tokens=('RIGHT', 'RIGHT'))
    """
    lines = _parse_lines(text)
    if isinstance(lines, str):
        return ParsedAnswer(False, detail=lines)
    return ParsedAnswer(True, tuple(AnswerLine(*line) for line in lines))


def _agent_names(num_agents: int) -> str:
    return f"{agent_name(0)}..{agent_name(num_agents - 1)}" if num_agents > 1 else agent_name(0)


def parse_plan_fast(text: Any, num_agents: int) -> tuple[tuple[str, ...], ...] | PlanParse:
    """Like :func:`parse_plan`, but returns the bare plan on success (the validator's hot path).

    >>> parse_plan_fast("<answer>A0: up\\nA1:</answer>", 2)
    (('UP',), ())
    >>> parse_plan_fast("<answer>A0: up</answer>", 2).failure
    'agent_mismatch'
    """
    lines = _parse_lines(text)
    if isinstance(lines, str):
        return PlanParse(None, "parse_error", detail=lines)
    seqs: list[tuple[str, ...] | None] = [None] * num_agents
    for label, agent, tokens in lines:
        if agent is None or agent >= num_agents:
            detail = f"label {_quote(label)} names no agent (agents are {_agent_names(num_agents)})"
            return PlanParse(None, "agent_mismatch", detail=detail)
        if seqs[agent] is not None:
            detail = f"{agent_name(agent)} has more than one sequence"
            return PlanParse(None, "agent_mismatch", agent=agent, detail=detail)
        seqs[agent] = tokens
    if None not in seqs and all(map(_ACTION_SET.issuperset, seqs)):  # type: ignore[arg-type]
        return tuple(seqs)  # type: ignore[arg-type]
    return check_plan_tokens(seqs)


def parse_plan(text: Any, num_agents: int) -> PlanParse:
    """Checks 1-3 of SPEC §2.1 on a response: parse, one sequence per agent, known actions only.

    Args:
        text: The model's response (a string, or TRL's list of chat messages).
        num_agents: How many agents the instance has.

    Returns:
        A :class:`PlanParse` with the plan in agent order, or the first failing check.

    >>> parse_plan("<answer>A0: RIGHT RIGHT\\nA1: down</answer>", 2).plan
    (('RIGHT', 'RIGHT'), ('DOWN',))
    >>> parse_plan("<answer>A0: RIGHT RIGHT</answer>", 2).failure
    'agent_mismatch'
    """
    plan = parse_plan_fast(text, num_agents)
    return plan if isinstance(plan, PlanParse) else PlanParse(plan)


def check_plan_tokens(plan: Sequence[Sequence[str] | None], num_agents: int | None = None) -> PlanParse:
    """Checks 2-3 on an already split plan: one sequence per agent, every token one of the five actions.

    Tokens are compared case-insensitively after stripping surrounding whitespace.

    Args:
        plan: Per agent its action tokens (``None`` for an agent without a sequence).
        num_agents: Expected number of agents (defaults to ``len(plan)``).

    Returns:
        A :class:`PlanParse` with upper-cased tokens, or ``agent_mismatch`` / ``invalid_action`` at the
        earliest offending step (ties by agent index).

    >>> check_plan_tokens([["up"], ["NORTH"]]).failure
    'invalid_action'
    """
    k = len(plan) if num_agents is None else num_agents
    if len(plan) != k:
        missing = len(plan) if len(plan) < k else None
        return PlanParse(
            None,
            "agent_mismatch",
            agent=missing,
            detail=f"the plan has {len(plan)} sequences for {k} agents",
        )
    missing_agents = [i for i, seq in enumerate(plan) if seq is None]
    if missing_agents:
        i = missing_agents[0]
        return PlanParse(None, "agent_mismatch", agent=i, detail=f"{agent_name(i)} has no sequence")
    out: list[tuple[str, ...]] = []
    bad: tuple[int, int, str] | None = None  # (step, agent, token)
    for i, seq in enumerate(plan):
        if isinstance(seq, str):  # one string of actions, split it like an answer line
            seq = seq.translate(_SEPARATORS).split()
        try:
            tokens = tuple(t.strip().upper() if isinstance(t, str) else repr(t) for t in seq)  # type: ignore[union-attr]
        except TypeError:  # not a sequence at all
            tokens = (repr(seq),)
        for t, tok in enumerate(tokens, start=1):
            if tok not in MOVES:
                if bad is None or (t, i) < bad[:2]:
                    bad = (t, i, tok)
                break
        out.append(tokens)
    if bad is not None:
        t, i, tok = bad
        return PlanParse(
            None,
            "invalid_action",
            agent=i,
            step=t,
            detail=f"{agent_name(i)}'s action {t} is {_quote(tok)}, not one of {' '.join(MOVES)}",
        )
    return PlanParse(tuple(out))
