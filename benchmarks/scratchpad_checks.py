"""Does a warm-started policy fail in its check or in following it? Its failures against its own scratchpad.

For a policy of the ``free-moves``, ``joint-moves``, ``timed-joint`` or ``timed-checks`` format
(docs/models.md), answers the held-out boards of ``--agents`` agents greedily (``common.held_out``'s sets,
sizes 3-8) and sorts every invalid answer by the validator's failure and by what its scratchpad shows,
reading it in order up to the first word that differs from what the solver's target would write there:

* ``copy wrong`` (``timed-joint``, ``timed-checks``): a cell copied before a check differs from where
  that agent stands at the next time, as its own line says;
* ``check wrong``: some list of moves in the scratchpad differs from the true one (the cell's free moves;
  for ``joint-moves``, those clear of the agents written before, as the scratchpad itself walks them);
* ``move not listed``: every list is right, and some move written after one is not in it;
* ``followed``: every list is right and every move is among its list's; the failure is one the check
  does not cover (a conflict with an agent written later, a goal not reached, ...);
* ``no scratchpad``: no ``<think>`` block, or a line without cells.

Usage::

    python benchmarks/scratchpad_checks.py runs/wf1/sft/checkpoint --agents 2
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

from common import answer, held_out  # greedy answers in batches of 64; the held-out sets
from envengineer.mapf.instance import Instance
from envengineer.mapf.validator import validate
from envengineer.models import policy_formats
from envengineer.models.policy_formats import POLICY_FORMATS, scratchpad_of
from envengineer.models.small_policy import policy_format_of
from envengineer.training.dataset import checked_moves

_CELL = re.compile(r"\((\d+),(\d+)\)")


def classify(instance: Instance, text: str, scratchpad: str) -> str:
    """What the scratchpad of an answer shows: ``copy wrong``, ``check wrong``, ``move not listed``,
    ``followed`` or ``no scratchpad`` (module docstring); ``scratchpad`` is one of :data:`SCRATCHPADS`,
    read as its record (``envengineer.models.policy_formats.SCRATCHPADS``) says it is written."""
    holds = scratchpad_of(scratchpad)
    if "<think>" not in text or "</think>" not in text:
        return "no scratchpad"
    walked: list[list[Cell]] = []  # the cells of the lines read so far
    verdict = "followed"
    for line in text.split("<think>", 1)[1].split("</think>", 1)[0].strip().splitlines():
        read = _read_line(line.split()[1:], holds.times == "cells")
        if read is None:
            return "no scratchpad"
        cells, steps = read
        for t, (written, move) in enumerate(steps):
            expected = checked_moves(instance, scratchpad, cells, t, walked)
            if written != expected:  # the first word that differs: another cell where a cell is copied?
                pairs = zip([*written, ""], [*expected, ""], strict=False)
                w, e = next((w, e) for w, e in pairs if w != e)
                return "copy wrong" if _CELL.fullmatch(w) and _CELL.fullmatch(e) else "check wrong"
            last = expected[max((k + 1 for k, w in enumerate(expected) if _CELL.fullmatch(w)), default=0) :]
            # a joint list holds wait where staying is clear; a free-moves list never lists it
            if move.lower() not in last + ([] if holds.joint_list(bool(walked)) else ["wait"]):
                verdict = "move not listed"
        walked.append(cells)
    return verdict


Cell = tuple[int, int]
#: The scratchpads this script reads: those with a check before each move (of the formats free-moves,
#: joint-moves, timed-joint, timed-checks), each time written before its cell where there are times.
SCRATCHPADS = tuple(
    name for name, holds in policy_formats.SCRATCHPADS.items() if holds.free_moves and holds.times != "steps"
)


def _read_line(words: list[str], timed: bool) -> tuple[list[Cell], list[tuple[list[str], str]]] | None:
    """An agent's cells and its steps (the words between a cell and its move; the move), or ``None``
    when the line does not read as the scratchpad."""
    if timed:  # t0 cell [check... MOVE tT cell]...
        at = [k + 1 for k, w in enumerate(words) if re.fullmatch(r"t\d+", w)]
    else:  # cell [check... MOVE cell]...
        at = [k for k, w in enumerate(words) if _CELL.fullmatch(w)]
    if not at or at[-1] >= len(words) or not all(_CELL.fullmatch(words[k]) for k in at):
        return None
    steps = []
    for here, there in pairwise(at):
        between = words[here + 1 : there - 1 if timed else there]
        if not between or _CELL.fullmatch(between[-1]):  # no move between two cells
            return None
        steps.append((between[:-1], between[-1]))
    return [_cell(words[k]) for k in at], steps


def _cell(word: str) -> Cell:
    m = _CELL.fullmatch(word)
    assert m is not None
    return int(m[1]), int(m[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--agents", type=int, default=2, help="agent count of the held-out set (default 2)")
    p.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and wait subset")
    p.add_argument("--max-new-tokens", type=int, default=640)
    args = p.parse_args(argv)
    spec = policy_format_of(args.checkpoint)
    if spec is None or spec.scratchpad not in SCRATCHPADS:
        read = [name for name, f in POLICY_FORMATS.items() if f.scratchpad in SCRATCHPADS]
        p.error(f"{args.checkpoint} is not a policy of a format this script reads ({', '.join(read)})")
    instances = held_out(args.per_cell, agents=args.agents)
    texts = answer(str(args.checkpoint), instances, args.max_new_tokens)
    counts: Counter[tuple[str, str]] = Counter()
    collide = 0
    for inst, text in zip(instances, texts, strict=True):
        verdict = validate(inst, text)
        if not verdict.valid:
            counts[(str(verdict.failure), classify(inst, text, spec.scratchpad))] += 1
            collide += collides(inst, text)
    print(f"# {args.checkpoint}: {sum(counts.values())} invalid of {len(instances)} ({args.agents} agents)")
    for (failure, what), n in counts.most_common():
        print(f"{n:5d}  {failure:18s} {what}")
    print(
        f"# {collide} answers collide, holes aside (a vertex or swap conflict on the board without its holes)"
    )
    return 0


def collides(instance: Instance, text: str) -> bool:
    """Whether the answer's agents collide, whatever its holes: the validator checks holes before
    conflicts, so an answer that steps on a hole and collides counts as a hole; scored on the same board
    without its holes it counts as the conflict."""
    frozen = dataclasses.replace(  # optima of 0: only the failure is read, and none is "below" them
        instance,
        grid=tuple(row.replace("H", ".") for row in instance.grid),
        optimal_soc=0,
        optimal_makespan=0,
    )
    return validate(frozen, text).failure in ("vertex_conflict", "swap_conflict")


if __name__ == "__main__":
    sys.exit(main())
