"""Throughput of parse + validate on a realistic mix of responses, on one core.

Builds random boards (sizes 3-10, 2-5 agents, hole ratio in [0, 0.5]) and, for each, responses written
the way models write them: a short ``<think>`` section, then an ``<answer>`` block holding individual
shortest paths (valid or conflicting), padded or delayed plans, truncated plans, random walks, lenient
formatting, invalid tokens, missing agents and untagged answers. Optima are set to the individual
shortest-path bounds (plausible values; they only change the optimal/suboptimal split, not the work);
with ``--solve`` the exact solver (``envengineer.mapf.solver``) fills in the true optima instead, and its
optimal plans join the mix.

Usage::

    python benchmarks/bench_validator.py -n 20000

The run is single-threaded. It prints the best, median and worst of ``--repeat`` passes in wall-clock time
and in CPU time of the process, with the load average. On a machine whose cores are shared with other work
even the CPU time of one pass varies by a third from pass to pass (cache and memory bandwidth are shared);
quote the median, and the load average with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter, deque

import numpy as np

from envengineer.mapf.instance import MOVES, Cell, Instance
from envengineer.mapf.validator import format_answer, validate

_STEP_NAMES = {v: k for k, v in MOVES.items() if k != "WAIT"}
_FILLER = (
    "Let me find each agent's shortest path first and then look for conflicts. "
    "Agent 0 goes right along the top row; agent 1 must avoid the hole in row 1. "
    "If both enter the same cell at the same time one of them has to wait. "
)


def _bfs_path(grid: tuple[str, ...], start: Cell, goal: Cell) -> list[str] | None:
    n = len(grid)
    prev: dict[Cell, Cell | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for dr, dc in _STEP_NAMES:
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and grid[nxt[0]][nxt[1]] == "." and nxt not in prev:
                prev[nxt] = cell
                queue.append(nxt)
    if goal not in prev:
        return None
    actions: list[str] = []
    cell = goal
    while prev[cell] is not None:
        p = prev[cell]
        actions.append(_STEP_NAMES[(cell[0] - p[0], cell[1] - p[1])])
        cell = p
    return actions[::-1]


def random_instance(rng: np.random.Generator, index: int) -> tuple[Instance, list[list[str]]]:
    """A random solvable-looking board with its individual shortest paths."""
    while True:
        k = int(rng.integers(2, 6))
        n = int(rng.integers(max(3, k), 11))
        holes = rng.random((n, n)) < rng.uniform(0.0, 0.5)
        grid = tuple("".join("H" if h else "." for h in row) for row in holes)
        free = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "."]
        if len(free) < 2 * k:
            continue
        picks = rng.choice(len(free), size=2 * k, replace=False)
        starts = tuple(free[int(p)] for p in picks[:k])
        goals = tuple(free[int(p)] for p in picks[k:])
        paths = [_bfs_path(grid, s, g) for s, g in zip(starts, goals, strict=True)]
        if any(p is None for p in paths):
            continue
        lengths = [len(p) for p in paths]  # type: ignore[arg-type]
        inst = Instance(
            f"bench_{index:05d}",
            grid,
            starts,
            goals,
            optimal_soc=sum(lengths),
            optimal_makespan=max(lengths),
            shortest_sum=sum(lengths),
        )
        return inst, paths  # type: ignore[return-value]


def _solved(inst: Instance, paths: list[list[str]]) -> tuple[Instance, list[list[str]]]:
    """The board with its exact optima; the solver's optimal plan replaces the individual paths."""
    from envengineer.errors import EnvEngineerError
    from envengineer.mapf.solver import paths_to_actions, solve_instance

    try:
        sol = solve_instance(inst)
    except EnvEngineerError:  # over budget or unsolvable: keep the plausible bounds
        return inst, paths
    inst = inst.with_optimum(
        optimal_soc=sol.soc, optimal_makespan=sol.makespan, shortest_sum=sol.shortest_sum
    )
    return inst, paths_to_actions(sol.paths)


