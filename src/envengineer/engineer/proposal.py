"""Reading the engineer's answer: a rationale and a configuration, parsed as data, never executed.

:func:`parse_answer` never raises on model text. It looks for candidate objects in this order of
preference (the last acceptable candidate wins, since models often quote the current configuration first
and give their own at the end):

1. fenced blocks (```json, ```yaml or bare ```), and balanced ``{...}`` spans anywhere in the text, each
   read as strict JSON, then as repaired JSON (trailing commas, ``//`` comments, typographic quotes,
   Python's ``True``/``False``/``None``), then as YAML (``yaml.safe_load`` with aliases refused);
2. when there is no object at all, a YAML block starting at a ``rationale:`` or ``sizes:`` line.

A candidate that looks like a configuration (it has a ``sizes`` key, or size keys such as ``"6"`` mapping to
objects) is preferred over other objects. ``<think>...</think>`` blocks are ignored. The rationale is the
object's ``rationale`` string when present, otherwise the prose around the object.

:func:`check_answer` then says whether the answer holds a configuration at all (if not, the engineer
sends its messages back to the model and retries). A configuration that parses is projected with
:func:`envengineer.mapf.config.project` whatever its values: out-of-range values are clipped and
unknown keys dropped, and :func:`proposal_issues` (the strict rules of
:func:`envengineer.mapf.config.validate_proposal`) records what was wrong with it.
"""

from __future__ import annotations

import json
import logging
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import yaml

from envengineer.mapf.config import DEFAULT_SPACE, ConfigSpace, validate_proposal

log = logging.getLogger(__name__)

Source = Literal["json", "json-repaired", "yaml", "none"]

#: Longest stretch of an answer parsed at once (characters). A longer answer is read in at most three such
#: windows, in order: its end (where the object usually is), around its last ``sizes``, its start; the first
#: window that holds a configuration wins, so a valid configuration followed (or preceded) by padding parses.
MAX_ANSWER_CHARS = 50_000
#: Longest rationale kept (characters).
MAX_RATIONALE_CHARS = 2_000
_MAX_SPANS = 64
_MAX_RESTARTS = 16
_MAX_YAML_TRIES = 60
_MAX_YAML_LINES = 200

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n`]*\n(.*?)```", re.S)
_SIZE_KEY_RE = re.compile(r"^\s*\d+\s*(?:[xX×]\s*\d+)?\s*$")
_KIND = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_YAML_START_RE = re.compile(r"(?m)^[ \t]*[\"']?(?:rationale|sizes)[\"']?[ \t]*:")


@lru_cache(maxsize=8)
def _yaml_start(key: str) -> re.Pattern[str]:
    """Where a YAML answer whose object has ``key`` (``sizes``; ``moves`` for a moves answer) starts."""
    if key == "sizes":
        return _YAML_START_RE
    return re.compile(rf"(?m)^[ \t]*[\"']?(?:rationale|{re.escape(key)})[\"']?[ \t]*:")


@dataclass(frozen=True)
class ParsedAnswer:
    """What was read from one answer.

    Attributes:
        data: The whole object read (a mapping), or None.
        proposal: The configuration part of ``data`` (``rationale`` removed), or None when nothing usable
            was found.
        rationale: The rationale (possibly empty).
        source: How the object was read: ``json``, ``json-repaired``, ``yaml`` or ``none``.
        errors: Why nothing usable was found (empty when ``proposal`` is set).
    """

    data: Any
    proposal: dict[Any, Any] | None
    rationale: str
    source: Source
    errors: tuple[str, ...] = ()


class _DataLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (no exponential "billion laughs" expansions)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not accepted", event.start_mark)
        return super().compose_node(parent, index)


