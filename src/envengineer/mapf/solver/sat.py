"""Exact sum of costs and makespan by satisfiability: the searches' fallback on the crowded boards that
CBS does not settle cheaply.

On a crowded board of five agents the optimum is often ten steps or more above the agents' shortest
paths, and the delays come from three agents or more at once: CBS then splits on conflict after conflict
between merged groups with no bound to guide it, and the joint searches visit every state below the
optimum. A SAT solver (Glucose 4, through PySAT) reasons about all agents and all times together and
learns from its dead ends; it settles those boards in a few tens of milliseconds each (docs/benchmarks.md,
"The solver's tail").

The encoding follows MDD-SAT (Surynek et al., 2016): one variable per agent, time and cell the agent can
stand on at that time within the cost bound (reachable from its start by then, and its goal reachable
from there in time), no two agents on one cell, no swap. For the sum of costs with ``extra`` steps above
the shortest paths, a variable per agent and time says that the agent is on its goal for good from then
on; those of each agent form its delay in unary, and the delays' sum, merged pairwise, is at most
``extra``. For the makespan ``T`` everybody is on its goal at ``T``. Where MDD-SAT has each cell step
forward to a neighbour and at most one cell per agent and time, here each cell is *reached* from a
neighbour or by a wait one time before: a model's path is read back from the agent's goal at the horizon
to its start (the one cell at time 0), and every cell on it is true, so it keeps every conflict clause;
the other true cells, if any, are not used. That is one clause per cell where the forward steps and "at
most one" took four or five, and the goal, fixed by the bound, propagates backwards. The bound grows by
one from a proven lower bound until the formula is satisfiable, so the first plan found is optimal, and an
unsatisfiable formula proves that no plan keeps its bound (after a bound that propagation alone refutes it
grows by two, and asks the one skipped where the larger has a plan: :func:`_least_bound`).

The formula grows with the bound rather than being written afresh for each (:class:`_Formula`): a cell
enters an agent's layer at time ``t`` at the bound where it first fits, and only what touches the new
cells is written. The clauses that a larger bound relaxes hold under assumptions: the bound itself, and
an arrival at the goal that the bound does not open yet (the agent can only have waited there), written
once under "the bound is below" the one that opens it. So the solver keeps every clause it learnt, and
a formula answers any bound up to its own. On the crowded boards this halves satisfiability's work (a
bound that unit propagation refutes costs no more than its new cells).

For the sum of costs the pairs of agents bound the delays first (:mod:`~envengineer.mapf.solver.delays`):
an agent is delayed at most the bound less what the other agents' pairs must be delayed, so its cells past
that are left out, and the bound starts from the heaviest matching of the pairs' delays where that is
above the bound CBS proved.

The work is counted in the budget's units (see the package docstring): the clauses written and the
solver's propagations, each at a measured rate, so the answer (settled or over the budget) does not depend
on the machine.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pysolvers
from pysat.solvers import Glucose4, Solver

from envengineer.errors import UnsolvableInstance
from envengineer.mapf.solver.delays import _delay_floors
from envengineer.mapf.solver.grid import _INF
from envengineer.mapf.solver.problem import NO_PLAN, _Budget, _OutOfBudget, _Problem

#: The SAT solver of PySAT: one whose propagations can be limited (the budget) and counted.
SAT_SOLVER = "glucose4"
#: Budget units: one per this many clauses written, and one per this many propagations of the solver
#: (measured against the time of a unit of the searches).
CLAUSES_PER_UNIT = 1.8
PROPAGATIONS_PER_UNIT = 28
#: The clauses written as rows (the conflicts, the steps) are handed over and charged this many at a time.
EMIT_SLICE = 512
#: After a bound that propagation alone refutes (no conflict below the assumptions), the next bound is this
#: many above it. On the crowded boards such bounds come in runs of up to a dozen below the optimum (the
#: bounds fail on the same few agents' detours), and each costs a growth of the formula, far more than its
#: refutation: a step of two halves those growths, and overshoots the optimum by one bound at most. Larger
#: steps and doubling overshoot more (docs/benchmarks.md, "Fewer and cheaper growths of the formula").
STEP_AFTER_PROPAGATION_REFUTATION = 2


def _add_clauses(solver: Solver, clauses: list[list[int]]) -> None:
    """Give ``clauses`` to ``solver``. PySAT's ``append_formula`` calls two Python methods per clause
    before Glucose's C binding; calling the binding directly takes a quarter off the formula's growth
    (seed 9's board 80: 6.1 -> 4.7 ms) and 2-5 % off the slow boards' p99 (docs/benchmarks.md, "Clauses
    handed to Glucose directly"). The binding's answer (False: the formula is already refuted) need not be
    kept: Glucose keeps it and every later call to solve answers no. Any other solver object (one that
    records the clauses, in the tests) gets them through ``append_formula``. ``pysolvers.glucose41_add_cl``
    is not PySAT's public interface: python-sat is pinned for it (pyproject.toml), and
    tests/test_solver_sat.py fails by name if an upgrade drops it."""
    glucose = getattr(solver, "solver", None)
    if type(glucose) is Glucose4 and glucose.glucose:
        add, handle = pysolvers.glucose41_add_cl, glucose.glucose
        for clause in clauses:
            add(handle, clause)
    else:
        solver.append_formula(clauses)


def _charge(budget: _Budget, units: int) -> None:
    budget.left -= units
    if budget.left < 0 and budget.exhausted():
        raise _OutOfBudget


class _Sum:
    """The sum of two unary numbers, in unary: ``out[m]`` is true when ``a + b`` exceeds ``m`` (a node of
    a totalizer, Bailleux and Boufkhad, 2003). The numbers grow with the bound, and :meth:`widen` writes only
    the clauses that their new digits and the new outputs take part in (as the incremental totalizer of
    Martins et al., 2014), so a formula pays for each clause once."""

    def __init__(self, a: list[int], b: list[int]) -> None:
        self.a, self.b = a, b  # lists their owners extend
        self.out: list[int] = []
        self.seen = (0, 0, 0)  # the lengths of a, b and out when last widened

    def widen(self, cap: int, new: Callable[[], int], add: Callable[[list[int]], None]) -> None:
        """Outputs up to ``cap`` (``a + b`` exceeds ``cap - 1`` at most), for the digits of a and b now."""
        a, b, out = self.a, self.b, self.out
        size = min(cap, len(a) + len(b))
        was_a, was_b, was = self.seen
        out.extend(new() for _ in range(size - len(out)))
        for x in range(min(len(a), size)):
            if x >= min(was_a, was):
                add([-a[x], out[x]])
            # (x, y) was written when both digits and out[x + y + 1] were there
            low = 0 if x >= was_a else min(was_b, max(0, was - x - 1))
            for y in range(low, min(len(b), size - x - 1)):
                add([-a[x], -b[y], out[x + y + 1]])
        for y in range(min(was_b, was), min(len(b), size)):
            add([-b[y], out[y]])
        self.seen = (len(a), len(b), size)


class _Formula:
    """A formula that grows with its bound. ``soc``: the bound is the steps above the shortest paths, every
    agent's goal open to it from its shortest-path length on; otherwise the bound is the makespan.

    A cell ``v`` of agent ``i`` at time ``t`` *needs* the bound ``t + h_i(v) - off_i + others_i``
    (``off_i`` its shortest-path length for the sum of costs, 0 for the makespan; ``others_i`` a lower
    bound on the other agents' delays in all, for the sum of costs only, 0 by default), and for the sum of
    costs its goal needs ``others_i``; the layer of a bound holds the cells reachable by ``t`` whose need
    is within it. A bound below some ``others_i`` is an error (no plan keeps it).

    The cells' variables live in one numpy array, ``var[agent, time, cell]`` (0 where the cell is not in
    the agent's layer; a last column, 0 throughout, stands for "no such neighbour"), so the cells a bound
    adds and their clauses are found for all of them at once rather than one at a time."""

    def __init__(
        self, prob: _Problem, budget: _Budget, *, soc: bool, others: list[int] | None = None
    ) -> None:
        self.prob = prob
        self.budget = budget
        self.soc = soc
        k, nc = prob.k, prob.nc
        self.shortest = [prob.h[i][prob.starts[i]] for i in range(k)]
        self.off = self.shortest if soc else [0] * k
        self.others = list(others) if others is not None else [0] * k
        # per agent and cell the bound a cell needs at time 0 (``_INF`` off the agent's ways; for the sum of
        # costs its goal apart), and its distance from the agent's start
        self.base = np.full((k, nc), _INF, dtype=np.int64)
        self.from_start = np.full((k, nc), _INF, dtype=np.int64)
        for i in range(k):
            h, start = np.minimum(np.array(prob.h[i]), _INF), np.array(prob.dist_from(prob.starts[i]))
            ways = (h < _INF) & (start < _INF)
            self.base[i, ways] = h[ways] - self.off[i] + self.others[i]
            self.from_start[i] = np.minimum(start, _INF)
            if soc:
                self.base[i, prob.goals[i]] = _INF
        self.var = np.zeros((k, 0, nc + 1), dtype=np.int64)
        # each cell's neighbours and itself (a wait, first), ``nc`` (no cell) after them; and without itself
        self.ways = np.array([list(x) + [nc] * (5 - len(x)) for x in prob.nbrs], dtype=np.int64)
        self.steps = np.array([([w for w in x if w != v] + [nc] * 4)[:4] for v, x in enumerate(prob.nbrs)])
        self.top = 1  # variable 1 is false (a unit clause), the filler of the clauses written as rows
        self.clauses: list[list[int]] = [[-1]]
        self.written = 0  # the clauses of this bound handed to the solver
        self.charged = 0.0
        self.bound = -1
        self.horizon = -1
        # per agent its "on its goal for good from t" (sum of costs), its delay in unary, and their sums
        self.done: list[dict[int, int]] = [{} for _ in range(k)]
        self.delays: list[list[int]] = [[] for _ in range(k)]
        self.sums: list[_Sum] = []
        # the goals' arrivals held to a wait until the bound opens them: agent, time, cell, that bound
        self.held: tuple[np.ndarray, ...] = (np.zeros(0, dtype=np.int64),) * 4
        # ``below[b - below_from]``: "the bound is below b", each implying the next (the held rows' guards)
        self.below_from = max(self.others) + 1
        self.below: list[int] = []
        self.solver = Solver(name=SAT_SOLVER)
        self.propagations = 0
        self.conflicts = 0
        #: whether the last bound :meth:`solve` found no plan for was refuted by propagation alone
        self.refuted_outright = False

    def close(self) -> None:
        self.solver.delete()

    def _new(self) -> int:
        self.top += 1
        return self.top

    def _flush(self) -> None:
        """Hand the clauses written so far to the solver and charge them. Held until the end of a bound,
        thousands of small lists would trigger the garbage collector's full passes (over every object of
        the process): on the slow boards that took up to half of the formula's time."""
        self.written += len(self.clauses)
        _add_clauses(self.solver, self.clauses)
        self.clauses.clear()  # the same list: the writers hold its append
        units = int((self.written - self.charged) // CLAUSES_PER_UNIT)
        if units:
            self.charged += units * CLAUSES_PER_UNIT
            _charge(self.budget, units)

    def _emit(self, clauses: np.ndarray) -> None:
        """Hand over and charge ``clauses`` (rows) a slice at a time, so the budget stops them part-way."""
        for part in range(0, len(clauses), EMIT_SLICE):
            self.clauses.extend(clauses[part : part + EMIT_SLICE].tolist())
            self._flush()

    def grow(self, bound: int) -> None:
        """Extend the formula from the previous bound (none at first) to ``bound``, a larger one."""
        if bound <= self.bound:
            raise ValueError(f"a formula grows: bound {bound} after {self.bound}")
        if bound < max(self.others):
            raise ValueError(f"bound {bound} below the other agents' least delay {max(self.others)}")
        horizon = bound + max(off - lb for off, lb in zip(self.off, self.others, strict=True))
        if self.var.shape[1] <= horizon:
            grown = np.zeros((self.prob.k, horizon + 1, self.prob.nc + 1), dtype=np.int64)
            grown[:, : self.var.shape[1]] = self.var
            self.var = grown
        # charged as they are written (a slice at a time), so a formula too large for the budget stops
        # part-way
        new = self._cells(bound, horizon)
        self._flush()
        self._conflicts(*new, horizon)
        self._steps(*new, bound)
        if self.soc:
            self._delays(bound, horizon)
        _add_clauses(self.solver, self.clauses)
        self.clauses.clear()
        self.written, self.charged = 0, 0.0
        self.bound, self.horizon = bound, horizon

    def _cells(self, bound: int, horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cells that ``bound`` adds (each agent's start the one cell at time 0), as agents, times and
        cells in the order of their variables: by agent, time, need, the goal first, then cell.

        A cell ``v`` of agent ``i`` needs ``t + base[i, v]`` from its earliest time on, one more per step
        later, so the times a bound adds are a run per agent and cell (and the goal of the sum of costs,
        needing ``others_i`` throughout, enters at every time the horizon adds): found per agent and cell,
        not over every time."""
        k, goals = self.prob.k, np.array(self.prob.goals)
        prev = self.bound if self.bound >= 0 else -_INF
        since = np.maximum(self.from_start, prev + 1 - self.base)  # agent, cell: the run of times added
        count = np.clip(bound - self.base - since + 1, 0, None)
        ag, vs = np.nonzero(count)
        runs = count[ag, vs]
        ends = np.cumsum(runs)
        ts = np.repeat(since[ag, vs] - ends + runs, runs) + np.arange(ends[-1] if len(ends) else 0)
        ag, vs = np.repeat(ag, runs), np.repeat(vs, runs)
        need = ts + self.base[ag, vs]
        if self.soc:  # each goal at the times the horizon adds, from the agent's shortest-path length on
            off, lb = np.array(self.off), np.array(self.others)
            since = np.maximum(off, self.horizon + 1)
            runs = np.clip(horizon - since + 1, 0, None)
            ends = np.cumsum(runs)
            at = np.repeat(since - ends + runs, runs) + np.arange(ends[-1])
            who = np.repeat(np.arange(k), runs)
            ag, ts, vs = np.concatenate((ag, who)), np.concatenate((ts, at)), np.concatenate((vs, goals[who]))
            need = np.concatenate((need, lb[who]))
        order = np.lexsort((vs, vs != goals[ag], need, ts, ag))
        ag, ts, vs = ag[order], ts[order], vs[order]
        self.var[ag, ts, vs] = np.arange(self.top + 1, self.top + 1 + len(ts))
        self.top += len(ts)
        first = ag[ts == 0]  # the agents whose start this bound admits first: there at time 0
        self.clauses += [[x] for x in self.var[first, 0, np.array(self.prob.starts)[first]].tolist()]
        return ag, ts, vs

    def _conflicts(self, ag: np.ndarray, ts: np.ndarray, vs: np.ndarray, horizon: int) -> None:
        """No shared cell and no swap, for every pair of agents, where a new cell takes part: each new cell
        and each new step looked up at once in every other agent's cells, two new ones written once (from
        the lower agent)."""
        var, js = self.var, np.arange(self.prob.k)[:, None]
        fresh = np.zeros(var.shape, dtype=bool)
        fresh[ag, ts, vs] = True
        other = var[:, ts, vs]  # (agent, new cell): every agent's variable there
        keep = (other > 0) & (js != ag) & ~(fresh[:, ts, vs] & (js < ag))
        j, n = np.nonzero(keep)
        self._emit(np.stack((-var[ag[n], ts[n], vs[n]], -other[j, n]), axis=1))
        a, t, u, w = self._new_steps(ag, ts, vs, fresh, horizon)
        there, back = var[:, t, w], var[:, t + 1, u]  # another agent on w at t and on u at t + 1: a swap
        keep = (there > 0) & (back > 0) & (js != a) & ~((fresh[:, t, w] | fresh[:, t + 1, u]) & (js < a))
        j, n = np.nonzero(keep)
        mine = (-var[a[n], t[n], u[n]], -var[a[n], t[n] + 1, w[n]])
        self._emit(np.stack((*mine, -there[j, n], -back[j, n]), axis=1))

    def _new_steps(
        self, ag: np.ndarray, ts: np.ndarray, vs: np.ndarray, fresh: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, ...]:
        """The steps between two neighbouring cells, one of them new: agent, time, from, to."""
        var, nb = self.var, self.steps
        out = ts < horizon  # from a new cell at t to any cell at t + 1
        a, t, u = ag[out], ts[out], vs[out]
        n, d = np.nonzero(var[a[:, None], t[:, None] + 1, nb[u]] > 0)
        first = (a[n], t[n], u[n], nb[u[n], d])
        into = ts > 0  # into a new cell at t + 1 from an old one at t
        a, t, w = ag[into], ts[into] - 1, vs[into]
        u = nb[w]
        n, d = np.nonzero((var[a[:, None], t[:, None], u] > 0) & ~fresh[a[:, None], t[:, None], u])
        second = (a[n], t[n], u[n, d], w[n])
        return tuple(np.concatenate(pair) for pair in zip(first, second, strict=True))

    def _steps(self, ag: np.ndarray, ts: np.ndarray, vs: np.ndarray, bound: int) -> None:
        """Each cell an agent stands on at ``t`` it reached from a neighbour or by a wait at ``t - 1``.

        A cell's neighbours one time before need no more of the bound than the cell itself, so they are
        all in when it enters and its clause holds for good, but for the goal of the sum of costs, which
        needs only ``others_i``: its neighbours at ``t - 1`` enter together, at the bound ``t - off_i +
        others_i`` that opens an arrival at ``t``. Until then the agent can only have waited there (an
        arrival would delay it past its share of the bound): that clause is written once, under "the
        bound is below" that one, and the clause with every way in is written when the bound opens it.
        Each clause is a row of seven: the guard or the false filler, the cell, and its five ways in (the
        filler where none)."""
        later = ts > 0
        ag, ts, vs = ag[later], ts[later], vs[later]
        guard = np.zeros(len(ts), dtype=np.int64)  # 0: none (the false filler)
        if self.soc:
            off, lb, goals = np.array(self.off), np.array(self.others), np.array(self.prob.goals)
            opens = np.where(vs == goals[ag], ts - off[ag] + lb[ag], 0)  # the bound that opens each row
            held = opens > bound
            if held.any():
                guard[held] = -self._below(opens[held])
            new = (ag, ts, vs, opens)
            due = self.held[3] <= bound  # held so far, opened now: written again with every way in
            ag, ts, vs = (
                np.concatenate((was[due], now)) for was, now in zip(self.held[:3], new[:3], strict=True)
            )
            guard = np.concatenate((np.zeros(int(due.sum()), dtype=np.int64), guard))
            self.held = tuple(
                np.concatenate((was[~due], now[held])) for was, now in zip(self.held, new, strict=True)
            )
        ways = self.var[ag[:, None], ts[:, None] - 1, self.ways[vs]]
        rows = np.column_stack(
            (np.where(guard < 0, guard, 1), -self.var[ag, ts, vs], np.where(ways > 0, ways, 1))
        )
        self._emit(rows)

    def _below(self, bounds: np.ndarray) -> np.ndarray:
        """The variables "the bound is below b" for each of ``bounds``, the chain grown to the largest."""
        chain = self.below
        for _ in range(len(chain), int(bounds.max()) - self.below_from + 1):
            chain.append(self._new())
            if len(chain) > 1:
                self.clauses.append([-chain[-2], chain[-1]])
        return np.array(chain, dtype=np.int64)[bounds - self.below_from]

    def _delays(self, bound: int, horizon: int) -> None:
        """At most ``bound`` steps of delay in all: each agent's "on its goal for good from ``t``" for the
        times past its shortest path, its delay in unary, summed pairwise up to ``bound + 1``."""
        add = self.clauses.append
        for i in range(self.prob.k):
            done, goal = self.done[i], self.prob.goals[i]
            for t in range(max(self.shortest[i], self.horizon + 1), horizon + 1):  # the times this bound adds
                done[t] = self._new()
                add([-done[t], int(self.var[i, t, goal])])
                if t - 1 in done:
                    add([-done[t - 1], done[t]])
        # delays[i][m]: agent i's delay exceeds m (it is not on its goal for good at d_i + m)
        for i, d in enumerate(self.shortest):
            delay = self.delays[i]
            delay.extend(-self.done[i][d + m] for m in range(len(delay), bound - self.others[i]))
        if not self.sums:  # the pairwise sums' tree, the same at every bound, summed as it grows
            parts = list(self.delays)
            while len(parts) > 1:
                self.sums.append(_Sum(parts.pop(), parts.pop()))
                parts.insert(0, self.sums[-1].out)
        for node in self.sums:  # children before their parents
            node.widen(bound + 1, self._new, add)
            self._flush()

    def _assume(self, bound: int) -> list[int] | None:
        """The assumptions that hold the formula to ``bound``, at most its own (``None``: a makespan below
        some agent's shortest path). A plan within a smaller bound uses only cells that bound admits (an
        agent on a cell of need ``n`` is delayed ``n`` in all, with the others' least), so the formula of a
        larger bound answers for it as the formula of that bound would."""
        if not self.soc:  # everybody on its goal at the horizon ``bound``
            at_goal = self.var[np.arange(self.prob.k), bound, self.prob.goals]
            return at_goal.tolist() if at_goal.all() else None
        total = self.sums[-1].out if self.sums else self.delays[0]
        # each agent on its goal for good once its own share of the bound is spent; the sum within it
        done = [
            self.done[i][d + bound - lb]
            for i, (d, lb) in enumerate(zip(self.shortest, self.others, strict=True))
        ]
        # the goals' arrivals that a larger bound opens held to waits (they would spend more than the bound)
        held = (
            [self.below[bound + 1 - self.below_from]] if len(self.below) > bound + 1 - self.below_from else []
        )
        return [*held, *done, *([-total[bound]] if len(total) > bound else [])]

    def solve(self, bound: int | None = None) -> list[tuple[int, ...]] | None:
        """Each agent's path up to the formula's horizon within ``bound`` (by default the formula's own,
        never above it), or ``None`` when no plan keeps the bound."""
        if bound is None:
            bound = self.bound
        if not max(self.others) <= bound <= self.bound:
            raise ValueError(f"bound {bound} outside {max(self.others)}..{self.bound}, the formula's")
        assumptions = self._assume(bound)
        if assumptions is None:
            self.refuted_outright = True
            return None
        budget, solver = self.budget, self.solver
        found = None
        while found is None:
            # the whole budget at once; with a deadline, a chunk at a time, the clock read in between
            # (the solver keeps what it learnt from one call to the next)
            units = budget.left + budget.reserve
            if budget.deadline is not None:
                units = min(units, budget.CHUNK)
            solver.prop_budget(max(units, 1) * PROPAGATIONS_PER_UNIT)
            found = solver.solve_limited(assumptions=assumptions)
            stats = solver.accum_stats()
            spent = (stats["propagations"] - self.propagations) // PROPAGATIONS_PER_UNIT
            self.propagations += spent * PROPAGATIONS_PER_UNIT
            # a call ended by its limit costs at least a unit, so the budget always runs out
            _charge(budget, spent if found is not None else max(spent, 1))
        # the one conflict is the assumptions' own: no search below them
        self.refuted_outright = not found and stats["conflicts"] - self.conflicts <= 1
        self.conflicts = stats["conflicts"]
        if not found:
            return None
        true = set(x for x in solver.get_model() if x > 0)  # type: ignore[union-attr]
        # each path read back from the agent's goal at the horizon, through cells that are true (so it keeps
        # every conflict clause); a wait comes first among a cell's neighbours, so the path stays on its goal
        # for as long as the goal is true (the agent's delay is no more than the formula counted)
        paths = []
        end = self.horizon if self.soc else bound  # on its goal for good from its cost on / at the makespan
        for i, layers in enumerate(self.var[:, : end + 1].tolist()):
            v = self.prob.goals[i]
            back = [v]
            for t in range(end, 0, -1):
                before = layers[t - 1]
                v = next(u for u in self.prob.nbrs[v] if before[u] in true)
                back.append(v)
            paths.append(tuple(reversed(back)))
        return paths


def _least_bound(
    formula: _Formula, lo: int, hi: int | None = None
) -> tuple[int, list[tuple[int, ...]] | None]:
    """The least bound from ``lo`` (below ``hi``, where given) at which ``formula`` has a plan, and that
    plan; ``(hi, None)`` when no bound below ``hi`` has one.

    After a bound refuted by propagation alone the next is ``STEP_AFTER_PROPAGATION_REFUTATION`` above it (see
    there), after one that needed search the next one up. A plan at a bound past a skipped one makes the
    formula answer that one (:meth:`_Formula.solve` takes any bound up to its own), the least first, so the
    plan returned is optimal."""
    refuted, step = lo - 1, 1  # every bound up to ``refuted`` has no plan
    while hi is None or refuted + 1 < hi:
        bound = refuted + step if hi is None else min(refuted + step, hi - 1)
        formula.grow(bound)
        paths = formula.solve()
        if paths is not None:
            for skipped in range(refuted + 1, bound):
                found = formula.solve(skipped)
                if found is not None:
                    return skipped, found
            return bound, paths
        refuted = bound
        step = STEP_AFTER_PROPAGATION_REFUTATION if formula.refuted_outright else 1
    return hi, None


def _plan_by_sat(prob: _Problem, budget: _Budget, soc_floor: int) -> list[tuple[int, ...]]:
    """An SoC-optimal plan, its sum of costs at least ``soc_floor`` (a proven lower bound); raises
    ``_OutOfBudget`` when the budget ends first (a board without a plan runs until then, unless a pair of
    its agents can never reach their goals: ``UnsolvableInstance``)."""
    floors = _delay_floors(prob, budget)
    if floors is None:
        raise UnsolvableInstance(NO_PLAN)
    others, least = floors
    formula = _Formula(prob, budget, soc=True, others=others)
    try:
        _, paths = _least_bound(formula, max(soc_floor - sum(formula.shortest), least))
        assert paths is not None  # no ``hi``: it runs until a plan or the budget's end
        return paths  # each up to the formula's horizon, on its goal from its cost on
    finally:
        formula.close()


def _makespan_by_sat(prob: _Problem, budget: _Budget, lb: int, ub: int) -> int:
    """The least horizon in ``lb..ub`` at which every agent can stand on its goal (``ub`` is known to be
    one)."""
    formula = _Formula(prob, budget, soc=False)
    try:
        return _least_bound(formula, lb, ub)[0]
    finally:
        formula.close()
