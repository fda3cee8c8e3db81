"""The moves answer (``engineer.answer: moves``): per-size steps on a difficulty ladder, not free numbers.

Asked for a full configuration (data, hole and wait ratio for every size), the embedded SmolLM2-135M writes
the same numbers for most sizes whatever the report says. A moves answer asks for one word per knob group
and size instead, and code turns the words into numbers::

    {"rationale": "...", "moves": {"3": {"difficulty": "harder", "data": "more"}, "4": {...}, ...}}

* ``difficulty``: ``harder`` is one level up the ladder (``DEFAULT_LEVELS`` of
  :mod:`~envengineer.engineer.curriculum`, the threshold rule's (hole_ratio, wait_ratio) levels, clipped to
  the space's largest hole ratio), ``easier`` one level down, ``same`` keeps the size's hole and wait ratio
  exactly, on the ladder or off it.
  The step is the threshold rule's own (:func:`~envengineer.engineer.curriculum.ladder_move`): from off the
  ladder, ``harder`` goes to the first level with both ratios at or above the size's, ``easier`` to the last
  with both at or below; at the top (bottom) ``harder`` (``easier``) changes nothing.
* ``data``: the size's share of the round (its normalised data ratio) times :data:`DATA_FACTOR` (``more``),
  divided by it (``less``) or kept (``same``); then the shares of the space's sizes are renormalised to sum
  to 1. A size whose share is 0 stays at 0 (``more`` of nothing is nothing).

:func:`apply_moves` gives the configuration as a proposal (``{"sizes": ...}``) that the LLM engineer then
projects and records exactly as it does a numbers answer (and the loop bounds with the trust region when
one is set). Reading never raises on model text: :func:`parse_moves` is
:func:`~envengineer.engineer.proposal.parse_object` (fenced or bare JSON, repaired JSON, YAML) preferring
objects with a ``moves`` entry (or size keys holding ``difficulty``/``data``); :func:`check_moves` says when
an answer holds no moves at all (the engineer retries); :func:`read_moves` resolves the words: a size or a
word left out is ``same``, an unknown word or key is an issue (recorded) and ``same``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envengineer.engineer.curriculum import DEFAULT_LEVELS, Knobs, clip_ladder, ladder_level, ladder_move
from envengineer.engineer.proposal import ParsedAnswer, parse_object
from envengineer.mapf.config import ConfigSpace, RoundConfig, short_repr, size_key

log = logging.getLogger(__name__)

#: How the engineer answers: a full configuration (``numbers``) or per-size moves (``moves``).
AnswerStyle = Literal["numbers", "moves"]
ANSWER_STYLES: tuple[str, ...] = ("numbers", "moves")
DIFFICULTY_WORDS: tuple[str, ...] = ("harder", "same", "easier")
DATA_WORDS: tuple[str, ...] = ("more", "same", "less")
#: ``more`` multiplies a size's data share by this, ``less`` divides it (before renormalising).
DATA_FACTOR = 1.5

_WORDS = {"difficulty": DIFFICULTY_WORDS, "data": DATA_WORDS}


@dataclass(frozen=True)
class SizeMove:
    """One size's moves; ``given`` is False for a size the answer left out (not part of equality)."""

    difficulty: str = "same"
    data: str = "same"
    given: bool = field(default=True, compare=False)


def _size_of(key: Any) -> int | None:
    """A map size from a key (``6``, ``"6"``, ``"6x6"``), or None: the configuration's own reading."""
    try:
        return size_key(key)
    except (ValueError, TypeError):
        return None


def _kind(v: Any) -> str:
    if isinstance(v, Mapping):
        return "an empty object" if not v else "an object"
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(v), "null" if v is None else type(v).__name__
    )


def _holds_moves(obj: Any) -> bool:
    """Whether ``obj`` maps a size key to an object with a ``difficulty`` or ``data`` entry."""
    return isinstance(obj, Mapping) and any(
        _size_of(k) is not None and isinstance(v, Mapping) and ("difficulty" in v or "data" in v)
        for k, v in obj.items()
    )


def looks_like_moves(obj: Any) -> bool:
    """Whether a parsed object is a moves answer: a ``moves`` entry, or sizes holding moves.

    >>> looks_like_moves({"moves": {}}), looks_like_moves({"6x6": {"difficulty": "harder"}})
    (True, True)
    >>> looks_like_moves({"sizes": {"6": {"data_ratio": 1}}})
    False
    """
    if not isinstance(obj, Mapping):
        return False
    return "moves" in obj or _holds_moves(obj) or _holds_moves(obj.get("sizes"))


