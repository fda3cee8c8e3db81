"""Exact sum of costs and makespan by satisfiability: the searches' fallback on the crowded boards that
CBS does not settle cheaply.

On a crowded board of five agents the optimum is often ten steps or more above the agents' shortest
paths, and the delays come from three agents or more at once: CBS then splits on conflict after conflict
between merged groups with no bound to guide it, and the joint searches visit every state below the
optimum. A SAT solver (Glucose 4, through PySAT) reasons about all agents and all times together and
learns from its dead ends; it settles those boards in a few tens of milliseconds each (docs/benchmarks.md,
"The solver's tail").

The encoding is the one of MDD-SAT (Surynek et al., 2016): one variable per agent, time and cell the
agent can stand on at that time with a plan of the cost bound (reachable from its start by then, and its
goal reachable from there in time), exactly one cell per agent and time, each step to a neighbour or a
wait, no two agents on one cell, no swap. For the sum of costs with ``extra`` steps above the shortest
paths, every agent is on its goal for good from its shortest-path length plus ``extra`` on, a variable per
agent and time says that the agent is on its goal for good from then on, and at most ``extra`` of those
are false over all agents; ``extra`` grows from a proven lower bound until the formula is satisfiable, so
the first plan found is optimal. For the makespan ``T``, everybody is on its goal at ``T``, ``T`` growing
from a lower bound. Each formula is finite, so an unsatisfiable one proves that no plan of that cost
exists.

The work is counted in the budget's units (see the package docstring): the clauses written and the
solver's propagations, each at a measured rate, so the answer (settled or over the budget) does not depend
on the machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from pysat.card import CardEnc, EncType
from pysat.solvers import Solver

from envengineer.mapf.solver.problem import _Budget, _OutOfBudget, _Problem

#: The SAT solver of PySAT: one whose propagations can be limited (the budget) and counted.
SAT_SOLVER = "glucose4"
#: Budget units: one per this many clauses written, and one per this many propagations of the solver
#: (measured against the time of a unit of the searches).
CLAUSES_PER_UNIT = 7
PROPAGATIONS_PER_UNIT = 17


def _charge(budget: _Budget, units: int) -> None:
    budget.left -= units
    if budget.left < 0 and budget.exhausted():
        raise _OutOfBudget


class _Formula:
    """The clauses of one cost bound (``ends[i]``: the time from which agent ``i`` stands on its goal for
    good), charged as each agent's layers and each time's conflicts are written, so a formula too large
    for the budget stops part-way."""

    def __init__(self, prob: _Problem, ends: Sequence[int], budget: _Budget) -> None:
        self.prob = prob
        self.budget = budget
        self.top = 0
        self.clauses: list[list[int]] = []
        self.charged = 0
        self.empty = False  # an agent with no cell at some time: no plan keeps the bound
        horizon = max(ends)
        self.horizon = horizon
        # cells[i][t]: {cell: variable} of agent i at time t
        self.cells: list[list[dict[int, int]]] = []
        for i in range(prob.k):
            from_start = prob.dist_from(prob.starts[i])
            to_goal = prob.h[i]
            goal = prob.goals[i]
            layers = []
            for t in range(horizon + 1):
                left = ends[i] - t
                if left <= 0:
                    layer = [goal]
                else:
                    layer = [v for v, ds in enumerate(from_start) if ds <= t and to_goal[v] <= left]
                layers.append({v: self._new() for v in layer})
            self.cells.append(layers)
        for i in range(prob.k):
            for t in range(horizon + 1):
                self._agent_layer(i, t)
            self._flush()
        for t in range(horizon + 1):
            self._conflicts(t)
            self._flush()

    def _new(self) -> int:
        self.top += 1
        return self.top

    def _flush(self) -> None:
        units = (len(self.clauses) - self.charged) // CLAUSES_PER_UNIT
        if units:
            self.charged += units * CLAUSES_PER_UNIT
            _charge(self.budget, units)

    def _agent_layer(self, i: int, t: int) -> None:
        layer = self.cells[i][t]
        lits = list(layer.values())
        add = self.clauses.append
        if not lits:
            self.empty = True
            return
        add(lits)
        if len(lits) > 1:
            self._at_most(lits, 1)
        if t < self.horizon:
            nxt = self.cells[i][t + 1]
            nbrs = self.prob.nbrs
            for v, x in layer.items():
                add([-x, *(nxt[w] for w in nbrs[v] if w in nxt)])

    def _conflicts(self, t: int) -> None:
        add = self.clauses.append
        nbrs = self.prob.nbrs
        last = t == self.horizon
        for i, j in combinations(range(self.prob.k), 2):
            xi, xj = self.cells[i][t], self.cells[j][t]
            for v, x in xi.items():
                y = xj.get(v)
                if y is not None:
                    add([-x, -y])
            if last:
                continue
            xi1, xj1 = self.cells[i][t + 1], self.cells[j][t + 1]
            for u, x in xi.items():
                back = xj1.get(u)
                if back is None:
                    continue
                for v in nbrs[u]:
                    if v != u:
                        a, b = xi1.get(v), xj.get(v)
                        if a is not None and b is not None:
                            add([-x, -a, -b, -back])

    def at_most_late(self, ends: Sequence[int], extra: int) -> None:
        """At most ``extra`` steps over all agents spent off the goal after its shortest-path length."""
        late = []
        for i in range(self.prob.k):
            goal = self.prob.goals[i]
            d = self.prob.h[i][self.prob.starts[i]]
            home = None  # "on the goal for good from t + 1 on"; from ends[i] on it is (a single cell)
            for t in range(ends[i] - 1, d - 1, -1):
                at = self.cells[i][t].get(goal)
                done = self._new()
                self.clauses.append([-done, at] if at is not None else [-done])
                if home is not None:
                    self.clauses.append([-done, home])
                late.append(-done)
                home = done
        if late and extra < len(late):
            self._at_most(late, extra)
        self._flush()

    def _at_most(self, lits: list[int], bound: int) -> None:
        """At most ``bound`` of ``lits`` true (a sequential counter, its helper variables after ours)."""
        card = CardEnc.atmost(lits=lits, bound=bound, top_id=self.top, encoding=EncType.seqcounter)
        self.top = max(self.top, card.nv)
        self.clauses.extend(card.clauses)

    def solve(self) -> list[tuple[int, ...]] | None:
        """Each agent's path up to the formula's horizon, or ``None`` when no plan keeps the bound."""
        budget = self.budget
        if self.empty:
            return None
        with Solver(name=SAT_SOLVER, bootstrap_with=self.clauses) as solver:
            found = None
            counted = 0
            while found is None:
                # the whole budget at once; with a deadline, a chunk at a time, the clock read in between
                # (the solver keeps what it learnt from one call to the next)
                units = budget.left + budget.reserve
                if budget.deadline is not None:
                    units = min(units, budget.CHUNK)
                solver.prop_budget(max(units, 1) * PROPAGATIONS_PER_UNIT)
                found = solver.solve_limited()
                props = solver.accum_stats()["propagations"]
                spent = (props - counted) // PROPAGATIONS_PER_UNIT
                counted += spent * PROPAGATIONS_PER_UNIT
                # a call ended by its limit costs at least a unit, so the budget always runs out
                _charge(budget, spent if found is not None else max(spent, 1))
            model = solver.get_model() if found else None
        if not found:
            return None
        true = set(x for x in model if x > 0)  # type: ignore[union-attr]
        return [
            tuple(next(v for v, x in layer.items() if x in true) for layer in layers) for layers in self.cells
        ]


def _plan_by_sat(prob: _Problem, budget: _Budget, soc_floor: int) -> list[tuple[int, ...]]:
    """An SoC-optimal plan, its sum of costs at least ``soc_floor`` (a proven lower bound); raises
    ``_OutOfBudget`` when the budget ends first (a board without a plan runs until then)."""
    shortest = [prob.h[i][prob.starts[i]] for i in range(prob.k)]
    extra = max(0, soc_floor - sum(shortest))
    while True:
        ends = [d + extra for d in shortest]
        formula = _Formula(prob, ends, budget)
        formula.at_most_late(ends, extra)
        paths = formula.solve()
        if paths is not None:
            return paths  # each up to the formula's horizon, on its goal from its cost on
        extra += 1


def _makespan_by_sat(prob: _Problem, budget: _Budget, lb: int, ub: int) -> int:
    """The least horizon in ``lb..ub`` at which every agent can stand on its goal (``ub`` is known to be
    one)."""
    for t in range(lb, ub):
        if _Formula(prob, [t] * prob.k, budget).solve() is not None:
            return t
    return ub