_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _yaml_load(text: str) -> Any:
    """``safe_load`` without aliases; libyaml's parser when available (fast, no Python recursion)."""
    if _FAST_LOADER is None:
        return yaml.load(text, Loader=_DataLoader)  # a SafeLoader subclass: data only
    for event in yaml.parse(text, Loader=_FAST_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError("aliases are not accepted")
    return yaml.load(text, Loader=_FAST_LOADER)  # the safe constructor over libyaml: data only


def _repair(text: str) -> str:
    s = text.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    s = re.sub(r"(?m)^\s*//[^\n]*$", "", s)
    s = re.sub(r"(?m)(?<=[\s,{\[])//[^\n\"]*$", "", s)
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r",(\s*[}\]])", r"\1", s)
    s = re.sub(r"(?<=[:\[,\s])True(?=\s*[,}\]])", "true", s)
    s = re.sub(r"(?<=[:\[,\s])False(?=\s*[,}\]])", "false", s)
    s = re.sub(r"(?<=[:\[,\s])None(?=\s*[,}\]])", "null", s)
    return s


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _strip_think(text: str) -> str:
    """Drop every closed ``<think>...</think>`` block (case-insensitive), in one linear pass.

    An unclosed ``<think>`` and what follows it are kept: the answer may be inside. (A regular expression
    with a lazy ``.*?`` rescans the rest of the text from every ``<think>``: quadratic.)

    >>> _strip_think("a<think>x</THINK>b<think>y")
    'ab<think>y'
    """
    lower = text.translate(_ASCII_LOWER)  # same length as text, unlike str.lower() on some letters
    out: list[str] = []
    pos = 0
    while True:
        start = lower.find("<think>", pos)
        if start < 0:
            break
        end = lower.find("</think>", start + 7)
        if end < 0:
            break  # no later <think> can close either
        out.append(text[pos:start])
        pos = end + 8
    out.append(text[pos:])
    return "".join(out)


def _load(body: str, hint: str = "") -> tuple[Any, Source] | None:
    """Read one candidate as JSON, repaired JSON or YAML; None when none of them works."""
    attempts: list[tuple[Source, Any]] = [
        ("json", lambda: json.loads(body)),
        ("json-repaired", lambda: json.loads(_repair(body))),
        ("yaml", lambda: _yaml_load(body)),
    ]
    if hint.lower() in ("yaml", "yml"):
        attempts = attempts[2:] + attempts[:2]
    for source, fn in attempts:
        try:
            return fn(), source
        except Exception:  # model text: any failure just means "not this reading"
            continue
    return None


def _brace_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """Top-level balanced ``{...}`` spans (double-quoted strings respected) and whether one never closed."""
    spans: list[tuple[int, int]] = []
    unclosed = False
    i, n, restarts = 0, len(text), 0
    while i < n and len(spans) < _MAX_SPANS:
        start = text.find("{", i)
        if start < 0:
            break
        depth, in_str, esc, end = 0, False, False, None
        for j in range(start, n):
            c = text[j]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = j + 1
                    break
        if end is None:
            unclosed = True
            restarts += 1
            if restarts > _MAX_RESTARTS:
                break
            i = start + 1
            continue
        spans.append((start, end))
        i = end
    return spans, unclosed


def _looks_like_config(obj: Any) -> bool:
    if not isinstance(obj, Mapping):
        return False
    if "sizes" in obj:
        return True
    return any(
        isinstance(v, Mapping) and not isinstance(k, bool) and _SIZE_KEY_RE.match(str(k))
        for k, v in obj.items()
    )


def _rationale_from(obj: Mapping[Any, Any], prose: str) -> str:
    value = obj.get("rationale")
    try:
        if value is None:
            text = prose
        elif isinstance(value, (Mapping, list, tuple)):
            text = json.dumps(value, default=str)
        else:
            text = str(value)
    except ValueError:  # an integer too long to print (a YAML 0x literal): the rest is still readable
        text = prose
    text = re.sub(r"[ \t]+\n", "\n", text.strip())
    return text[:MAX_RATIONALE_CHARS]


def _prose(text: str, start: int, end: int) -> str:
    outside = text[:start] + "\n" + text[end:]
    outside = re.sub(r"```[A-Za-z0-9_+.-]*", "", outside)
    return re.sub(r"\n{3,}", "\n\n", outside).strip()


def parse_answer(text: Any) -> ParsedAnswer:
    """Read a rationale and a configuration object from a model's answer; never raises.

    >>> a = parse_answer('Shift to 5x5.\\n```json\\n{"sizes": {"5": {"data_ratio": 1, "hole_ratio": 0.1, '
    ...                  '"wait_ratio": 0.5},}}\\n```')
    >>> a.source, a.rationale, a.proposal["sizes"]["5"]["hole_ratio"]
    ('json-repaired', 'Shift to 5x5.', 0.1)
    >>> parse_answer("no idea").errors
    ('no JSON object found in the answer',)
    """
    return parse_object(text)


