"""Instances → the datasets TRL trains on, and the round's dataset manifest.

* :func:`prompt_dataset` — GRPO: one row per instance with a conversational ``prompt`` (the testbed's chat
  messages), the ``instance`` column holding :meth:`Instance.to_json` (what the testbed's reward functions
  read) and the ``id``.
* :func:`sft_dataset` — SFT: the same prompt plus a ``completion`` holding the solver's SoC-optimal plan as
  the canonical answer text, so a small model learns the answer format.
* :func:`write_manifest` — ``manifest.jsonl``: one line per instance (id, seed tuple, board hash, size, ...),
  so a round's data can be regenerated and checked exactly.

``datasets`` is imported inside the functions that build datasets; the manifest needs only the testbed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, get_args

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.models.policy_formats import SFTTarget, scratchpad_of

log = logging.getLogger(__name__)


def prompt_rows(
    instances: Sequence[Instance], *, system: bool = True, style: str = "full"
) -> list[dict[str, Any]]:
    """The rows of the GRPO prompt dataset (plain dicts; no ``datasets`` needed).

    Args:
        instances: The round's instances (solved: the rewards need their optima).
        system: Whether the chat messages start with the testbed's system message.
        style: Prompt style, ``"full"`` or ``"compact"`` (:func:`envengineer.mapf.prompt.build_messages`).
    """
    from envengineer.mapf.prompt import build_messages

    _check_solved(instances)
    return [
        {
            "prompt": build_messages(inst, system=system, style=style),
            "instance": inst.to_json(),
            "id": inst.id,
        }
        for inst in instances
    ]


def prompt_dataset(instances: Sequence[Instance], *, system: bool = True, style: str = "full") -> Any:
    """A ``datasets.Dataset`` of conversational prompts with ``instance`` and ``id`` columns.

    Args:
        instances: The round's instances (solved).
        system: Whether the chat messages start with the testbed's system message.
        style: Prompt style, ``"full"`` or ``"compact"``.

    Returns:
        A ``datasets.Dataset`` with columns ``prompt`` (list of chat messages), ``instance``, ``id``.
    """
    from datasets import Dataset

    return Dataset.from_list(prompt_rows(instances, system=system, style=style))


def target_response(instance: Instance, target: str = "solver") -> str:
    """The supervised target: the solver's SoC-optimal joint plan as the canonical ``<answer>`` block.

    Args:
        instance: A solvable instance.
        target: ``"solver"``: the answer block alone. ``"solver_path"``: first, inside ``<think>``, each
            agent's path as the cells it stands on from t = 0 to its arrival, then the answer block. The
            path is a scratchpad for small policies: each cell is next to the one before it and is checked
            against the prompt's holes one token at a time, and the moves are read off pairs of cells.
            The validator scores only the answer block, so the target stays the same plan.
            ``"solver_moves"``: the same scratchpad with each move written between the cell it leaves
            and the cell it leads to; each answer line is then a copy of the moves of its agent's
            scratchpad line, so the answer cannot contradict the reasoning.
            ``"solver_timed"``: ``solver_moves`` with the time of each step before its move, so where
            another agent stands at time t is a look-up of ``tT`` in its line, not a count of its steps.
            ``"solver_free"``: ``solver_moves`` with the free moves of the cell an agent stands on
            (``up down left right``, those whose cell is on the board and not a hole) before each move,
            so the check of a move against the holes is written down, one neighbour a token.
            ``"solver_joint"``: ``solver_free`` where a move is free only if it also keeps clear of the
            agents written before (not onto the cell one of them holds at the next time, not swapping
            with one), and ``wait`` is listed when staying does: the check against the other agents
            is written down too, so the plan's move is always one of those listed.
            ``"solver_timed_joint"``, ``"solver_timed_checks"``: ``solver_joint`` with each cell's time
            before it and the cells the earlier agents hold at the next time (found by their time) before
            the check, in the second with ``solver_free``'s list first (:func:`checked_moves`).
            What each target writes, flag by flag, is its record in
            :data:`envengineer.models.policy_formats.SCRATCHPADS`; the writer reads the record, not the name.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> print(target_response(inst))
    <answer>
    A0: RIGHT
    A1: RIGHT
    </answer>
    >>> print(target_response(inst, "solver_path"))
    <think>
    A0 (1,0) (1,1)
    A1 (1,1) (1,2)
    </think>
    <answer>
    A0: RIGHT
    A1: RIGHT
    </answer>
    >>> print(target_response(inst, "solver_moves"))
    <think>
    A0 (1,0) RIGHT (1,1)
    A1 (1,1) RIGHT (1,2)
    </think>
    <answer>
    A0: RIGHT
    A1: RIGHT
    </answer>
    >>> print(target_response(inst, "solver_timed").split("</think>")[0])
    <think>
    A0 (1,0) t1 RIGHT (1,1)
    A1 (1,1) t1 RIGHT (1,2)
    <BLANKLINE>
    >>> print(target_response(inst, "solver_free").split("</think>")[0])
    <think>
    A0 (1,0) up down right RIGHT (1,1)
    A1 (1,1) up down left right RIGHT (1,2)
    <BLANKLINE>
    """
    from envengineer.mapf.policies import optimal_paths

    holds = scratchpad_of(target)
    paths = optimal_paths(instance)
    if holds.detours_as_waits:
        paths = wait_instead_of_detours(instance, paths)
    return plan_response(instance, paths, target)


def plan_response(instance: Instance, paths: Sequence[Sequence[tuple[int, int]]], target: str) -> str:
    """The response that ``target`` spells (:func:`target_response`) for a given plan: each agent's cells
    from ``t = 0`` (it stays on its last cell afterwards). The solver's teacher writes its completions of a
    policy's own answers with it (:mod:`envengineer.training.teach`).

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> print(plan_response(inst, [[(1, 0), (1, 1)], [(1, 1), (1, 2)]], "solver_moves").split("</think>")[0])
    <think>
    A0 (1,0) RIGHT (1,1)
    A1 (1,1) RIGHT (1,2)
    <BLANKLINE>
    """
    from envengineer.mapf.instance import agent_name
    from envengineer.mapf.solver import paths_to_actions
    from envengineer.mapf.validator import format_answer

    holds = scratchpad_of(target)
    plan = paths_to_actions(paths)
    answer = format_answer(plan)
    if not holds.think:
        return answer
    lines = [
        " ".join([agent_name(i), *_scratchpad_words(instance, target, path, actions, paths[:i])])
        for i, (path, actions) in enumerate(zip(paths, plan, strict=True))
    ]
    return "<think>\n" + "\n".join(lines) + "\n</think>\n" + answer


def _scratchpad_words(
    instance: Instance,
    target: str,
    path: Sequence[tuple[int, int]],
    actions: Sequence[str],
    earlier: Sequence[Sequence[tuple[int, int]]],
) -> list[str]:
    """One agent's scratchpad line after its name, as ``target`` spells it (:func:`target_response`);
    ``earlier``: the paths of the agents written before it. Each part is written where the target's record
    (:func:`~envengineer.models.policy_formats.scratchpad_of`) says it holds it."""
    holds = scratchpad_of(target)
    cells = [f"({r},{c})" for r, c in path[: len(actions) + 1]]
    if not holds.moves:  # cell cell ... cell
        return cells
    # cell [tT] [check] MOVE cell ...; with each cell's time: t0 cell [check] MOVE t1 cell ...
    words = ["t0", cells[0]] if holds.times == "cells" else [cells[0]]
    for t, (action, cell) in enumerate(zip(actions, cells[1:], strict=True)):
        words += [
            *([f"t{t + 1}"] if holds.times == "steps" else []),
            *checked_moves(instance, target, path, t, earlier),
            action,
            *([f"t{t + 1}"] if holds.times == "cells" else []),
            cell,
        ]
    return words


def checked_moves(
    instance: Instance,
    target: str,
    path: Sequence[tuple[int, int]],
    t: int,
    earlier: Sequence[Sequence[tuple[int, int]]],
) -> list[str]:
    """What a scratchpad writes between the cell at time ``t`` of ``path`` and the move that leaves it (its
    record's checks; nothing for a target without one): the hole check (:func:`free_moves`), then the joint
    check (:func:`joint_moves`) where :meth:`~envengineer.models.policy_formats.Scratchpad.joint_list` says,
    after the cells the ``earlier`` agents hold at ``t + 1`` where the record copies them."""
    holds = scratchpad_of(target)
    words = free_moves(instance, path[t]) if holds.hole_check else []
    if holds.joint_list(bool(earlier)):
        if holds.copies:
            words += [f"({r},{c})" for r, c in (p[min(t + 1, len(p) - 1)] for p in earlier)]
        words += joint_moves(instance, path, t, earlier)
    return words


def free_moves(instance: Instance, cell: tuple[int, int]) -> list[str]:
    """The moves that lead from ``cell`` to a cell on the board and not a hole, lower case, in the order
    up, down, left, right (the ``solver_free`` scratchpad's check).

    >>> free_moves(Instance("x", ("...", ".H.", "..."), ((0, 0),), ((2, 2),), 4, 1, 4), (0, 1))
    ['left', 'right']
    """
    from envengineer.mapf.instance import MOVES

    r, c = cell
    return [
        name.lower()
        for name in ("UP", "DOWN", "LEFT", "RIGHT")
        if instance.is_free((r + MOVES[name][0], c + MOVES[name][1]))
    ]


def joint_moves(
    instance: Instance, path: Sequence[tuple[int, int]], t: int, earlier: Sequence[Sequence[tuple[int, int]]]
) -> list[str]:
    """The ``solver_joint`` check at time ``t`` of ``path``: the :func:`free_moves` of its cell that neither
    lead onto a cell an ``earlier`` agent holds at ``t + 1`` nor swap with one, then ``wait`` when no
    earlier agent holds the cell at ``t + 1``. An agent stays on its goal once its path ends.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> joint_moves(inst, [(1, 1), (1, 0)], 0, [[(1, 0), (1, 1)]])  # right: (1,2) free; left: a swap
    ['up', 'down', 'right']
    """
    from envengineer.mapf.instance import MOVES

    def at(p: Sequence[tuple[int, int]], time: int) -> tuple[int, int]:
        return p[min(time, len(p) - 1)]

    r, c = cell = at(path, t)
    taken = {at(p, t + 1) for p in earlier}
    swaps = {at(p, t) for p in earlier if at(p, t + 1) == cell}
    moves = [
        name
        for name in free_moves(instance, cell)
        if (r + MOVES[name.upper()][0], c + MOVES[name.upper()][1]) not in taken | swaps
    ]
    return moves + (["wait"] if cell not in taken else [])


def wait_instead_of_detours(
    instance: Instance, paths: Sequence[Sequence[tuple[int, int]]], frozen: Sequence[int] | None = None
) -> list[list]:
    """The same optimal plan with every detour that can become waits spelled as waits.

    An optimal joint plan may send an agent away and back (``UP DOWN``) where waiting twice costs the
    same: the solver picks either. A model that learns from both spellings learns to wander; this
    keeps one, waiting, wherever the plan stays valid at no higher sum of costs (each change is checked
    by the validator, so the result is never worse than the plan it is given). ``frozen[a]``: the first
    cells of agent ``a``'s path that must stay as they are (a prefix the policy wrote).

    >>> inst = Instance("x", ("...", "...", "..."), ((0, 0),), ((0, 1),), 1, 1, 1)
    >>> wait_instead_of_detours(inst, [[(0, 0), (1, 0), (0, 0), (0, 1)]])
    [[(0, 0), (0, 0), (0, 0), (0, 1)]]
    """
    from envengineer.mapf.solver import paths_to_actions
    from envengineer.mapf.validator import validate_plan

    out = [list(path) for path in paths]
    soc = validate_plan(instance, paths_to_actions(out)).soc
    changed = True
    while changed:
        changed = False
        for agent, path in enumerate(out):
            keep = frozen[agent] if frozen is not None else 0
            for i, cell in enumerate(path):
                if i + 1 < keep:
                    continue  # the change would rewrite a frozen cell
                last = max(t for t, c in enumerate(path) if c == cell)
                if last <= i + 1 or all(c == cell for c in path[i:last]):
                    continue
                trial = [*out[:agent], path[:i] + [cell] * (last - i) + path[last:], *out[agent + 1 :]]
                verdict = validate_plan(instance, paths_to_actions(trial))
                if verdict.valid and soc is not None and verdict.soc <= soc:
                    out, changed = trial, True
                    break
            if changed:
                break
    return out


#: What an SFT completion holds (:func:`target_response`).
SFT_TARGETS: tuple[str, ...] = get_args(SFTTarget)


def sft_rows(
    instances: Sequence[Instance],
    *,
    system: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
    style: str = "full",
    target: str = "solver",
) -> list[dict[str, Any]]:
    """The rows of the SFT dataset: conversational prompt + assistant completion with the optimal plan.

    Args:
        instances: Solved instances.
        system: Whether the chat messages start with the testbed's system message.
        chat_template_kwargs: Passed to the chat template per example (e.g. ``{"enable_thinking": False}``).
        style: Prompt style, ``"full"`` or ``"compact"``.
        target: What the completion holds, ``"solver"`` or ``"solver_path"`` (:func:`target_response`).
    """
    from envengineer.mapf.prompt import build_messages

    _check_solved(instances)
    rows = []
    for inst in instances:
        row: dict[str, Any] = {
            "prompt": build_messages(inst, system=system, style=style),
            "completion": [{"role": "assistant", "content": target_response(inst, target)}],
            "instance": inst.to_json(),
            "id": inst.id,
        }
        if chat_template_kwargs:
            row["chat_template_kwargs"] = dict(chat_template_kwargs)
        rows.append(row)
    return rows


def sft_dataset(
    instances: Sequence[Instance],
    *,
    system: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
    style: str = "full",
) -> Any:
    """A ``datasets.Dataset`` in TRL's conversational prompt-completion format (loss on the answer only)."""
    from datasets import Dataset

    rows = sft_rows(instances, system=system, chat_template_kwargs=chat_template_kwargs, style=style)
    return Dataset.from_list(rows)


def prompt_lengths(
    tokenizer: Any, prompts: Iterable[list[dict[str, str]]], **template_kwargs: Any
) -> list[int]:
    """Token count of each conversational prompt after the chat template (with the generation prompt)."""
    lengths = []
    for messages in prompts:
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **template_kwargs
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        lengths.append(len(ids))
    return lengths


def check_prompt_lengths(
    tokenizer: Any, rows: Sequence[dict[str, Any]], max_prompt_length: int | None, **template_kwargs: Any
) -> int:
    """Raise when a prompt is longer than ``max_prompt_length`` tokens; return the longest length.

    TRL 1.16's GRPO trainer does not truncate prompts, so an over-long prompt would silently cost memory
    and time; this check stops the run before training with the numbers to change.
    """
    if not rows:
        return 0
    lengths = prompt_lengths(tokenizer, (r["prompt"] for r in rows), **template_kwargs)
    longest = max(lengths)
    if max_prompt_length is not None and longest > max_prompt_length:
        worst = rows[lengths.index(longest)]["id"]
        over = sum(n > max_prompt_length for n in lengths)
        raise ConfigError(
            f"{over} of {len(rows)} prompts are longer than max_prompt_length={max_prompt_length} tokens "
            f"(longest: {worst!r}, {longest} tokens); raise max_prompt_length in the preset "
            "or use smaller maps"
        )
    log.info("prompts: %d, longest %d tokens (limit %s)", len(rows), longest, max_prompt_length)
    return longest


def manifest_line(instance: Instance) -> dict[str, Any]:
    """One manifest record: enough to regenerate and recognise the instance.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2, seed=(7, 0))
    >>> sorted(manifest_line(inst))[:4]
    ['board_hash', 'hole_ratio', 'id', 'needs_wait']
    """
    return {
        "id": instance.id,
        "seed": list(instance.seed),
        "board_hash": instance.board_hash(),
        "size": instance.size,
        "num_agents": instance.num_agents,
        "hole_ratio": round(instance.hole_ratio, 6),
        "needs_wait": instance.needs_wait,
        "optimal_soc": instance.optimal_soc,
    }


def write_manifest(instances: Iterable[Instance], path: str | Path) -> Path:
    """Write ``manifest.jsonl`` (one :func:`manifest_line` per instance), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for inst in instances:
            fh.write(json.dumps(manifest_line(inst), separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path


def _check_solved(instances: Sequence[Instance]) -> None:
    if not instances:
        raise ConfigError("no training instances; the round configuration must give num_samples >= 1")
    unsolved = [inst.id for inst in instances if not inst.solved]
    if unsolved:
        raise ConfigError(
            f"{len(unsolved)} instance(s) carry no optimum (first: {unsolved[0]!r}); "
            "run `envengineer solve` on the file first"
        )
