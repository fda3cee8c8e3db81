"""The task prompt: the rules, the board and the exact answer format, short enough for small models.

The prompt is a pure function of the instance (no randomness, no dates), so a prompt can be
snapshot-tested and a dataset rebuilt byte for byte. It never shows the optimum.

The board is shown twice, because small models read one view better than the other: as a marked grid
with row and column indices (``S0``/``G0`` for the start and goal of ``A0``, ``H`` for holes, ``.`` for
ice) and as a list of start and goal coordinates.
"""

from __future__ import annotations

from envengineer.mapf.instance import HOLE, Instance, agent_name

__all__ = ["SYSTEM_PROMPT", "build_messages", "build_prompt", "render_board"]

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


def build_messages(instance: Instance, *, system: bool = True) -> list[dict[str, str]]:
    """The chat messages for an instance: an optional system message, then the user prompt.

    Args:
        instance: The board to solve.
        system: Include the system message (some chat templates, e.g. Gemma's, have no system role).

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]`` (the first only when ``system``).

    >>> from envengineer.mapf.instance import Instance
    >>> msgs = build_messages(Instance("x", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0))))
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    """
    user = {"role": "user", "content": build_prompt(instance)}
    if not system:
        return [user]
    return [{"role": "system", "content": SYSTEM_PROMPT}, user]
