"""``bench_peer.py``'s plumbing: the MovingAI files it writes, the peer's files it reads, and that a peer
that disagrees, or returns a plan that does not stand, is reported. The peer here is a stand-in program
that answers with our own solver, in CBSH2-RTC's formats."""

from __future__ import annotations

import importlib
import stat
import sys
from pathlib import Path

import pytest

from envengineer.mapf.solver import solve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts' library
bench = importlib.import_module("bench_peer")

# A stand-in for CBSH2-RTC's `cbs`: reads the .map and .scen it is given, answers with our solver, and
# writes the CSV and the paths file as CBSH2-RTC does. PEER_MODE (or the option --liar) makes it lie about
# the cost, write its cells as (column, row), skip a cell of agent 0's path, give up, or crash.
STAND_IN = """#!{python}
import os, sys
from envengineer.mapf.solver import solve
args = sys.argv[1:]
def opt(name):
    return next(a.split("=", 1)[1] for a in args if a.startswith(name + "=")) if name.startswith("--") \\
        else args[args.index(name) + 1]
rows = open(opt("-m")).read().split("\\n")[4:]
n = len(rows[0])
grid = ["".join("H" if ch == "@" else "." for ch in r) for r in rows[:n]]
starts, goals = [], []
for line in open(opt("-a")).read().split("\\n")[1:]:
    if line:
        f = line.split("\\t")
        starts.append((int(f[5]), int(f[4])))
        goals.append((int(f[7]), int(f[6])))
sol = solve(grid, starts[: int(opt("-k"))], goals[: int(opt("-k"))], memo=False)
mode = os.environ.get("PEER_MODE", "") or ("lie" if "--liar" in args else "")
if mode == "crash":
    sys.exit("std::bad_alloc")
cost = -1 if mode == "give-up" else sol.soc + (mode == "lie")
with open(opt("-o"), "w") as f:
    f.write("runtime,solution cost,preprocessing runtime\\n0.002,%d,0.001\\n" % cost)
with open(opt("--outputPaths"), "w") as f:
    for i, path in enumerate(sol.paths):
        cells = [(c, r) if mode == "transpose" else (r, c) for r, c in path]
        if mode == "jump" and i == 0:
            cells = cells[:1] + cells[2:]
        f.write("Agent %d: " % i + "".join("(%d,%d)->" % cell for cell in cells) + "\\n")
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> str:
    program = tmp_path / "cbs"
    program.write_text(STAND_IN.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return str(program)


def test_the_movingai_files_put_x_in_the_column_and_holes_as_at_signs(tmp_path: Path) -> None:
    grid = ["..H", "...", "H.."]
    map_path, scen_path = bench.write_movingai(grid, [(0, 1), (2, 2)], [(1, 0), (0, 0)], tmp_path)
    assert map_path.read_text() == "type octile\nheight 3\nwidth 3\nmap\n..@\n...\n@..\n"
    assert (
        scen_path.read_text()
        == "version 1\n0\tboard.map\t3\t3\t1\t0\t0\t1\t0\n0\tboard.map\t3\t3\t2\t2\t0\t0\t0\n"
    )


def test_the_peers_paths_are_read_per_agent_and_a_missing_agent_is_an_error() -> None:
    text = "Agent 1: (0,0)->(0,1)->\nAgent 0: (2,2)->\n"
    assert bench.read_paths(text, 2) == [[(2, 2)], [(0, 0), (0, 1)]]
    with pytest.raises(RuntimeError, match="name agents"):
        bench.read_paths(text, 3)


# 4 agents on an open 4x4 board cross each other: the optimum needs waits or detours
CROSSING = (
    ["....", "....", "....", "...."],
    [(0, 0), (0, 3), (3, 0), (3, 3)],
    [(3, 3), (3, 0), (0, 3), (0, 0)],
)


def test_a_truthful_peer_agrees_and_its_time_is_its_own(stand_in: str) -> None:
    answer = bench.run_peer(stand_in, *CROSSING, cutoff=5)
    assert answer.soc == solve(*CROSSING).soc and answer.seconds == pytest.approx(0.003)
    assert [p[0] for p in answer.paths] == CROSSING[1] and [p[-1] for p in answer.paths] == CROSSING[2]
    assert bench.check_peer_plan(*CROSSING, answer) is None


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("lie", "plan costs {soc}, its answer says {lie}"),
        ("transpose", "plan starts at [(0, 0), (3, 0), (0, 3), (3, 3)], not at the starts"),
        ("jump", "plan is invalid: agent 0 jumps from"),
        ("give-up", None),
        ("crash", None),
    ],
)
def test_a_peer_that_lies_swaps_its_axes_gives_up_or_crashes_is_told_apart(
    stand_in: str, monkeypatch: pytest.MonkeyPatch, mode: str, said: str | None
) -> None:
    monkeypatch.setenv("PEER_MODE", mode)
    answer = bench.run_peer(stand_in, *CROSSING, cutoff=5)
    if said is None:
        assert answer.soc is None and answer.paths == []
        assert (answer.failed is not None and "exit 1: std::bad_alloc" in answer.failed) == (mode == "crash")
        return
    why = bench.check_peer_plan(*CROSSING, answer)
    soc = solve(*CROSSING).soc
    assert why is not None and said.format(soc=soc, lie=soc + 1) in why


def test_the_script_exits_1_and_names_the_boards_where_the_optima_differ(
    stand_in: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--peer", stand_in, "--agents", "3", "--size", "4", "-n", "3", "--seed", "1", "--warmup", "0"]
    assert bench.main(args) == 0
    assert "optima that differ or plans that do not stand: 0" in capsys.readouterr().out
    assert bench.main([*args, "--peer-args=--liar"]) == 1  # options reach the peer
    assert "optima that differ or plans that do not stand: 6" in capsys.readouterr().out
    monkeypatch.setenv("PEER_MODE", "lie")
    assert bench.main(args) == 1
    out = capsys.readouterr().out
    assert "optima that differ or plans that do not stand: 6" in out  # each board: its cost, and its plan's
    assert "#0: ours " in out and "#2: the peer's plan costs" in out
