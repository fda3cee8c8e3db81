"""The task prompt: the rules, the board and the exact answer format, short enough for small models.

The prompt is a pure function of the instance (no randomness, no dates), so a prompt can be
snapshot-tested and a dataset rebuilt byte for byte. It never shows the optimum.

The board is shown twice, because small models read one view better than the other: as a marked grid
with row and column indices (``S0``/``G0`` for the start and goal of ``A0``, ``H`` for holes, ``.`` for
ice) and as a list of start and goal coordinates.

Two prompt styles share the answer format, the parser and the validator:

* ``full`` (default): system message, task, rules, board and answer format, for pretrained LLMs.
* ``compact``: the board and the agents alone (the size, the holes' coordinates, one line per agent),
  for the small from-scratch policies (:mod:`envengineer.models.small_policy`), which learn the rules
  from the solver's plans and the reward instead of reading them. Holes are listed by coordinates rather
  than drawn, because a small model matches a cell it is about to enter against a list of cells far more
  easily than it finds that cell in a drawn grid.
"""

from __future__ import annotations

from typing import Literal

from envengineer.errors import ConfigError
from envengineer.mapf.instance import HOLE, Instance, agent_name

__all__ = [
    "PROMPT_STYLES",
    "SYSTEM_PROMPT",
    "PromptStyle",
    "build_messages",
    "build_prompt",
    "check_prompt_style",
    "render_board",
    "render_compact",
]

PromptStyle = Literal["full", "compact"]
PROMPT_STYLES: tuple[str, ...] = ("full", "compact")

SYSTEM_PROMPT = (
    "You plan collision-free paths for several agents on a grid. Think step by step if it helps, "
    "then give the whole plan in the <answer> format the user asks for."
)

_RULES = """\
Rules:
- Cells are (row, col); row 0 is the top row and col 0 the left column.
- At each time step every agent takes one action: UP (row-1), DOWN (row+1), LEFT (col-1), RIGHT (col+1) \
or WAIT (stay).
- An agent must never leave the grid or stand on a hole (H).
- Two agents must never be on the same cell at the same time, and must never swap cells in one step. \
Moving into a cell that another agent leaves in the same step is allowed.
- All agents move at the same time. A shorter action list is padded with WAIT at the end.
- At the end every agent must stand on its own goal. An agent's cost is the time step from which it stays \
on its goal; make the sum of all agents' costs as small as possible."""

_EXAMPLE_ACTIONS = ("RIGHT DOWN WAIT", "UP LEFT", "DOWN DOWN RIGHT", "WAIT UP", "LEFT")


def _cell(cell: tuple[int, int]) -> str:
    return f"({cell[0]},{cell[1]})"


def render_board(instance: Instance) -> str:
    """The board as text: a marked grid with row/column indices, a legend and the agents' coordinates.

    >>> from envengineer.mapf.instance import Instance
    >>> print(render_board(Instance("x", ("...", ".H.", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)))))
    Board (. ice, H hole, Si start of agent Ai, Gi goal of agent Ai):
        0     1     2
     0  S0G1  .     S1G0
     1  .     H     .
     2  .     .     .
    Agents:
    A0: start (0,0), goal (0,2)
    A1: start (0,2), goal (0,0)
    """
    n = instance.size
    marks = [["H" if ch == HOLE else "" for ch in row] for row in instance.grid]
    for i, (r, c) in enumerate(instance.starts):
        marks[r][c] += f"S{i}"
    for i, (r, c) in enumerate(instance.goals):
        marks[r][c] += f"G{i}"
    cells = [[m or "." for m in row] for row in marks]
    width = max(len(m) for row in cells for m in row) + 2
    index = len(str(n - 1))
    lines = ["Board (. ice, H hole, Si start of agent Ai, Gi goal of agent Ai):"]
    lines.append(" " * (index + 3) + "".join(f"{c:<{width}}" for c in range(n)).rstrip())
    for r, row in enumerate(cells):
        lines.append(f"{r:>{index + 1}}  " + "".join(f"{m:<{width}}" for m in row).rstrip())
    lines.append("Agents:")
    for i, (start, goal) in enumerate(zip(instance.starts, instance.goals, strict=True)):
        lines.append(f"{agent_name(i)}: start {_cell(start)}, goal {_cell(goal)}")
    return "\n".join(lines)


def render_compact(instance: Instance) -> str:
    """The compact prompt: the size, ``H`` and the holes in reading order, then each agent's start and goal.

    >>> from envengineer.mapf.instance import Instance
    >>> print(render_compact(Instance("x", (".H.", "...", "H.."), ((0, 0), (0, 2)), ((2, 2), (0, 0)))))
    3x3
    H (0,1) (2,0)
    A0 (0,0) (2,2)
    A1 (0,2) (0,0)
    """
    n = instance.size
    holes = [_cell((r, c)) for r, row in enumerate(instance.grid) for c, ch in enumerate(row) if ch == HOLE]
    agents = [
        f"{agent_name(i)} {_cell(start)} {_cell(goal)}"
        for i, (start, goal) in enumerate(zip(instance.starts, instance.goals, strict=True))
    ]
    return "\n".join([f"{n}x{n}", " ".join(["H", *holes]), *agents])


def check_prompt_style(style: str) -> PromptStyle:
    """``style`` when it names a prompt style, else a ConfigError listing them.

    >>> check_prompt_style("compact")
    'compact'
    """
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown prompt style {style!r}; use one of {list(PROMPT_STYLES)}")
    return style  # type: ignore[return-value]


def _example(num_agents: int) -> str:
    lines = [f"{agent_name(i)}: {_EXAMPLE_ACTIONS[i % len(_EXAMPLE_ACTIONS)]}" for i in range(num_agents)]
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


def build_prompt(instance: Instance) -> str:
    """The user message: task, rules, board and answer format.

    >>> from envengineer.mapf.instance import Instance
    >>> text = build_prompt(Instance("x", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0))))
    >>> text.splitlines()[0]
    'Plan paths for 2 agents on a 3x3 frozen lake.'
    """
    k, n = instance.num_agents, instance.size
    ids = ", ".join(agent_name(i) for i in range(k))
    return "\n\n".join(
        [
            f"Plan paths for {k} agents on a {n}x{n} frozen lake.",
            _RULES,
            render_board(instance),
            f"Answer format: after any reasoning, write one line per agent ({ids}) inside <answer> tags, "
            "actions separated by spaces. Only the last <answer> block counts. Example of the format "
            "(not a solution):\n" + _example(k),
        ]
    )


def build_messages(
    instance: Instance, *, system: bool = True, style: PromptStyle = "full"
) -> list[dict[str, str]]:
    """The chat messages for an instance: an optional system message, then the user prompt.

    Args:
        instance: The board to solve.
        system: Include the system message (some chat templates, e.g. Gemma's, have no system role).
        style: ``"full"`` (rules and answer format) or ``"compact"`` (the board alone, no system message).

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]`` (the first only when ``system``).

    >>> from envengineer.mapf.instance import Instance
    >>> msgs = build_messages(Instance("x", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0))))
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    """
    if check_prompt_style(style) == "compact":
        return [{"role": "user", "content": render_compact(instance)}]
    user = {"role": "user", "content": build_prompt(instance)}
    if not system:
        return [user]
    return [{"role": "system", "content": SYSTEM_PROMPT}, user]
