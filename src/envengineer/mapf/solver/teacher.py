"""The solver as the teacher of a partial answer: the best plan that begins with what was written.

A policy writes the joint plan agent by agent, move by move. Given a board and such a prefix (the lines of
agents ``0..i-1`` as written, agent ``i``'s line up to some move), :func:`complete` returns the valid plan
of least sum of costs that begins with it: the rest of agent ``i``'s line and the paths of agents
``i+1..`` that avoid the written paths, or ``None`` when no valid plan begins with the prefix. A line that
has ended is final: its agent stays on its last cell for good (SPEC §2), which must be its goal.

:func:`label` is the teacher's answer to a whole written plan: the longest prefix of it (in writing
order, each line's end counting as a step) that some *optimal* plan begins with, and that optimal plan.
Its first step past the prefix is the policy's first mistake: a move off the board or into a hole, a
collision, a move after which no valid plan exists, a move that makes the best plan costlier than the
optimum, or ending a line too early or too late. What the teacher says there is the best move from the
state the policy reached before the mistake (DAgger's label for the learner's own state), and from there
on the optimal plan, so a target built from a label is always an optimal plan that agrees with the
policy for as long as the policy was right.

How: the written lines become constraints of a smaller problem over the agents still to plan. A finished
line bars its cells at their times, the swaps against it, and its last cell from its end on; the open
line is forced along its prefix (every other cell the agent could reach at those times is barred). The
remaining agents are then planned by the solver's own exact searches: the single-agent A* for one, the
joint A* where the joint space is small, otherwise CBS from a root that holds those constraints (each CBS
split holds for every conflict-free plan, so it stays complete under them).

>>> grid = ["...", "...", "..."]
>>> best = complete(grid, [(0, 0), (0, 2)], [(0, 2), (0, 0)], [["RIGHT", "RIGHT"]], open_last=False)
>>> best.plan, best.soc
((('RIGHT', 'RIGHT'), ('DOWN', 'LEFT', 'UP', 'LEFT')), 6)
>>> lab = label(grid, [(0, 0), (0, 2)], [(0, 2), (0, 0)], [["RIGHT", "RIGHT"], ["LEFT", "LEFT"]])
>>> lab.kept, lab.total, lab.fatal, lab.completion.soc
(3, 6, True, 6)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envengineer.errors import InstanceFormatError, SolverBudgetExceeded
from envengineer.mapf.instance import MOVES, Cell, Instance
from envengineer.mapf.solver import DEFAULT_NODE_BUDGET, JOINT_SPACE_SOC, _search, check_limits, solve
from envengineer.mapf.solver.cbs import _pair_conflicts
from envengineer.mapf.solver.grid import _INF, _check_cell, _check_grid, path_cost, paths_to_actions
from envengineer.mapf.solver.joint import _plan_group
from envengineer.mapf.solver.problem import _Budget, _Cons, _OutOfBudget, _plan, _Problem, _space

__all__ = [
    "END",
    "Completion",
    "Label",
    "complete",
    "complete_instance",
    "label",
    "label_instance",
    "prefix_lines",
    "writing_steps",
]

#: The step that ends a line in :func:`label`'s writing order.
END = "END"


@dataclass(frozen=True)
class Completion:
    """A valid plan that begins with a written prefix, of least sum of costs among those that do.

    Attributes:
        paths: Each agent's cells from ``t = 0`` to its last move (it stays there afterwards).
        plan: Each agent's actions (trailing ``WAIT`` s dropped, :func:`paths_to_actions`).
        soc: The plan's sum of costs (SPEC §2.2).
    """

    paths: tuple[tuple[Cell, ...], ...]
    plan: tuple[tuple[str, ...], ...]
    soc: int


@dataclass(frozen=True)
class Label:
    """The teacher's answer to a written plan (:func:`label`).

    Attributes:
        kept: How many steps of the written plan (moves, and each line's end) an optimal plan begins with.
        total: How many steps the written plan has.
        fatal: For the step after the kept ones: ``True`` when no valid plan begins with it (off the board,
            a hole, a collision, a dead end, a line that ends off its goal), ``False`` when valid plans do
            but none is optimal; ``None`` when the whole written plan was kept.
        completion: The optimal plan that begins with the kept steps.
    """

    kept: int
    total: int
    fatal: bool | None
    completion: Completion


def complete(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    written: Sequence[Sequence[str]],
    *,
    open_last: bool = True,
    node_budget: int = DEFAULT_NODE_BUDGET,
) -> Completion | None:
    """The valid plan of least sum of costs that begins with the ``written`` lines.

    Args:
        grid, starts, goals: The board, as :func:`~envengineer.mapf.solver.solve` takes it.
        written: The lines of agents ``0, 1, ...`` in order, each a list of action names; fewer lines than
            agents leaves the later agents free.
        open_last: Whether the last written line may still grow (the policy was writing it); otherwise
            every written line is final and its agent rests on its last cell.
        node_budget: Work limit of the search, as for :func:`~envengineer.mapf.solver.solve`.

    Returns:
        The :class:`Completion`, or ``None`` when no valid plan begins with ``written``.

    Raises:
        InstanceFormatError: A malformed board, more lines than agents, or a word that is not an action.
        SolverBudgetExceeded: The search needed more than ``node_budget``.
    """
    check_limits(len(grid), len(starts))
    n = _check_grid(grid)
    k = len(starts)
    if len(goals) != k or not k:
        raise InstanceFormatError(f"{k} starts but {len(goals)} goals; give one of each per agent")
    if len(written) > k:
        raise InstanceFormatError(f"{len(written)} written lines for {k} agents; write at most one per agent")
    s_ids = [_check_cell(grid, s, f"agent {i}'s start") for i, s in enumerate(starts)]
    g_ids = [_check_cell(grid, g, f"agent {i}'s goal") for i, g in enumerate(goals)]
    lines = [_walk(grid, n, s_ids[i], line, i) for i, line in enumerate(written)]
    if any(p is None for p in lines):
        return None  # off the board or into a hole
    cells: list[list[int]] = lines  # type: ignore[assignment]
    n_final = len(cells) - 1 if open_last and cells else len(cells)
    if any(cells[i][-1] != g_ids[i] for i in range(n_final)):
        return None  # a final line that ends off its goal
    if _written_conflict(cells, n_final):
        return None
    rest = list(range(n_final, k))
    if not rest:
        return _completion(cells, g_ids, n)
    prob = _Problem(grid, [s_ids[a] for a in rest], [g_ids[a] for a in rest])
    if any(prob.h[x][prob.starts[x]] >= _INF for x in range(len(rest))):
        return None
    forced = cells[n_final] if n_final < len(cells) else None
    cons = [_constraints(prob, x, cells[:n_final], forced if x == 0 else None) for x in range(len(rest))]
    budget = _Budget(node_budget)
    try:
        found = _plan_rest(prob, cons, budget)
    except _OutOfBudget:
        raise SolverBudgetExceeded(
            f"the completion was not settled within node_budget={node_budget}; raise node_budget"
        ) from None
    if found is None:
        return None
    return _completion([*cells[:n_final], *map(list, found)], g_ids, n)


def complete_instance(inst: Instance, written: Sequence[Sequence[str]], **kw: object) -> Completion | None:
    """:func:`complete` on an :class:`~envengineer.mapf.instance.Instance` (keywords pass through)."""
    return complete(inst.grid, inst.starts, inst.goals, written, **kw)  # type: ignore[arg-type]


def label(
    grid: Sequence[str],
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    written: Sequence[Sequence[str]],
    *,
    open_last: bool = False,
    node_budget: int = DEFAULT_NODE_BUDGET,
) -> Label:
    """The longest prefix of a written plan that an optimal plan begins with, and that plan.

    The written plan is read in writing order: agent 0's moves, the end of its line, agent 1's moves, and
    so on (the last line's end only when ``open_last`` is false). Whether an optimal plan begins with a
    prefix can only turn from yes to no as the prefix grows, so the longest one is found by bisection:
    about ``log2`` of the plan's steps calls of :func:`complete`.

    Args:
        written: The policy's lines in order (a word that is not an action ends the readable prefix: pass
            only actions).
        open_last: Whether the last line was cut off (e.g. by the token budget) rather than ended.

    Raises:
        UnsolvableInstance, SolverBudgetExceeded: As :func:`~envengineer.mapf.solver.solve` raises for the
            board itself.
    """
    steps = writing_steps(written, open_last=open_last)
    solution = solve(grid, starts, goals, node_budget=node_budget)
    optimum = solution.soc

    def best(m: int) -> Completion | None:
        lines, still_open = prefix_lines(steps[:m])
        return complete(grid, starts, goals, lines, open_last=still_open, node_budget=node_budget)

    lo, hi = 0, len(steps)  # an optimal plan begins with steps[:lo]; none begins with steps[:hi + 1]
    top = best(hi)
    if top is not None and top.soc == optimum:
        return Label(hi, hi, None, top)
    # the empty prefix: the solver's own plan (solve() above), not a second search for another one
    found = Completion(solution.paths, tuple(map(tuple, paths_to_actions(solution.paths))), optimum)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        c = best(mid)
        if c is not None and c.soc == optimum:
            lo, found = mid, c
        else:
            hi = mid
    nxt = top if hi == len(steps) else best(lo + 1)
    return Label(lo, len(steps), nxt is None, found)


def label_instance(inst: Instance, written: Sequence[Sequence[str]], **kw: object) -> Label:
    """:func:`label` on an :class:`~envengineer.mapf.instance.Instance` (keywords pass through)."""
    return label(inst.grid, inst.starts, inst.goals, written, **kw)  # type: ignore[arg-type]


def writing_steps(written: Sequence[Sequence[str]], *, open_last: bool) -> list[tuple[int, str]]:
    """The written plan in writing order: ``(agent, move)`` for each move and ``(agent, END)`` for each
    line's end (the last line's only when it is not ``open_last``).

    >>> writing_steps([["RIGHT"], ["UP"]], open_last=True)
    [(0, 'RIGHT'), (0, 'END'), (1, 'UP')]
    """
    steps = [(i, move) for i, line in enumerate(written) for move in (*line, END)]
    if open_last and steps:
        steps.pop()
    return steps


def prefix_lines(steps: Sequence[tuple[int, str]]) -> tuple[list[list[str]], bool]:
    """The lines a prefix of :func:`writing_steps` holds, and whether its last line is still open.

    >>> prefix_lines([(0, "RIGHT"), (0, "END"), (1, "UP")])
    ([['RIGHT'], ['UP']], True)
    """
    lines: list[list[str]] = []
    closed = True
    for i, move in steps:
        if closed:
            lines.append([])
        closed = move == END
        if not closed:
            lines[i].append(move)
    return lines, not closed


def _walk(grid: Sequence[str], n: int, start: int, line: Sequence[str], agent: int) -> list[int] | None:
    """The cells a written line visits, or ``None`` when it leaves the board or steps into a hole."""
    cells = [start]
    r, c = divmod(start, n)
    for move in line:
        step = MOVES.get(move)
        if step is None:
            raise InstanceFormatError(
                f"agent {agent}'s line holds {move!r}; write only the actions {list(MOVES)}"
            )
        r, c = r + step[0], c + step[1]
        if not (0 <= r < n and 0 <= c < n) or grid[r][c] != ".":
            return None
        cells.append(r * n + c)
    return cells


def _written_conflict(cells: Sequence[Sequence[int]], n_final: int) -> bool:
    """Whether two written lines collide; a final line rests on its last cell, an open one (only the last
    line can be) is known only as far as it was written."""
    for j in range(1, len(cells)):
        for i in range(j):
            pi = cells[i][: len(cells[j])] if j >= n_final else cells[i]  # as far as the open line goes
            if _pair_conflicts(pi, cells[j]):
                return True
    return False


def _constraints(
    prob: _Problem, x: int, final: Sequence[Sequence[int]], forced: Sequence[int] | None
) -> _Cons:
    """Agent ``x``'s root constraints: keep clear of the ``final`` lines (their cells at their times, the
    swaps against them, their last cells from their ends on); with ``forced``, follow it cell by cell."""
    nc, goal = prob.nc, prob.goals[x]
    vset: set[int] = set()
    eset: set[int] = set()
    blk: dict[int, int] = {}
    tcons, goal_min = -1, 0
    for p in final:
        last = len(p) - 1
        for t in range(last):
            vset.add(t * nc + p[t])
            if p[t + 1] != p[t]:
                eset.add((t * nc + p[t + 1]) * nc + p[t])
            if p[t] == goal:
                goal_min = max(goal_min, t + 1)
        blk[p[last]] = min(blk.get(p[last], _INF), last)
        tcons = max(tcons, last)
    if forced is not None:
        for t in range(1, len(forced)):
            for w in prob.nbrs[forced[t - 1]]:
                if w != forced[t]:
                    vset.add(t * nc + w)
                    if w == goal:
                        goal_min = max(goal_min, t + 1)
        tcons = max(tcons, len(forced) - 1)
    return (frozenset(vset), frozenset(eset), tcons, goal_min, _INF, blk)


def _plan_rest(prob: _Problem, cons: list[_Cons], budget: _Budget) -> list[tuple[int, ...]] | None:
    """SoC-optimal paths of the problem's agents under their root constraints, or ``None``."""
    if prob.k == 1:
        p = _plan(prob, 0, cons[0], (), _INF, False, budget)
        return None if p is None else [p]
    everyone = tuple(range(prob.k))
    if _space(prob) << prob.k <= JOINT_SPACE_SOC:
        return _plan_group(prob, everyone, cons, (), _INF, False, budget)
    node, _groups = _search(prob, budget, None, [(x,) for x in everyone], cons)
    return None if node is None else list(node.paths)


def _completion(cells: Sequence[Sequence[int]], goals: Sequence[int], n: int) -> Completion:
    paths = tuple(tuple(divmod(c, n) for c in p) for p in cells)
    soc = sum(path_cost(p, g) for p, g in zip(cells, goals, strict=True))
    return Completion(paths=paths, plan=tuple(map(tuple, paths_to_actions(paths))), soc=soc)
