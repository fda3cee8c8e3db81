"""The task prompt: a snapshot, determinism, content and that its own example is a well-formed answer."""

from __future__ import annotations

import re

from envengineer.mapf.instance import Instance
from envengineer.mapf.parser import parse_plan
from envengineer.mapf.prompt import SYSTEM_PROMPT, build_messages, build_prompt, render_board

SNAP = Instance(
    "snap",
    ("....", ".H..", "..H.", "...."),
    ((0, 0), (3, 3), (2, 0)),
    ((0, 3), (3, 0), (0, 0)),
    optimal_soc=11,
    optimal_makespan=5,
    shortest_sum=10,
)

EXPECTED = """\
Plan paths for 3 agents on a 4x4 frozen lake.

Rules:
- Cells are (row, col); row 0 is the top row and col 0 the left column.
- At each time step every agent takes one action: UP (row-1), DOWN (row+1), LEFT (col-1), RIGHT (col+1) \
or WAIT (stay).
- An agent must never leave the grid or stand on a hole (H).
- Two agents must never be on the same cell at the same time, and must never swap cells in one step. \
Moving into a cell that another agent leaves in the same step is allowed.
- All agents move at the same time. A shorter action list is padded with WAIT at the end.
- At the end every agent must stand on its own goal. An agent's cost is the time step from which it stays \
on its goal; make the sum of all agents' costs as small as possible.

Board (. ice, H hole, Si start of agent Ai, Gi goal of agent Ai):
    0     1     2     3
 0  S0G2  .     .     G0
 1  .     H     .     .
 2  S2    .     H     .
 3  G1    .     .     S1
Agents:
A0: start (0,0), goal (0,3)
A1: start (3,3), goal (3,0)
A2: start (2,0), goal (0,0)

Answer format: after any reasoning, write one line per agent (A0, A1, A2) inside <answer> tags, actions \
separated by spaces. Only the last <answer> block counts. Example of the format (not a solution):
<answer>
A0: RIGHT DOWN WAIT
A1: UP LEFT
A2: DOWN DOWN RIGHT
</answer>"""


def big_instance() -> Instance:
    grid = ("..H.......", ".H........", "....H.....", "..........", "H.....H...",
            "..........", "...H......", "..........", ".....H....", "..........")  # fmt: skip
    starts = ((0, 0), (9, 9), (5, 5), (0, 9), (9, 0))
    goals = ((9, 9), (0, 0), (3, 3), (9, 1), (1, 9))
    return Instance("big", grid, starts, goals, optimal_soc=60, optimal_makespan=18, shortest_sum=58)


def test_snapshot():
    assert build_prompt(SNAP) == EXPECTED


def test_deterministic_and_independent_of_id_seed_and_optimum():
    other = Instance(
        "other-id", SNAP.grid, SNAP.starts, SNAP.goals, seed=(1, 2, 3), meta={"subset": "wr_050"}
    )
    assert build_prompt(SNAP) == build_prompt(SNAP) == build_prompt(other)
    assert "11" not in build_prompt(SNAP)  # the optimum is never shown


def test_messages():
    msgs = build_messages(SNAP)
    assert msgs == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": EXPECTED}]
    assert build_messages(SNAP, system=False) == [{"role": "user", "content": EXPECTED}]


def test_board_marks_every_hole_start_and_goal():
    inst = big_instance()
    text = render_board(inst)
    grid_lines = text.splitlines()[2:12]
    assert len(grid_lines) == 10
    assert sum(line.split()[1:].count("H") for line in grid_lines) == sum(r.count("H") for r in inst.grid)
    for i, ((sr, sc), (gr, gc)) in enumerate(zip(inst.starts, inst.goals, strict=True)):
        assert f"S{i}" in grid_lines[sr].split()[1 + sc]
        assert f"G{i}" in grid_lines[gr].split()[1 + gc]
        assert f"A{i}: start ({sr},{sc}), goal ({gr},{gc})" in text
    header = text.splitlines()[1].split()
    assert header == [str(c) for c in range(10)]
    assert [line.split()[0] for line in grid_lines] == [str(r) for r in range(10)]


def test_columns_line_up():
    lines = render_board(big_instance()).splitlines()[1:12]
    header = lines[0]
    for line in lines[1:]:
        for c in range(10):
            # every cell starts under its column index
            col = header.index(f" {c}") + 1 if c else header.index("0")
            assert line[col] != " ", (line, c)
            assert line[col - 1] == " "


def test_the_rules_are_all_stated():
    text = build_prompt(SNAP)
    for needle in ("(row, col)", "row 0", "UP (row-1)", "DOWN (row+1)", "LEFT (col-1)", "RIGHT (col+1)",
                   "WAIT (stay)", "hole", "same cell at the same time", "swap", "leaves in the same step",
                   "padded with WAIT", "own goal", "sum of all agents' costs", "<answer>"):  # fmt: skip
        assert needle in text, needle


def test_the_example_is_a_well_formed_answer_for_every_agent_count():
    for k in range(1, 8):
        starts = tuple((0, c) for c in range(k))
        goals = tuple((1, c) for c in range(k))
        inst = Instance("k", ("." * 8,) * 8, starts, goals)
        text = build_prompt(inst)
        example = text[text.rindex("<answer>") :]
        parsed = parse_plan(example, k)
        assert parsed.plan is not None, parsed.detail
        assert len(re.findall(r"^A\d+:", example, flags=re.M)) == k


def test_prompt_stays_short():
    # a 10x10 board with 5 agents is the largest paper-range prompt; keep it readable for small models
    assert len(build_prompt(big_instance())) < 2000