def moves_body(proposal: Any) -> Any:
    """The per-size moves of a parsed answer: its ``moves``, a ``sizes`` holding moves, or the object itself
    when its size keys hold moves; None when it has none of these."""
    if not isinstance(proposal, Mapping):
        return None
    if "moves" in proposal:
        return proposal["moves"]
    if _holds_moves(proposal.get("sizes")):
        return proposal["sizes"]
    return dict(proposal) if _holds_moves(proposal) else None


def parse_moves(text: Any) -> ParsedAnswer:
    """Read a rationale and a moves object from a model's answer; never raises.

    >>> a = parse_moves('Easier.\\n```json\\n{"moves": {"5": {"difficulty": "easier", "data": "more"},}}'
    ...                 '\\n```')
    >>> a.source, a.rationale, a.proposal["moves"]["5"]["difficulty"]
    ('json-repaired', 'Easier.', 'easier')
    """
    return parse_object(text, looks=looks_like_moves, key="moves", what="answer")


def check_moves(parsed: ParsedAnswer) -> list[str]:
    """Why a parsed answer holds no moves to apply, in words the model can act on; empty if usable.

    >>> check_moves(parse_moves('{"moves": {"3": {"difficulty": "harder", "data": "more"}}}'))
    []
    >>> check_moves(parse_moves('{"moves": "harder"}'))[0].split(";")[1]
    ' got a string'
    """
    if parsed.proposal is None:
        return list(parsed.errors) or ["no moves found in the answer"]
    body = moves_body(parsed.proposal)
    if body is None:
        return [
            'the JSON object has no "moves" entry; give "moves" with "difficulty" (harder, same or easier) '
            'and "data" (more, same or less) for every map size'
        ]
    if not isinstance(body, Mapping) or not body:
        return [
            '"moves" must be an object keyed by map size, e.g. {"6": {"difficulty": "harder", "data": '
            f'"more"}}; got {_kind(body)}'
        ]
    return []


def read_moves(proposal: Any, space: ConfigSpace) -> tuple[dict[int, SizeMove], list[str]]:
    """Every size of ``space`` with its moves, and the issues found; never raises.

    A size left out, or a ``difficulty``/``data`` left out (or null), is ``same``. Words are read without
    case and surrounding spaces. An unknown word, an entry that is not an object, an unknown key, a key
    that is no legal size and a repeated size are each one issue; the size's move is then ``same``.

    >>> moves, issues = read_moves({"moves": {"3": {"difficulty": "Harder", "data": "lots"}}},
    ...                            ConfigSpace(sizes=(3, 4)))
    >>> moves[3], moves[4].given, issues
    (SizeMove(difficulty='harder', data='same', given=True), False, \
["moves.3.data: 'lots' is not a move; use more, same or less (kept same)"])
    """
    try:
        return _read_moves(proposal, space)
    except Exception as exc:  # model data: any failure keeps every size the same, recorded
        log.warning("could not read the engineer's moves (%s)", type(exc).__name__)
        return (
            {n: SizeMove(given=False) for n in space.sizes},
            [f"the moves could not be read ({type(exc).__name__}); kept every size the same"],
        )


def _read_moves(proposal: Any, space: ConfigSpace) -> tuple[dict[int, SizeMove], list[str]]:
    body = moves_body(proposal)
    issues: list[str] = []
    given: dict[int, SizeMove] = {}
    for key, entry in body.items() if isinstance(body, Mapping) else ():
        n = _size_of(key)
        if n is None:
            issues.append(f"moves.{short_repr(key)}: not a map size; write 6 or '6x6'")
            continue
        if n not in space.sizes:
            issues.append(f"moves.{n}: size {n} is not a legal size; use one of {list(space.sizes)}")
            continue
        if n in given:
            issues.append(f"moves.{short_repr(key)}: size {n} given twice; kept the first")
            continue
        if not isinstance(entry, Mapping):
            issues.append(
                f"moves.{n}: expected an object with difficulty and data, got {_kind(entry)}; kept same"
            )
            given[n] = SizeMove()
            continue
        given[n] = _entry_move(n, entry, issues)
    return {n: given.get(n, SizeMove(given=False)) for n in space.sizes}, issues


def _entry_move(n: int, entry: Mapping[Any, Any], issues: list[str]) -> SizeMove:
    """One size's moves from its entry, each unknown word or key appended to ``issues``."""
    words = {}
    for name, allowed in _WORDS.items():
        value = entry.get(name)
        word = value.strip().lower() if isinstance(value, str) else value
        if value is None:
            word = "same"
        elif word not in allowed:
            issues.append(
                f"moves.{n}.{name}: {short_repr(value)} is not a move; use {allowed[0]}, same or "
                f"{allowed[2]} (kept same)"
            )
            word = "same"
        words[name] = word
    for key in entry:
        if key not in _WORDS:
            name = key if isinstance(key, str) and len(key) < 40 else short_repr(key)
            issues.append(f"moves.{n}.{name}: unknown key; use difficulty and data")
    return SizeMove(words["difficulty"], words["data"])