def parse_object(
    text: Any,
    *,
    looks: Callable[[Any], bool] = _looks_like_config,
    key: str = "sizes",
    what: str = "configuration",
) -> ParsedAnswer:
    """:func:`parse_answer` for any answer object: ``looks`` says which objects are answers (preferred over
    others), ``key`` is the answer's main entry (the YAML start and the long-answer window's anchor) and
    ``what`` names the object in errors. The moves answer (:mod:`envengineer.engineer.moves`) reads
    ``{"rationale": ..., "moves": ...}`` with it. Never raises."""
    try:
        return _parse(text, looks, key, what)
    except Exception as exc:  # model text must never crash the engineer
        log.warning("could not read an engineer answer (%s: %s)", type(exc).__name__, exc)
        return ParsedAnswer(None, None, "", "none", (f"the answer could not be read ({type(exc).__name__})",))


def _parse(raw: Any, looks: Callable[[Any], bool], key: str, what: str) -> ParsedAnswer:
    text = "" if raw is None else raw if isinstance(raw, str) else str(raw)
    if len(text) <= MAX_ANSWER_CHARS:
        return _parse_window(text, looks, key, what)
    anchor = max(0, text.rfind(key) - MAX_ANSWER_CHARS // 2)
    windows = (text[-MAX_ANSWER_CHARS:], text[anchor : anchor + MAX_ANSWER_CHARS], text[:MAX_ANSWER_CHARS])
    results = []
    for window in dict.fromkeys(windows):  # at most three bounded parses, whatever the answer's length
        got = _parse_window(window, looks, key, what)
        if got.proposal is not None and looks(got.proposal):
            return got
        results.append(got)
    return results[0]


def _parse_window(text: str, looks: Callable[[Any], bool], key: str, what: str) -> ParsedAnswer:
    text = _strip_think(text)

    # (start, end, body, hint) in text order; fenced blocks and bare spans both count.
    candidates: list[tuple[int, int, str, str]] = []
    for m in _FENCE_RE.finditer(text):
        candidates.append((m.start(), m.end(), m.group(2), m.group(1)))
    spans, unclosed = _brace_spans(text)
    candidates += [(s, e, text[s:e], "") for s, e in spans]
    candidates.sort(key=lambda c: (c[0], -c[1]))

    parsed: list[tuple[int, int, Any, Source]] = []
    for start, end, body, hint in candidates:
        got = _load(body, hint)
        if got is not None and got[0] is not None:
            parsed.append((start, end, got[0], got[1]))

    mappings = [p for p in parsed if isinstance(p[2], Mapping)]
    chosen = next((p for p in reversed(mappings) if looks(p[2])), None)
    block = _yaml_block(text, looks, key)
    if block is not None and (chosen is None or (block[0] <= chosen[0] and chosen[1] <= block[1])):
        chosen = block  # a YAML document around (or instead of) flow-style objects
    if chosen is None and mappings and not unclosed:
        chosen = mappings[-1]  # not a configuration: the strict check will say what is wrong with it

    if chosen is None:
        if unclosed:
            err = "the JSON object is not closed (the answer was probably cut off); write a shorter rationale"
        elif parsed:
            kind = _KIND.get(type(parsed[-1][2]), type(parsed[-1][2]).__name__)
            err = f'the {what} must be a JSON object with a "{key}" entry, got {kind}'
        elif spans:
            err = "the JSON object could not be parsed; check quotes, commas and brackets"
        else:
            err = "no JSON object found in the answer"
        return ParsedAnswer(None, None, _rationale_from({}, text), "none", (err,))

    start, end, obj, source = chosen
    data = dict(obj)
    proposal = {k: v for k, v in data.items() if k != "rationale"}
    return ParsedAnswer(data, proposal, _rationale_from(data, _prose(text, start, end)), source)


def _yaml_block(text: str, looks: Callable[[Any], bool], key: str) -> tuple[int, int, Any, Source] | None:
    """A YAML mapping from a ``rationale:`` or ``key:`` line, trimmed from the end until it loads."""
    m = _yaml_start(key).search(text)
    if m is None:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    lines = text[start:].split("\n")[:_MAX_YAML_LINES]
    for _ in range(_MAX_YAML_TRIES):
        if not lines:
            break
        block = textwrap.dedent("\n".join(lines))
        try:
            obj = _yaml_load(block)
        except Exception:  # not YAML yet; trim and retry
            obj = None
        if isinstance(obj, Mapping) and looks(obj):
            end = start + len("\n".join(lines))
            return start, end, obj, "yaml"
        lines.pop()
    return None


def check_answer(parsed: ParsedAnswer, space: ConfigSpace = DEFAULT_SPACE) -> list[str]:
    """Why a parsed answer holds no configuration to project, in words the model can act on; empty if usable.

    Only an answer without a per-size configuration is rejected (and retried): nothing parseable, an
    object that was cut off, no ``sizes`` entry, or ``sizes`` that is not a non-empty object. Anything that
    parses as a configuration is usable, even with values out of range or unknown keys: projection clips
    and records them (SPEC §3); :func:`proposal_issues` lists them.

    >>> check_answer(parse_answer('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.9, "wait_ratio": 0}}}'))
    []
    >>> check_answer(parse_answer('{"sizes": "bigger ones"}'))
    ['"sizes" must be an object keyed by map size, e.g. {"6": {"data_ratio": ..., ...}}; got a string']
    """
    if parsed.proposal is None:
        return list(parsed.errors) or ["no configuration found in the answer"]
    proposal = parsed.proposal
    if "sizes" in proposal:
        sizes = proposal["sizes"]
        if not isinstance(sizes, Mapping) or not sizes:
            kind = "an empty object" if isinstance(sizes, Mapping) else _KIND.get(type(sizes), "null")
            return [
                '"sizes" must be an object keyed by map size, e.g. {"6": {"data_ratio": ..., ...}}; '
                f"got {kind}"
            ]
        return []
    if _looks_like_config(proposal):
        return []
    return [
        'the JSON object has no "sizes" entry; give "sizes" with data_ratio, hole_ratio and '
        "wait_ratio for every map size"
    ]


def proposal_issues(parsed: ParsedAnswer, space: ConfigSpace = DEFAULT_SPACE) -> list[str]:
    """What projection will change in a usable answer's configuration (out of range, unknown keys, ...).

    The strict field-by-field check of :func:`envengineer.mapf.config.validate_proposal`; recorded with the
    attempt, never a reason to reject it.

    >>> answer = '{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.9, "wait_ratio": 0}}}'
    >>> proposal_issues(parse_answer(answer))
    ['sizes.3.hole_ratio: 0.9 is out of range; use a number in [0, 0.5]']
    """
    if parsed.proposal is None:
        return []
    return validate_proposal(parsed.proposal, space)


def repeats_one_setting(raw: Any) -> bool | None:
    """Whether a raw proposal gives every size it names the same numbers (data, hole and wait ratio): a
    degenerate proposal, one setting written for every size whatever the per-size report said. None when
    it names fewer than two sizes or is not a configuration at all.

    >>> same = {"data_ratio": 1, "hole_ratio": 0.5, "wait_ratio": 0.1}
    >>> repeats_one_setting({"sizes": {"3": same, "4": dict(same)}})
    True
    >>> other = {**same, "wait_ratio": 0.2}
    >>> repeats_one_setting({"sizes": {"3": same, "4": other}}), repeats_one_setting("x")
    (False, None)

    A moves answer's record (``{"moves": {...}, "sizes": {...}}``, :mod:`envengineer.engineer.moves`) is
    judged by its moves, as written: the same difficulty and data move for every size it names (a word
    compared without case and surrounding spaces, a missing one read as ``same``) repeats one setting,
    whatever numbers the moves map to.

    >>> up = {"difficulty": "harder", "data": "more"}
    >>> repeats_one_setting({"moves": {"3": up, "4": {"difficulty": "Harder ", "data": "more"}}})
    True
    """
    if isinstance(raw, Mapping) and "moves" in raw:
        return _repeats_one_move(raw["moves"])
    sizes = raw.get("sizes") if isinstance(raw, Mapping) else None
    if not isinstance(sizes, Mapping) or len(sizes) < 2:
        return None
    knobs = ("data_ratio", "hole_ratio", "wait_ratio")
    settings = {
        tuple(repr(v.get(k)) for k in knobs) if isinstance(v, Mapping) else repr(v) for v in sizes.values()
    }
    return len(settings) == 1


def _repeats_one_move(moves: Any) -> bool | None:
    """Whether every size of a moves mapping has the same (difficulty, data) words; None under two sizes."""
    if not isinstance(moves, Mapping) or len(moves) < 2:
        return None

    def word(v: Any) -> str:
        return "same" if v is None else v.strip().lower() if isinstance(v, str) else repr(v)

    settings = {
        (word(v.get("difficulty")), word(v.get("data"))) if isinstance(v, Mapping) else repr(v)
        for v in moves.values()
    }
    return len(settings) == 1
