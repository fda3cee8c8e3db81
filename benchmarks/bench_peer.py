"""The exact solver beside a peer's on the same boards: whether their optima agree, and their time ratio.

The peer is an optimal MAPF solver run as a program that reads the MovingAI formats, a ``.map`` file and a
``.scen`` file, and takes the command line of CBSH2-RTC (Li et al., "Pairwise Symmetry Reasoning for
Multi-Agent Path Finding Search", AIJ 2021: CBS with the WDG heuristic, rectangle, corridor and target
reasoning, bypasses), the field's reference for optimal CBS. It is not shipped: build it from its public
repository (docs/benchmarks.md, "Beside a peer", gives the steps) and pass its path. Its rules are SPEC §2's:
no two agents on a cell, no swap, following allowed, an agent's cost the time from which it stays on its
goal.

Each board is solved by both. Ours is timed as ``bench_solver.py`` times it (CPU time of the process, the
memo off, after the same warm-up, every board in a row before the peer runs); the peer's time is the CPU
time it measures itself (``clock()``), its search plus its preprocessing, read from its CSV, so that
starting a process and reading files count for neither side. Every plan the peer returns is checked by
the validator: from the starts, valid, and of the cost it reports.
A board ours proves to have no plan is not timed: CBS cannot prove it, and the peer gets
``UNSOLVABLE_CUTOFF`` seconds to find a plan it should not find.

Boards: ``--source random`` draws ``bench_solver.py``'s boards (the same ``--agents``, ``--size``,
``--seed`` give the same boards); ``--source benchmark`` takes a stratified sample of the packaged
benchmark (``--limit`` instances, ``draw_subset``), whose optima the benchmark build decided: both answers
are checked against them too.

The script prints, per side, the median, 95th and 99th percentiles, worst and total time; how many boards
each settled; the boards where the optima differ (named, with both answers: there should be none); and the
ratio of the peer's time to ours, of the totals and of the medians, over the boards both settled.

Usage::

    python benchmarks/bench_peer.py --peer /path/to/CBSH2-RTC/cbs --agents 5 --size 10 -n 200 --seed 7
    python benchmarks/bench_peer.py --peer /path/to/CBSH2-RTC/cbs --source benchmark --limit 300
"""

from __future__ import annotations

import argparse
import csv
import re
import resource
import shlex
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.benchmark import draw_subset, load_benchmark
from envengineer.mapf.instance import Cell, Instance
from envengineer.mapf.policies import paths_to_actions
from envengineer.mapf.solver import solve
from envengineer.mapf.validator import validate_plan
from solver_boards import add_board_options, sample_board, warm_up

#: The peer's time limit on a board ours proves to have no plan (CBS can only search until it stops).
UNSOLVABLE_CUTOFF = 2.0
_AGENT_LINE = re.compile(r"Agent (\d+):(.*)")
_CELL = re.compile(r"\((\d+),(\d+)\)")


@dataclass
class PeerAnswer:
    """What the peer said of one board: its optimum (``None`` when it settled nothing by its cutoff), its
    own CPU seconds, and its plan as each agent's cells; or why it ended without an answer (a crash, its
    memory limit)."""

    soc: int | None
    seconds: float
    paths: list[list[Cell]]
    failed: str | None = None


def write_movingai(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], folder: Path
) -> tuple[Path, Path]:
    """The board as a MovingAI map (``@`` a hole) and scenario (x the column, y the row, as the format has
    it)."""
    n = len(grid)
    map_path, scen_path = folder / "board.map", folder / "board.scen"
    rows = ["".join("@" if ch == "H" else "." for ch in row) for row in grid]
    map_path.write_text(f"type octile\nheight {n}\nwidth {n}\nmap\n" + "\n".join(rows) + "\n")
    lines = ["version 1"]
    for (sr, sc), (gr, gc) in zip(starts, goals, strict=True):
        lines.append(f"0\tboard.map\t{n}\t{n}\t{sc}\t{sr}\t{gc}\t{gr}\t0")
    scen_path.write_text("\n".join(lines) + "\n")
    return map_path, scen_path


def run_peer(
    peer: str,
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    cutoff: float,
    memory_gb: float = 8.0,
    options: Sequence[str] = (),
) -> PeerAnswer:
    """Solve one board with the peer program; its answer, time and plan from the files it writes. Its
    address space is capped at ``memory_gb`` (a CBS can fill the machine's memory before its cutoff)."""

    def cap_memory() -> None:
        limit = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        folder = Path(tmp)
        map_path, scen_path = write_movingai(grid, starts, goals, folder)
        stats, paths_file = folder / "stats.csv", folder / "paths.txt"
        command = [peer, "-m", str(map_path), "-a", str(scen_path), "-k", str(len(starts)), "-t", str(cutoff)]
        command += ["-o", str(stats), f"--outputPaths={paths_file}", "-s", "0", *options]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=cutoff + 60, preexec_fn=cap_memory
            )
        except subprocess.TimeoutExpired:
            return PeerAnswer(None, float("nan"), [], failed=f"still running {cutoff + 60:g} s in")
        if done.returncode != 0 or not stats.exists():
            why = f"exit {done.returncode}: {done.stderr.strip()[-200:] or 'no message'}"
            return PeerAnswer(None, float("nan"), [], failed=why)
        with stats.open() as f:
            row = next(csv.DictReader(f))
        seconds = float(row["runtime"]) + float(row["preprocessing runtime"])
        cost = int(float(row["solution cost"]))
        if cost < 0 or not paths_file.exists():  # -1: nothing found by the cutoff
            return PeerAnswer(None, seconds, [])
        return PeerAnswer(cost, seconds, read_paths(paths_file.read_text(), len(starts)))