def random_response(rng: np.random.Generator, inst: Instance, paths: list[list[str]]) -> str:
    """One response in the style of a model: reasoning, then an answer of a random kind."""
    think = "<think>\n" + _FILLER * int(rng.integers(1, 5)) + "\n</think>\n\n"
    plan = [list(p) for p in paths]
    kind = rng.random()
    if kind < 0.35:
        pass  # individual shortest paths: valid, or a vertex/swap conflict
    elif kind < 0.50:  # delays and trailing waits
        for seq in plan:
            if rng.random() < 0.5:
                seq.insert(int(rng.integers(0, len(seq) + 1)), "WAIT")
            if rng.random() < 0.3:
                seq.extend(["WAIT"] * int(rng.integers(1, 3)))
    elif kind < 0.60:  # truncated
        i = int(rng.integers(len(plan)))
        plan[i] = plan[i][: max(0, len(plan[i]) - 2)]
    elif kind < 0.72:  # random walks: out of bounds, holes
        names = list(MOVES)
        plan = [[names[int(a)] for a in rng.integers(0, 5, size=len(p) + 1)] for p in paths]
    elif kind < 0.82:  # lenient formatting
        lines = [f"Agent {i}: " + ", ".join(a.lower() for a in seq) for i, seq in enumerate(plan)]
        return think + "<answer>\n" + "\n\n".join(lines) + "\n</answer>"
    elif kind < 0.88:  # invalid token
        i = int(rng.integers(len(plan)))
        plan[i] = [*plan[i], "NORTH"]
    elif kind < 0.94:  # missing agent
        plan = plan[:-1]
    else:  # no tags
        return think + format_answer(plan)[len("<answer>\n") : -len("\n</answer>")]
    return think + format_answer(plan)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("-n", "--responses", type=int, default=20000, help="responses to validate")
    ap.add_argument("--instances", type=int, default=500, help="distinct boards in the mix")
    ap.add_argument("--seed", type=int, default=0, help="seed of the board and response mix")
    ap.add_argument("--repeat", type=int, default=7, help="timed passes (best, median and worst reported)")
    ap.add_argument("--solve", action="store_true", help="use the exact solver's optima and optimal plans")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    boards = [random_instance(rng, i) for i in range(args.instances)]
    if args.solve:
        boards = [_solved(inst, paths) for inst, paths in boards]
    work = []
    for _ in range(args.responses):
        inst, paths = boards[int(rng.integers(len(boards)))]
        work.append((inst, random_response(rng, inst, paths)))

    load = os.getloadavg()
    verdicts = [validate(inst, text) for inst, text in work]  # warm-up and the category mix
    mix = Counter(v.failure or "optimal" for v in verdicts)
    walls, cpus = [], []
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        for inst, text in work:
            validate(inst, text)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)

    agents = Counter(inst.num_agents for inst, _ in work)
    mean_chars = sum(len(text) for _, text in work) / len(work)
    n = len(work)
    print(f"responses: {n}  boards: {len(boards)}  agents: {dict(sorted(agents.items()))}")
    print(f"mean response length: {mean_chars:.0f} chars")
    print("verdict mix: " + ", ".join(f"{k} {100 * c / n:.1f}%" for k, c in mix.most_common()))
    print(f"load average before/after: {load[0]:.2f} / {os.getloadavg()[0]:.2f}")
    for name, times in (("wall clock", walls), ("CPU time  ", cpus)):
        rates = sorted(n / t for t in times)
        print(
            f"{name}: best {rates[-1]:,.0f}  median {statistics.median(rates):,.0f}  worst {rates[0]:,.0f} "
            f"responses/s over {args.repeat} passes"
        )
    print(f"({1e6 * min(cpus) / n:.1f} us of CPU per response at best; wall and CPU differ on a shared core)")


if __name__ == "__main__":
    main()
