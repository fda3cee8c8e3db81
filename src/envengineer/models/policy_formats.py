"""Policy formats: how a small policy spells cells, how its cell embeddings start, what its scratchpad holds.

A small policy (:mod:`envengineer.models.small_policy`) is made in one *format*, recorded in its
``config.json``. The format is one :class:`PolicyFormat` record in :data:`POLICY_FORMATS`: its cell spelling
(``atomic`` or ``split``), how its cell embeddings start (``random`` or ``coordinates``) and the SFT target
it is warm-started on, whose :class:`Scratchpad` record (:data:`SCRATCHPADS`) says what the scratchpad holds:
the cells, the moves between them, times, the free moves of each cell, the check against the agents written
before (with ``wait`` where staying is clear), the cells copied before that check. Every reader takes the
contents from these records, never from the target's name: the tokenizer (:meth:`PolicyFormat.tokenizer`),
the writer of the SFT targets (:func:`envengineer.training.dataset.target_response`), the solver's teacher
(:mod:`envengineer.training.teach`) and ``benchmarks/scratchpad_checks.py``. A new format is one entry here
(and one :data:`SCRATCHPADS` record when it writes a new scratchpad), plus what the writer writes for a flag
it adds.

The tokenizer (:func:`build_tokenizer`, built with the ``tokenizers`` library) splits text into pieces: the
testbed's words (the five actions, the prompt's words; with a leading space where one precedes them),
``<answer>``-style tags, cells ``(r,c)`` with ``r, c < 16`` (one piece, or a row piece and a column piece),
the scratchpad's times, free moves and ``wait`` where the format writes them, and single characters for
everything else, so every ASCII text encodes and decodes exactly and an action is one token. The pieces a
format adds come after all others, so the formats before it keep their ids. The chat template wraps each
message as ``<|role|>content<|end|>``; ``<|end|>`` is the end-of-sequence token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from envengineer.errors import ConfigError

__all__ = [
    "CELL_RANGE",
    "CHAT_TEMPLATE",
    "DEFAULT_FORMAT",
    "POLICY_FORMATS",
    "SCRATCHPADS",
    "SPECIAL_TOKENS",
    "PolicyFormat",
    "SFTTarget",
    "Scratchpad",
    "build_tokenizer",
    "check_policy_format",
    "scratchpad_of",
    "vocabulary_words",
]

#: What an SFT completion holds (:func:`envengineer.training.dataset.target_response`; ``SFT_TARGETS``);
#: each has its :class:`Scratchpad` record in :data:`SCRATCHPADS`.
SFTTarget = Literal[
    "solver",
    "solver_path",
    "solver_moves",
    "solver_timed",
    "solver_free",
    "solver_joint",
    "solver_timed_joint",
    "solver_timed_checks",
]


@dataclass(frozen=True)
class Scratchpad:
    """What one SFT target writes inside ``<think>`` before the answer block, and how it spells the plan.

    Attributes:
        think: Each agent's line of cells, from ``t = 0`` to its arrival, inside ``<think>``; without it
            the completion is the answer block alone.
        moves: Each move written between the cell it leaves and the cell it leads to, so each answer line
            is a copy of its agent's scratchpad line and cannot contradict it.
        detours_as_waits: The plan's detours that cost what waiting costs are spelled as waits
            (:func:`envengineer.training.dataset.wait_instead_of_detours`), so the policy learns one
            spelling of an optimal plan, not two.
        times: ``steps``: each step's time (``t1`` ...) before its move, so where another agent stands at
            time t is a look-up of ``tT`` in its line, not a count of its steps. ``cells``: each cell's time
            (``t0`` ...) before the cell. None: no times. A time is one token, ``t0`` to ``t63``.
        hole_check: Before each move, the free moves of the cell the agent stands on: ``up down left
            right`` (one token each, in that order), those that lead to a cell on the board and not a hole.
        joint_check: Before each move, the moves that also keep clear of the agents written before (not
            onto a cell one of them holds at the next time, not swapping with one), then ``wait`` (one
            token) when staying does; an agent stays on its goal once its path ends. The plan's move is
            always one of those listed. With ``hole_check`` too, the two are two lists, the second written
            only after the first agent (before it there is nothing to filter): :meth:`joint_list`.
        copies: Before the joint check, the cells the agents written before hold at the next time, copied
            from their lines by that time's token, so the check compares with cells just written.
    """

    think: bool = False
    moves: bool = False
    detours_as_waits: bool = False
    times: Literal["steps", "cells"] | None = None
    hole_check: bool = False
    joint_check: bool = False
    copies: bool = False

    def __post_init__(self) -> None:
        """A record that writes a part without what it stands beside is a mistake, caught at import."""
        needs = {
            "moves": "think",
            "times": "moves",
            "hole_check": "moves",
            "joint_check": "moves",
            "copies": "joint_check",
        }
        for flag, needed in needs.items():
            if getattr(self, flag) and not getattr(self, needed):
                raise ValueError(f"scratchpad record {self!r}: {flag} needs {needed}")

    @property
    def free_moves(self) -> bool:
        """Whether the free-move words ``up down left right`` are written (either check)."""
        return self.hole_check or self.joint_check

    @property
    def waits(self) -> bool:
        """Whether ``wait`` is listed where staying is clear (the joint check)."""
        return self.joint_check

    def joint_list(self, after_others: bool) -> bool:
        """Whether the check before a move ends with the joint check's list; ``after_others``: agents were
        written before this one. Alone, the joint list holds each free move and ``wait``.

        >>> [SCRATCHPADS[t].joint_list(False) for t in ("solver_timed_checks", "solver_joint")]
        [False, True]
        """
        return self.joint_check and (after_others or not self.hole_check)


#: Each SFT target's record, in the order of :data:`SFTTarget`; the examples are an agent's line.
SCRATCHPADS: dict[str, Scratchpad] = {
    # the answer block alone
    "solver": Scratchpad(),
    # each agent's cells: A0 (1,1) (0,1) (0,0)
    "solver_path": Scratchpad(think=True),
    # each move beside the cell it leads to: A0 (1,1) UP (0,1) LEFT (0,0)
    "solver_moves": Scratchpad(think=True, moves=True, detours_as_waits=True),
    # each step's time before its move: A0 (1,1) t1 UP (0,1) t2 LEFT (0,0)
    "solver_timed": Scratchpad(think=True, moves=True, detours_as_waits=True, times="steps"),
    # each cell's free moves before the move that leaves it: A0 (1,1) up down left UP (0,1) ...
    "solver_free": Scratchpad(think=True, moves=True, detours_as_waits=True, hole_check=True),
    # the moves clear of the agents written before, and wait: A1 (1,1) up down right RIGHT (1,2)
    "solver_joint": Scratchpad(think=True, moves=True, detours_as_waits=True, joint_check=True),
    # with times and copied cells: A1 t0 (1,1) (1,1) up down right RIGHT t1 (1,2)
    "solver_timed_joint": Scratchpad(
        think=True, moves=True, detours_as_waits=True, times="cells", joint_check=True, copies=True
    ),
    # the two checks apart: A1 t0 (1,1) up down left right (1,1) up down right RIGHT t1 (1,2)
    "solver_timed_checks": Scratchpad(
        think=True,
        moves=True,
        detours_as_waits=True,
        times="cells",
        hole_check=True,
        joint_check=True,
        copies=True,
    ),
}


def scratchpad_of(target: str) -> Scratchpad:
    """The record of an SFT target; a :class:`ConfigError` listing them for any other name.

    >>> scratchpad_of("solver_free").hole_check
    True
    """
    if target not in SCRATCHPADS:
        raise ConfigError(f"unknown SFT target {target!r}; use one of {list(SCRATCHPADS)}")
    return SCRATCHPADS[target]


@dataclass(frozen=True)
class PolicyFormat:
    """How a policy spells cells and what its scratchpad holds.

    Attributes:
        cells: ``atomic``: every cell ``(r,c)`` is one token. ``split``: a cell is a row token ``(r`` and
            a column token ``,c)``, so what is learned about row 5 holds in every column.
        embeddings: ``random``: cell embeddings start at random. ``coordinates``: a cell's embedding
            starts as a row vector plus a column vector, each a fixed random projection of Fourier
            features of the index, so neighbouring cells start close and a step is the same change
            everywhere on the board.
        scratchpad: The SFT target the policy is warm-started on (``target: null`` in an SFT preset):
            ``solver_path`` (each agent's cells), ``solver_moves`` (each move beside the cell it leads
            to) or ``solver_timed`` (the same with each step's time before its move, so an agent's cell at
            time t is found in another agent's line by its time token; a time is one token, ``t0`` to
            ``t63``) or ``solver_free`` (the free moves of each cell, ``up down left right`` one token
            each, before the move that leaves it) or ``solver_joint`` (the same, leaving out the moves that
            clash with the agents written before and listing ``wait`` when staying does not) or
            ``solver_timed_joint`` (the same with each cell's time before it and, before each check, the
            cells the agents written before hold at the next time) or ``solver_timed_checks`` (the
            hole check and the check against the agents as two lists),
            :func:`envengineer.training.dataset.target_response`. What it holds, flag by flag, is its
            :class:`Scratchpad` record, :attr:`holds`.
    """

    cells: Literal["atomic", "split"]
    embeddings: Literal["random", "coordinates"]
    scratchpad: SFTTarget

    @property
    def holds(self) -> Scratchpad:
        """What the scratchpad holds: the :data:`SCRATCHPADS` record of :attr:`scratchpad`.

        >>> POLICY_FORMATS["joint-moves"].holds.waits, POLICY_FORMATS["free-moves"].holds.waits
        (True, False)
        """
        return SCRATCHPADS[self.scratchpad]

    def tokenizer(self, max_length: int = 2048) -> Any:
        """The tokenizer of a new policy in this format (:func:`build_tokenizer`): the pieces of the words
        its scratchpad writes."""
        holds = self.holds
        return build_tokenizer(
            max_length,
            cells=self.cells,
            times=holds.times is not None,
            free_moves=holds.free_moves,
            wait=holds.waits,
        )


#: The formats by name: ``v1`` is every policy made before formats were recorded; the others are the
#: candidates measured in docs/models.md (``benchmarks/bench_warm_start.py --format``).
POLICY_FORMATS: dict[str, PolicyFormat] = {
    "v1": PolicyFormat("atomic", "random", "solver_path"),
    "moves": PolicyFormat("atomic", "random", "solver_moves"),
    "coord-moves": PolicyFormat("atomic", "coordinates", "solver_moves"),
    "split-moves": PolicyFormat("split", "coordinates", "solver_moves"),
    "timed-moves": PolicyFormat("split", "coordinates", "solver_timed"),
    "free-moves": PolicyFormat("split", "coordinates", "solver_free"),
    "joint-moves": PolicyFormat("split", "coordinates", "solver_joint"),
    "timed-joint": PolicyFormat("split", "coordinates", "solver_timed_joint"),
    "timed-checks": PolicyFormat("split", "coordinates", "solver_timed_checks"),
}
#: The format of new policies (``policy init``, ``policy:SIZE``).
DEFAULT_FORMAT = "free-moves"


def check_policy_format(name: str) -> str:
    """``name`` when it names a policy format, else a ConfigError listing them.

    >>> check_policy_format("v1")
    'v1'
    """
    if name not in POLICY_FORMATS:
        raise ConfigError(f"unknown policy format {name!r}; use one of {list(POLICY_FORMATS)}")
    return name


SPECIAL_TOKENS = ("<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{%- for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{%- endif %}"
)
_TAGS = ("<answer>", "</answer>", "<think>", "</think>")
_ACTIONS = ("UP", "DOWN", "LEFT", "RIGHT", "WAIT")
#: Cells ``(r,c)`` with ``r, c < CELL_RANGE`` are one token each (or a row and a column token).
CELL_RANGE = 16
_TIME_RANGE = 64  # times t0..t63 are one token each (Scratchpad.times)
_FREE_MOVES = (" up", " down", " left", " right")  # one token each (Scratchpad.free_moves)
_WAIT = (" wait",)  # one token (Scratchpad.waits)


def vocabulary_words() -> list[str]:
    """The whole-word pieces: the actions and every word of two or more letters in the testbed's prompts.

    Built from the prompt text itself (deterministic; no corpus file), so a prompt change adds words
    to policies created afterwards; older tokenizers still encode the new text, letter by letter.
    """
    from envengineer.mapf.instance import Instance
    from envengineer.mapf.prompt import SYSTEM_PROMPT, build_prompt, render_compact

    boards = [
        Instance(f"v{k}", ("." * 10,) * 10, tuple((0, i) for i in range(k)), tuple((9, i) for i in range(k)))
        for k in range(1, 6)
    ]
    prompts = [f(b) for b in boards for f in (build_prompt, render_compact)]
    text = "\n".join([SYSTEM_PROMPT, *prompts, " ".join(_ACTIONS)])
    words = set(re.findall(r"[A-Za-z]{2,}", text)) | set(_ACTIONS)
    return sorted(words, key=lambda w: (-len(w), w))


def build_tokenizer(
    max_length: int = 2048,
    cells: str = "atomic",
    times: bool = False,
    free_moves: bool = False,
    wait: bool = False,
) -> Any:
    """The testbed tokenizer as a ``transformers.PreTrainedTokenizerFast`` with its chat template.

    ``cells`` is :attr:`PolicyFormat.cells`: ``atomic`` makes ``(r,c)`` one token, ``split`` two
    (``(r`` and ``,c)``). ``times`` adds the pieces `` t0`` to `` t63`` (the ``solver_timed``
    scratchpad's times), ``free_moves`` the pieces `` up``, `` down`` and `` right`` (`` left`` is a
    word of the prompts already; the ``solver_free`` scratchpad's free moves), ``wait`` the piece
    `` wait`` (the ``solver_joint`` scratchpad's). Either way every ASCII text encodes and decodes exactly.

    >>> tok = build_tokenizer()
    >>> text = "<answer>\\nA0: RIGHT DOWN\\nA1: WAIT\\n</answer>"
    >>> tok.decode(tok.encode(text)) == text
    True
    >>> tok.convert_ids_to_tokens(tok.encode("A0: RIGHT DOWN"))
    ['A', '0', ':', ' RIGHT', ' DOWN']
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if cells not in ("atomic", "split"):
        raise ConfigError(f"unknown cell spelling {cells!r}; use 'atomic' or 'split'")
    words = vocabulary_words()
    chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
    index = rf"(?:1[0-{CELL_RANGE - 11}]|\d)"  # 0..15
    if cells == "atomic":
        cell_pieces = [f"({r},{c})" for r in range(CELL_RANGE) for c in range(CELL_RANGE)]
        cell_pattern = rf" ?\({index},{index}\)"
    else:  # a row piece "(r" (with or without a space) and a column piece ",c)"
        rows = [f"({r}" for r in range(CELL_RANGE)]
        cell_pieces = rows + [" " + r for r in rows] + [f",{c})" for c in range(CELL_RANGE)]
        cell_pattern = rf" ?\({index}(?=,{index}\))|,{index}\)"
    pieces = list(SPECIAL_TOKENS) + list(_TAGS) + chars
    pieces += [p for w in words for p in (w, " " + w) if p not in pieces]
    spaced = (lambda c: (c, " " + c)) if cells == "atomic" else (lambda c: (c,))  # split pieces carry theirs
    pieces += [p for c in cell_pieces for p in spaced(c) if p not in pieces]
    time_pattern = ""
    if times:  # after every other piece: the formats without times keep their ids
        pieces += [f" t{t}" for t in range(_TIME_RANGE)]
        time_pattern = r" t(?:[1-5]\d|6[0-3]|\d)\b|"  # t0..t63, not a longer number
    free_pattern = ""
    if free_moves:  # after every other piece too, and only with their space: "up" alone stays letters
        pieces += [p for p in _FREE_MOVES if p not in pieces]
        free_pattern = "|".join(rf"{re.escape(p)}\b" for p in _FREE_MOVES) + "|"
    if wait:  # last of all: the formats before keep their ids
        pieces += [p for p in _WAIT if p not in pieces]
        free_pattern += "|".join(rf"{re.escape(p)}\b" for p in _WAIT) + "|"
    vocab = {piece: i for i, piece in enumerate(pieces)}
    alternatives = "|".join(re.escape(t) for t in _TAGS)
    word_pattern = "|".join(re.escape(w) for w in words)
    pattern = rf"{alternatives}|{cell_pattern}|{time_pattern}{free_pattern} ?(?:{word_pattern})\b|[\s\S]"
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        unk_token="<|unk|>",
        eos_token="<|end|>",
        model_max_length=max_length,
    )
    fast.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[2:5])})
    fast.chat_template = CHAT_TEMPLATE
    return fast