def read_paths(text: str, agents: int) -> list[list[Cell]]:
    """The peer's ``Agent i: (r,c)->(r,c)->...`` lines as each agent's cells."""
    paths: dict[int, list[Cell]] = {}
    for line in text.splitlines():
        found = _AGENT_LINE.match(line.strip())
        if found:
            paths[int(found.group(1))] = [(int(r), int(c)) for r, c in _CELL.findall(found.group(2))]
    if sorted(paths) != list(range(agents)):
        raise RuntimeError(f"the peer's paths name agents {sorted(paths)}, not 0..{agents - 1}")
    return [paths[i] for i in range(agents)]


def check_peer_plan(
    grid: Sequence[str], starts: Sequence[Cell], goals: Sequence[Cell], answer: PeerAnswer
) -> str | None:
    """Why the peer's plan does not stand (invalid, or not of the cost it reports), or ``None``."""
    firsts = [p[0] if p else None for p in answer.paths]
    if firsts != list(starts):
        return f"plan starts at {firsts}, not at the starts {list(starts)}"
    board = Instance("peer", tuple(grid), tuple(starts), tuple(goals), answer.soc, 0, 0)
    try:
        verdict = validate_plan(board, paths_to_actions(answer.paths))
    except ValueError as exc:  # a step between cells that are not neighbours
        return f"plan is invalid: {exc}"
    if not verdict.valid:
        return f"plan is invalid: {verdict.failure} ({verdict.detail})"
    if verdict.soc != answer.soc:
        return f"plan costs {verdict.soc}, its answer says {answer.soc}"
    return None


@dataclass
class Board:
    name: str
    grid: list[str]
    starts: list[Cell]
    goals: list[Cell]
    known: int | None = None  # the optimum the benchmark build decided, where the board is one of it


def _boards(args: argparse.Namespace) -> list[Board]:
    if args.source == "benchmark":
        sample = draw_subset(load_benchmark(), limit=args.limit)
        return [Board(b.id, list(b.grid), list(b.starts), list(b.goals), b.optimal_soc) for b in sample]
    boards = []
    for i in range(args.n):
        rng = np.random.default_rng(np.random.SeedSequence((args.seed, args.agents, args.size, i)))
        boards.append(Board(f"#{i}", *sample_board(rng, args.size, args.agents, args.holes)))
    return boards


def _ours(
    grid: list[str], starts: list[Cell], goals: list[Cell], node_budget: int
) -> tuple[str, int | None, float]:
    """Our answer (``ok``, ``budget`` or ``unsolvable``), optimum and CPU milliseconds."""
    t0 = time.process_time()
    try:
        sol = solve(grid, starts, goals, node_budget=node_budget, memo=False)
        outcome, soc = "ok", sol.soc
    except UnsolvableInstance:
        outcome, soc = "unsolvable", None
    except SolverBudgetExceeded:
        outcome, soc = "budget", None
    return outcome, soc, (time.process_time() - t0) * 1000