def apply_moves(
    moves: Mapping[int, SizeMove],
    config: RoundConfig,
    space: ConfigSpace,
    levels: tuple[Knobs, ...] = DEFAULT_LEVELS,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The configuration the moves make of ``config`` (as a proposal, ``{"sizes": ...}``) and, per size,
    what was moved: its words, ladder level and knobs before and after, data share before and after.

    A size of ``space`` missing from ``moves`` (or from ``config``: no data, no holes, no waits) is
    ``same``; a word other than harder/easier (more/less) counts as ``same``.

    >>> cfg = RoundConfig.model_validate({"sizes": {
    ...     "3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2},
    ...     "4": {"data_ratio": 1, "hole_ratio": 0.25, "wait_ratio": 0.5}}})
    >>> proposal, _ = apply_moves({3: SizeMove("harder", "more"), 4: SizeMove("easier")}, cfg,
    ...                           ConfigSpace(sizes=(3, 4)))
    >>> proposal["sizes"]["3"], proposal["sizes"]["4"]
    ({'data_ratio': 0.6, 'hole_ratio': 0.2, 'wait_ratio': 0.4}, {'data_ratio': 0.4, 'hole_ratio': 0.2, \
'wait_ratio': 0.4})
    """
    ladder = clip_ladder(tuple(levels), space.hole_ratio_max)
    shares = config.normalised_ratios()
    factor = {"more": DATA_FACTOR, "less": 1.0 / DATA_FACTOR}
    weights: dict[int, float] = {}
    knobs: dict[int, tuple[Knobs, Knobs]] = {}
    for n in space.sizes:
        move = moves.get(n, SizeMove(given=False))
        sc = config.sizes.get(n)
        cur = (sc.hole_ratio, sc.wait_ratio) if sc is not None else (0.0, 0.0)
        new = cur  # same: the size's own knobs, exactly
        if move.difficulty == "harder":
            new = ladder_move(cur, "up", ladder)
        elif move.difficulty == "easier":
            new = ladder_move(cur, "down", ladder)
        knobs[n] = (cur, new)
        weights[n] = shares.get(n, 0.0) * factor.get(move.data, 1.0)
    total = sum(weights.values())
    new_shares = {n: (w / total if total > 0 else 1.0 / len(weights)) for n, w in weights.items()}
    sizes: dict[str, dict[str, float]] = {}
    records: dict[str, dict[str, Any]] = {}
    for n in space.sizes:
        move = moves.get(n, SizeMove(given=False))
        cur, new = knobs[n]
        sizes[str(n)] = {"data_ratio": new_shares[n], "hole_ratio": new[0], "wait_ratio": new[1]}
        records[str(n)] = {
            "difficulty": move.difficulty,
            "data": move.data,
            "given": move.given,
            "level": ladder_level(cur, ladder),
            "new_level": ladder_level(new, ladder),
            "knobs": list(cur),
            "new_knobs": list(new),
            "share": round(shares.get(n, 0.0), 4),
            "new_share": round(new_shares[n], 4),
        }
    return {"sizes": sizes}, records


def levels_now(config: RoundConfig, space: ConfigSpace, levels: tuple[Knobs, ...] = DEFAULT_LEVELS) -> str:
    """Where each size of ``space`` stands on the ladder, for the prompt: its level, or the levels its
    ``easier`` and ``harder`` moves reach when it is between two.

    >>> cfg = RoundConfig.model_validate({"sizes": {
    ...     "3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2},
    ...     "4": {"data_ratio": 1, "hole_ratio": 0.25, "wait_ratio": 0.5}}})
    >>> levels_now(cfg, ConfigSpace(sizes=(3, 4)))
    '3x3 level 1, 4x4 between levels 2 and 3'
    """
    ladder = clip_ladder(tuple(levels), space.hole_ratio_max)
    parts = []
    for n in space.sizes:
        sc = config.sizes.get(n)
        cur = (sc.hole_ratio, sc.wait_ratio) if sc is not None else (0.0, 0.0)
        level = ladder_level(cur, ladder)
        if level is not None:
            parts.append(f"{n}x{n} level {level}")
            continue
        below = ladder_level(ladder_move(cur, "down", ladder), ladder)
        above = ladder_level(ladder_move(cur, "up", ladder), ladder)
        if below is None or above is None:
            parts.append(f"{n}x{n} off the ladder (holes {cur[0]:g}, waits {cur[1]:g})")
        else:
            parts.append(f"{n}x{n} between levels {below} and {above}")
    return ", ".join(parts)
