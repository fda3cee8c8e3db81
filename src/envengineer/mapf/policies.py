"""Scripted reference policies: what the score table looks like without a model.

* ``optimal`` — the exact solver's SoC-optimal plan (scores 100 / 100 by construction);
* ``greedy`` — every agent follows its own shortest path and ignores the others (valid only when no
  conflict happens, optimal only when no wait is needed);
* ``random`` — each agent takes a random number of uniformly random actions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf.instance import MOVES, Cell, Instance
from envengineer.mapf.solver import distance_map, paths_to_actions, solve_instance
from envengineer.mapf.validator import format_answer

Plan = list[list[str]]


def optimal_plan(instance: Instance, rng: np.random.Generator) -> Plan:
    """The solver's SoC-optimal joint plan (``rng`` unused; the plan is deterministic)."""
    return paths_to_actions(optimal_paths(instance))


def optimal_paths(instance: Instance) -> tuple[tuple[Cell, ...], ...]:
    """An SoC-optimal plan of a solvable board as each agent's cells from ``t = 0``.

    The solver's within its default budget; for a benchmark board beyond that budget the plan shipped
    with the benchmark (:func:`~envengineer.mapf.benchmark.shipped_plan`); for any other board beyond it
    the decision the v2 benchmark build makes (:func:`~envengineer.mapf.generator.decide_draw`, which may
    take up to a minute on the hardest crowded boards).

    Raises:
        UnsolvableInstance: The board has no plan.
        SolverBudgetExceeded: Not even the generous budget settles the board.
    """
    from envengineer.mapf.benchmark import shipped_plan
    from envengineer.mapf.generator import decide_draw

    shipped = shipped_plan(instance)
    if shipped is not None:
        return shipped
    try:
        return solve_instance(instance).paths
    except SolverBudgetExceeded:
        pass
    sol = decide_draw(instance.grid, instance.starts, instance.goals, needs_wait=True)
    if sol is None:
        raise UnsolvableInstance(f"{instance.id}: the board has no conflict-free plan")
    return sol.paths


def greedy_plan(instance: Instance, rng: np.random.Generator) -> Plan:
    """Each agent walks one of its shortest paths (ties broken at random), ignoring the other agents."""
    plan = []
    for start, goal in zip(instance.starts, instance.goals, strict=True):
        dist = distance_map(instance.grid, goal)
        cell: Cell = start
        actions: list[str] = []
        while cell != goal and _dist(dist, cell) is not None:
            here = _dist(dist, cell)
            steps = [
                a
                for a, (dr, dc) in MOVES.items()
                if a != "WAIT"
                and instance.is_free((cell[0] + dr, cell[1] + dc))
                and _dist(dist, (cell[0] + dr, cell[1] + dc)) == here - 1
            ]
            action = steps[int(rng.integers(len(steps)))]
            actions.append(action)
            cell = (cell[0] + MOVES[action][0], cell[1] + MOVES[action][1])
        plan.append(actions)
    return plan


def random_plan(instance: Instance, rng: np.random.Generator) -> Plan:
    """Uniformly random actions, between 1 and ``2 * size`` of them per agent."""
    names = list(MOVES)
    return [
        [names[i] for i in rng.integers(len(names), size=int(rng.integers(1, 2 * instance.size + 1)))]
        for _ in range(instance.num_agents)
    ]


POLICIES: dict[str, Callable[[Instance, np.random.Generator], Plan]] = {
    "optimal": optimal_plan,
    "greedy": greedy_plan,
    "random": random_plan,
}


def respond(policy: str, instance: Instance, rng: np.random.Generator) -> str:
    """The policy's plan written as a model response (an ``<answer>`` block).

    >>> from envengineer.mapf.instance import Instance
    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> print(respond("optimal", inst, np.random.default_rng(0)))
    <answer>
    A0: RIGHT
    A1: RIGHT
    </answer>
    """
    try:
        fn = POLICIES[policy]
    except KeyError:
        from envengineer.errors import ConfigError

        raise ConfigError(f"unknown policy {policy!r}; use one of {sorted(POLICIES)}") from None
    return format_answer(fn(instance, rng))


def _dist(dist, cell: Cell) -> int | None:
    d = dist[cell[0]][cell[1]]
    return None if d is None or d < 0 else int(d)
