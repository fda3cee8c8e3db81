"""Time the exact solver on random boards drawn the way the generator draws them.

Each board: a ``size x size`` grid whose hole ratio is drawn uniformly in ``[0, 0.5]`` (exact number of
holes, at random places), ``agents`` distinct starts on frozen cells and, for each, a distinct goal in the
start's connected region. Every board is timed with one ``solve`` call (CPU time of the process by
default, so that other jobs on the machine do not inflate it; ``--clock wall`` for wall-clock time); the
script prints the median, the 95th and 99th percentiles and the worst time per board, how many boards
need a wait, how many were proven to have no plan and how many exceeded the node budget.

Before the timed boards the script solves boards of another stream, untimed, for ``--warmup`` seconds of
CPU (0.5 by default): in a fresh process the first few milliseconds of solving run at up to twice the
steady speed's time (the processor's clock and caches warming up; a busy loop alone removes most of it),
so without a warm-up the boards that happen to come first in a seed are timed slow. ``--warmup 0`` times
from a cold start, as the figures before December 2026 were.

``--units`` also reports the work of each board in the solver's budget units (``last_units``), which do
not depend on the machine or on what else runs on it: the median, the 95th and 99th percentiles and the
largest per board, how many boards spent over ``UNITS_MARK`` units and how many ran over the budget (those
count their units at the budget plus the last step's overshoot). ``--show-slowest`` then lists the boards
that spent the most units rather than the most time.

Usage::

    python benchmarks/bench_solver.py --agents 5 --size 10 -n 200 --seed 0
    python benchmarks/bench_solver.py --agents 5 --size 10 -n 200 --seed 7 --units --show-slowest 5
    python benchmarks/bench_solver.py --agents 3 --size 3 -n 500 --holes 0.3
    python benchmarks/bench_solver.py --seed 7 --units --sat-after 12000   # CBS's share before satisfiability
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.instance import Cell
from envengineer.mapf.solver import last_units, solve
from solver_boards import add_board_options, sample_board, warm_up

#: ``--units`` counts the boards that spent more than this many units (a slow board of the tail).
UNITS_MARK = 4_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_board_options(ap)
    ap.add_argument(
        "--sat-after",
        type=int,
        default=solver_module.CBS_UNITS_BEFORE_SAT,
        help="units of CBS before satisfiability on boards of 4+ agents "
        f"(default {solver_module.CBS_UNITS_BEFORE_SAT})",
    )
    ap.add_argument(
        "--sat-scout",
        type=int,
        default=solver_module.SAT_SCOUT,
        help="units of CBS's first try, after which a board with a pair delayed more than a step or two "
        f"goes to satisfiability (default {solver_module.SAT_SCOUT}; --sat-after or more: none)",
    )
    ap.add_argument(
        "--sat-after-horizons",
        type=int,
        default=solver_module.HORIZON_UNITS_BEFORE_SAT,
        help="units of the makespan's horizon searches before satisfiability on boards of 4+ agents "
        f"(default {solver_module.HORIZON_UNITS_BEFORE_SAT})",
    )
    ap.add_argument(
        "--clock", choices=("cpu", "wall"), default="cpu", help="time.process_time or perf_counter"
    )
    ap.add_argument("--show-slowest", type=int, default=0, help="print the N slowest boards")
    ap.add_argument(
        "--units", action="store_true", help="also report the budget units each board used (deterministic)"
    )
    args = ap.parse_args(argv)
    for flag in ("sat_after", "sat_scout", "sat_after_horizons", "warmup"):
        if getattr(args, flag) < 0:
            ap.error(f"--{flag.replace('_', '-')} must be 0 or more, not {getattr(args, flag)}")
    return args


#: One timed board: its index, milliseconds, budget units, grid, starts, goals and how the solver ended.
Timed = tuple[int, float, int, list[str], list[Cell], list[Cell], str]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    solver_module.CBS_UNITS_BEFORE_SAT = args.sat_after
    solver_module.SAT_SCOUT = args.sat_scout
    solver_module.HORIZON_UNITS_BEFORE_SAT = args.sat_after_horizons
    warm_up(args)
    boards, counts = time_boards(args)
    print_times(args, boards, counts)


def time_boards(args: argparse.Namespace) -> tuple[list[Timed], dict[str, int]]:
    """Each board solved once under the clock; the boards and how many needed a wait, were proven to have
    no plan or ran over the budget."""
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    boards: list[Timed] = []
    counts = {"wait": 0, "unsolvable": 0, "budget": 0}
    for i in range(args.n):
        rng = np.random.default_rng(np.random.SeedSequence((args.seed, args.agents, args.size, i)))
        grid, starts, goals = sample_board(rng, args.size, args.agents, args.holes)
        t0 = clock()
        outcome = "ok"
        try:
            # without the memo every call searches, so that last_units is this board's
            sol = solve(grid, starts, goals, node_budget=args.node_budget, memo=not args.units)
            counts["wait"] += sol.needs_wait
        except UnsolvableInstance:
            counts["unsolvable"] += 1
            outcome = "unsolvable"
        except SolverBudgetExceeded:
            counts["budget"] += 1
            outcome = "budget"
        dt = (clock() - t0) * 1000
        boards.append((i, dt, last_units() if args.units else 0, grid, starts, goals, outcome))
    return boards, counts


def print_times(args: argparse.Namespace, boards: list[Timed], counts: dict[str, int]) -> None:
    arr = np.asarray([b[1] for b in boards])
    print(
        f"agents={args.agents} size={args.size} n={args.n} seed={args.seed} "
        f"holes={'U[0,0.5]' if args.holes is None else args.holes} "
        f"node_budget={args.node_budget} sat_after={args.sat_after} sat_scout={args.sat_scout} "
        f"sat_after_horizons={args.sat_after_horizons} clock={args.clock}"
    )
    print(
        f"median {np.median(arr):.2f} ms | p95 {np.percentile(arr, 95):.2f} ms | "
        f"p99 {np.percentile(arr, 99):.2f} ms | worst {arr.max():.1f} ms | "
        f"mean {arr.mean():.2f} ms | total {arr.sum() / 1000:.2f} s"
    )
    print(
        f"needs wait {counts['wait']} | proven unsolvable {counts['unsolvable']} | "
        f"budget exceeded {counts['budget']}"
    )
    if args.units:
        _report_units(np.asarray([b[2] for b in boards]), counts["budget"])
    order = 2 if args.units else 1  # the most units (deterministic) or the most time
    slowest = sorted(boards, key=lambda b: -b[order])[: args.show_slowest]
    for i, dt, units, grid, starts, goals, outcome in slowest:
        spent = f"{units:8d} units " if args.units else ""
        print(f"#{i:<4d} {dt:9.1f} ms {spent} {outcome:10s} grid={grid} starts={starts} goals={goals}")


def _report_units(units: np.ndarray, over_budget: int) -> None:
    print(
        f"units: median {np.median(units):,.0f} | p95 {np.percentile(units, 95):,.0f} | "
        f"p99 {np.percentile(units, 99):,.0f} | max {units.max():,d} | "
        f"over {UNITS_MARK:,d} units {int((units > UNITS_MARK).sum())} | over budget {over_budget}"
    )


if __name__ == "__main__":
    main()
