"""Lower bounds on the agents' delays from their pairs: the cells satisfiability's formula can leave out.

Two agents planned together, the others ignored, are delayed no more than in any plan of all the agents
(the two's part of a plan is a plan of the pair), so each pair's own optimum (its table's entry at their
starts, :func:`~envengineer.mapf.solver.pairs._pair_table`) bounds its delay from below, and disjoint
pairs' bounds add up. With a cost bound of ``extra`` steps above the shortest paths, agent ``i`` is then
delayed at most ``extra`` less the heaviest matching in pairs of the other agents, and a cell that would
take it past that is left out of the formula; the heaviest matching of all the agents is a lower bound on
``extra`` itself. On the crowded boards satisfiability settles, one or two pairs are delayed 8–23 steps,
and leaving out the cells they rule out cuts satisfiability's work there by 40–75 % (docs/benchmarks.md,
"The solver's tail").

A pair that has a conflict-free pair of shortest paths (no cell shared at one time, no swap, no cell of
one on the other's goal after the other's arrival there; found in the two agents' decision diagrams as
CBS finds it) is not delayed, and takes no table: most pairs of a board are so. A pair delayed one or two
steps (``DIAGRAM_DELAYS``) is found the same way in diagrams a step or two longer, which costs a fraction
of the sweeps; only the pairs delayed more are swept, and only until their starts' entry is proven
(:func:`~envengineer.mapf.solver.pairs._pair_cost`). Either way the delay is the pair's exact optimum.
"""

from __future__ import annotations

from itertools import combinations

from envengineer.mapf.solver.cbs import _mdds_compatible
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.pairs import _pair_cost
from envengineer.mapf.solver.problem import _NO_CONS, _Budget, _mdd, _OutOfBudget, _Problem

#: Budget units: one per this many cells an agent's decision diagram is built over (measured against the
#: time of a unit of the searches).
CELLS_PER_UNIT = 16


#: A pair's delays up to this many steps are looked for in the two agents' decision diagrams first (one
#: diagram per agent and extra length); beyond, the pair's optimum is swept (``pairs._pair_cost``).
DIAGRAM_DELAYS = 2


def _pair_delays(prob: _Problem, budget: _Budget) -> dict[tuple[int, int], int] | None:
    """The least delay of every pair of agents, both orders as keys; ``None`` when a pair can never both
    reach their goals (the board has no plan). Remembered per problem."""
    if prob.delays_memo is None:
        prob.delays_memo = (_delays_of_pairs(prob, budget),)
    return prob.delays_memo[0]


def _known_pair_delays(prob: _Problem) -> dict[tuple[int, int], int] | None:
    """The pairs' delays where :func:`_pair_delays` has computed them for ``prob`` already, else ``None``
    (nothing is computed; a board found plan-less has ``None`` too)."""
    return prob.delays_memo[0] if prob.delays_memo is not None else None


def _delays_of_pairs(prob: _Problem, budget: _Budget) -> dict[tuple[int, int], int] | None:
    shortest = [prob.h[i][prob.starts[i]] for i in range(prob.k)]
    mdds: dict[tuple[int, int], list[set[int]]] = {}

    def diagram(i: int, extra: int) -> list[set[int]]:
        known = mdds.get((i, extra))
        if known is None:
            budget.left -= -(-prob.nc // CELLS_PER_UNIT)
            if budget.left < 0 and budget.exhausted():
                raise _OutOfBudget
            known = mdds[i, extra] = _mdd(prob, i, _NO_CONS, shortest[i] + extra)
        return known

    def apart(i: int, j: int, delay: int) -> bool:
        """Whether the pair has conflict-free paths ``delay`` steps longer than their shortest in all."""
        for extra in range(delay + 1):
            found = _mdds_compatible(prob, (i, j), diagram(i, extra), diagram(j, delay - extra), budget)
            if budget.left < 0 and budget.exhausted():
                raise _OutOfBudget
            if found:
                return True
        return False

    delays: dict[tuple[int, int], int] = {}
    for i, j in combinations(range(prob.k), 2):
        delay = next((d for d in range(DIAGRAM_DELAYS + 1) if apart(i, j, d)), None)
        if delay is None:
            cost = _pair_cost(prob, i, j, budget)
            if cost >= _INF:
                return None
            delay = cost - shortest[i] - shortest[j]
        delays[i, j] = delays[j, i] = delay
    return delays


#: Up to this many agents the heaviest matching is found exactly (by recursion over the pairs); beyond,
#: a greedy one (heaviest pair first), which is still a lower bound.
EXACT_MATCHING = 8


def _heaviest_matching(agents: tuple[int, ...], delays: dict[tuple[int, int], int]) -> int:
    """The largest sum of pair delays over disjoint pairs of ``agents``."""
    if len(agents) > EXACT_MATCHING:
        total, free = 0, set(agents)
        for delay, a, b in sorted(((delays[a, b], a, b) for a, b in combinations(agents, 2)), reverse=True):
            if a in free and b in free:
                total += delay
                free -= {a, b}
        return total
    if len(agents) < 2:
        return 0
    first, rest = agents[0], agents[1:]
    best = _heaviest_matching(rest, delays)  # the first agent in no pair
    for other in rest:
        if delays[first, other]:
            left = tuple(a for a in rest if a != other)
            best = max(best, delays[first, other] + _heaviest_matching(left, delays))
    return best


def _delay_floors(prob: _Problem, budget: _Budget) -> tuple[list[int], int] | None:
    """For each agent the least sum of the other agents' delays, and the least sum of all; ``None`` when
    the board has no plan (a pair that can never reach its goals)."""
    delays = _pair_delays(prob, budget)
    if delays is None:
        return None
    everyone = tuple(range(prob.k))
    others = [_heaviest_matching(everyone[:i] + everyone[i + 1 :], delays) for i in everyone]
    return others, _heaviest_matching(everyone, delays)