def _spread(ms: np.ndarray) -> str:
    if ms.size == 0:
        return "no boards"
    p95, p99 = np.percentile(ms, [95, 99])
    return (
        f"median {np.median(ms):.2f} ms | p95 {p95:.2f} ms | p99 {p99:.2f} ms"
        f" | worst {ms.max():.1f} ms | total {ms.sum() / 1000:.2f} s"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", required=True, help="the peer program (CBSH2-RTC's `cbs`, built)")
    ap.add_argument("--source", choices=("random", "benchmark"), default="random")
    add_board_options(ap)  # --agents, --size, -n, --seed, --holes: the random boards; --node-budget, --warmup
    ap.add_argument("--limit", type=int, default=300, help="benchmark instances in the stratified sample")
    ap.add_argument("--cutoff", type=float, default=60.0, help="the peer's time limit per board, seconds")
    ap.add_argument("--peer-memory", type=float, default=8.0, help="the peer's memory limit, GiB")
    ap.add_argument(
        "--peer-args",
        default="",
        help='more options for the peer, one string: --peer-args="--corridorReasoning None"',
    )
    args = ap.parse_args(argv)
    if not Path(args.peer).is_file():
        ap.error(f"--peer {args.peer!r} is not a file: build CBSH2-RTC first (docs/benchmarks.md)")
    if args.warmup < 0:
        ap.error(f"--warmup must be 0 or more, not {args.warmup}")
    return args


@dataclass
class Tally:
    """What the boards gave: the times of each side, the boards both settled, and the lines to print."""

    ours_ms: list[float] = field(default_factory=list)
    peer_ms: list[float] = field(default_factory=list)
    both_ours: list[float] = field(default_factory=list)
    both_peer: list[float] = field(default_factory=list)
    ours_settled: int = 0
    peer_settled: int = 0
    unsolvable: int = 0
    trouble: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # boards the peer ended without an answer on (not timed)
    alone: list[str] = field(default_factory=list)  # boards that one side, or neither, settled


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warm_up(args)
    boards = _boards(args)
    # ours on every board first, as bench_solver.py times them (no other process between two boards)
    ours = [_ours(b.grid, b.starts, b.goals, args.node_budget) for b in boards]
    tally = Tally()
    options = shlex.split(args.peer_args)
    for board, answer in zip(boards, ours, strict=True):
        _beside_the_peer(args, options, board, answer, tally)
    _print_tally(args, options, len(boards), tally)
    return 1 if tally.trouble else 0


def _beside_the_peer(
    args: argparse.Namespace,
    options: list[str],
    board: Board,
    answer: tuple[str, int | None, float],
    tally: Tally,
) -> None:
    """Run the peer on one board that ours has answered, and count what the two said."""
    outcome, soc, ms = answer
    name = board.name
    peer_board = (args.peer, board.grid, board.starts, board.goals)
    if outcome == "unsolvable":
        # CBS cannot prove that a board has no plan: the peer gets a short look for one, untimed
        tally.unsolvable += 1
        look = run_peer(*peer_board, UNSOLVABLE_CUTOFF, args.peer_memory, options)
        if look.soc is not None:
            tally.trouble.append(f"{name}: ours proves no plan, the peer found one")
        return
    if outcome == "ok" and board.known is not None and soc != board.known:
        tally.trouble.append(f"{name}: ours {soc}, the benchmark's {board.known}")
    peer = run_peer(*peer_board, args.cutoff, args.peer_memory, options)
    if peer.failed is not None:
        tally.failed.append(f"{name}: {peer.failed}")
        return
    tally.ours_ms.append(ms)
    tally.peer_ms.append(peer.seconds * 1000)
    tally.ours_settled += outcome != "budget"
    tally.peer_settled += peer.soc is not None
    if outcome == "budget" or peer.soc is None:
        mine = "over its budget" if outcome == "budget" else f"{soc} in {ms:.1f} ms"
        theirs = "none by its cutoff" if peer.soc is None else f"{peer.soc} in {peer.seconds * 1000:.1f} ms"
        tally.alone.append(f"{name}: ours {mine}, the peer's {theirs}")
    if peer.soc is None:
        return
    why = check_peer_plan(board.grid, board.starts, board.goals, peer)
    if why is not None:
        tally.trouble.append(f"{name}: the peer's {why}")
    if board.known is not None and peer.soc != board.known:
        tally.trouble.append(f"{name}: the peer's {peer.soc}, the benchmark's {board.known}")
    if outcome == "ok":
        if soc != peer.soc:
            tally.trouble.append(f"{name}: ours {soc}, the peer's {peer.soc}")
        tally.both_ours.append(ms)
        tally.both_peer.append(peer.seconds * 1000)


def _print_tally(args: argparse.Namespace, options: list[str], n_boards: int, tally: Tally) -> None:
    where = (
        f"{n_boards} benchmark instances (a stratified sample)"
        if args.source == "benchmark"
        else f"{n_boards} boards, agents={args.agents} size={args.size} seed={args.seed}"
    )
    print(f"{where}; node_budget={args.node_budget} cutoff={args.cutoff:g} s peer args={options}")
    timed = n_boards - tally.unsolvable - len(tally.failed)
    print(f"the peer ended without an answer (not timed): {len(tally.failed)}")
    for line in tally.failed:
        print("  " + line)
    looked = f"the peer looked {UNSOLVABLE_CUTOFF:g} s for one"
    print(f"proven to have no plan by ours: {tally.unsolvable} ({looked})")
    print(f"ours : {_spread(np.asarray(tally.ours_ms))} | settled {tally.ours_settled}/{timed}")
    print(f"peer : {_spread(np.asarray(tally.peer_ms))} | settled {tally.peer_settled}/{timed}")
    for line in tally.alone:
        print("  " + line)
    o, p = np.asarray(tally.both_ours), np.asarray(tally.both_peer)
    if o.size:
        print(
            f"both settled {o.size}: the peer's time over ours, totals {p.sum() / o.sum():.2f}x, "
            f"medians {np.median(p) / np.median(o):.2f}x, "
            f"p99 {np.percentile(p, 99) / np.percentile(o, 99):.2f}x"
        )
    print(f"optima that differ or plans that do not stand: {len(tally.trouble)}")
    for line in tally.trouble:
        print("  " + line)


if __name__ == "__main__":
    raise SystemExit(main())
