"""The solver as the teacher of partial answers: hand-checked boards and an independent brute force."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import numpy as np
import pytest

from envengineer.errors import InstanceFormatError, UnsolvableInstance
from envengineer.mapf.instance import MOVES, Cell
from envengineer.mapf.solver import paths_to_actions, solve
from envengineer.mapf.solver.teacher import complete, label, prefix_lines, writing_steps
from test_solver import _free, random_board

OPEN3 = ["...", "...", "..."]
SWAP = ([(0, 0), (0, 2)], [(0, 2), (0, 0)])  # SPEC §2.3: optimal SoC 6


# -- hand-checked ------------------------------------------------------------------------------------------
def test_a_final_first_line_leaves_the_second_agent_the_detour():
    best = complete(OPEN3, *SWAP, [["RIGHT", "RIGHT"]], open_last=False)
    assert best is not None and best.soc == 6
    assert best.plan[0] == ("RIGHT", "RIGHT") and len(best.plan[1]) == 4


def test_a_late_first_line_costs_one_more():
    # A0 waits once: it leaves (0,0) at t = 2, so A1 cannot slip along row 0 and still detours (4 moves)
    best = complete(OPEN3, *SWAP, [["WAIT", "RIGHT", "RIGHT"]], open_last=False)
    assert best is not None and best.soc == 3 + 4


def test_an_open_line_is_continued_from_where_it_stands():
    best = complete(OPEN3, *SWAP, [["DOWN"]], open_last=True)
    assert best is not None and best.plan[0][0] == "DOWN"
    assert best.soc == 6  # A0 DOWN RIGHT RIGHT UP, A1 LEFT LEFT


@pytest.mark.parametrize(
    "written, open_last",
    [
        ([["UP"]], True),  # off the board
        ([["RIGHT"]], False),  # a final line that ends off its goal
        ([["RIGHT", "RIGHT"], ["LEFT"]], True),  # A1 onto A0's cell at t = 1
        ([["RIGHT"], ["LEFT"]], True),  # A0's line is final (A1's is open) and ends off its goal
    ],
)
def test_a_prefix_no_valid_plan_begins_with_is_none(written, open_last):
    assert complete(OPEN3, *SWAP, written, open_last=open_last) is None


def test_a_hole_ends_the_prefix():
    assert complete([".H.", "...", "..."], *SWAP, [["RIGHT"]]) is None


def test_a_dead_end_is_none():
    # A1 must leave the corridor (column 1) through (1,1), A0's goal. A0 going there at once (final line)
    # collides with nobody yet, but A1 can no longer get out; A0 waiting twice first lets it through.
    grid, starts, goals = ["...", "H.H", "H.H"], [(0, 0), (2, 1)], [(1, 1), (0, 2)]
    assert complete(grid, starts, goals, [["RIGHT", "DOWN"]], open_last=False) is None
    best = complete(grid, starts, goals, [["WAIT", "WAIT", "RIGHT", "DOWN"]], open_last=False)
    assert best is not None and best.plan[1] == ("UP", "UP", "RIGHT")
    assert solve(grid, starts, goals).soc == best.soc == 4 + 3


def test_words_that_are_not_actions_and_too_many_lines_are_refused():
    with pytest.raises(InstanceFormatError, match="only the actions"):
        complete(OPEN3, *SWAP, [["RIGHT", "JUMP"]])
    with pytest.raises(InstanceFormatError, match="at most one per agent"):
        complete(OPEN3, *SWAP, [["RIGHT"], ["LEFT"], ["UP"]])


def test_label_of_an_optimal_plan_keeps_everything():
    lab = label(OPEN3, *SWAP, [["RIGHT", "RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]])
    assert (lab.kept, lab.total, lab.fatal, lab.completion.soc) == (
        8,
        8,
        None,
        6,
    )  # 2 moves, an end, 4 moves, an end


def test_label_stops_at_a_suboptimal_wait():
    # SPEC §2.3's suboptimal plan: the first step (WAIT) already rules out SoC 6, though it is valid
    lab = label(OPEN3, *SWAP, [["WAIT", "RIGHT", "RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]])
    assert (lab.kept, lab.fatal, lab.completion.soc) == (0, False, 6)


def test_label_stops_at_a_collision_and_keeps_the_policy_s_first_line():
    lab = label(OPEN3, *SWAP, [["RIGHT", "RIGHT"], ["LEFT", "LEFT"]])
    assert (lab.kept, lab.fatal) == (3, True)  # A0's two moves and its line's end
    assert lab.completion.plan[0] == ("RIGHT", "RIGHT") and lab.completion.soc == 6


def test_label_of_a_line_ended_too_early():
    lab = label(OPEN3, *SWAP, [["RIGHT"], ["DOWN", "LEFT", "LEFT", "UP"]])
    assert (lab.kept, lab.fatal) == (1, True)  # ending A0's line on (0,1) is not a valid plan
    assert lab.completion.plan[0] == ("RIGHT", "RIGHT")


def test_label_of_a_cut_off_answer():
    lab = label(OPEN3, *SWAP, [["RIGHT", "RIGHT"], ["DOWN", "LEFT"]], open_last=True)
    assert lab.kept == lab.total == 5 and lab.fatal is None
    assert lab.completion.plan[1][:2] == ("DOWN", "LEFT") and lab.completion.soc == 6


# -- an independent oracle ---------------------------------------------------------------------------------
def _cells(start: Cell, line: Sequence[str]) -> list[Cell]:
    out = [start]
    for m in line:
        out.append((out[-1][0] + MOVES[m][0], out[-1][1] + MOVES[m][1]))
    return out


def oracle_rest(grid, starts, goals, written, open_last, horizon):
    """Least SoC of the agents not yet final, over plans whose moves all end by ``horizon``: Dijkstra over
    (time, positions, finished). Final lines are moving obstacles that stay on their last cell; the open
    line's agent must stand on its written cells at their times. ``None``: no such plan (or the written
    lines themselves are broken)."""
    k = len(starts)
    n_final = len(written) - 1 if open_last and written else len(written)
    final = [_cells(starts[i], written[i]) for i in range(n_final)]
    forced = _cells(starts[n_final], written[n_final]) if n_final < len(written) else None
    every = final + ([forced] if forced else [])
    if any(not _free(grid, c) for p in every for c in p):
        return None
    if any(p[-1] != goals[i] for i, p in enumerate(final)):
        return None

    def at(p, t):
        return p[min(t, len(p) - 1)]

    for (_i, p), (j, q) in itertools.combinations(enumerate(every), 2):
        span = max(len(p), len(q)) if forced is None or j < n_final else len(q)
        for t in range(span):
            if at(p, t) == at(q, t) or (t + 1 < span and at(p, t) == at(q, t + 1) and at(q, t) == at(p, t + 1)
                                        and at(p, t) != at(p, t + 1)):  # fmt: skip
                return None
    rest = list(range(n_final, k))
    start = (0, tuple(starts[a] for a in rest), frozenset())
    best = {start: 0}
    heap = [(0, 0, start)]
    tick = 0
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > best[state]:
            continue
        t, pos, done = state
        if len(done) == len(rest):
            return d
        nxt = []
        for x, a in enumerate(rest):  # finish: stay on the goal for good, clear of every final line
            if x in done or pos[x] != goals[a]:
                continue
            if x == 0 and forced is not None and t < len(forced) - 1:
                continue
            if any(at(p, u) == goals[a] for p in final for u in range(t, horizon + len(p) + 1)):
                continue
            nxt.append(((t, pos, done | {x}), d))
        if t < horizon:
            options = []
            for x, (r, c) in enumerate(pos):
                if x in done:
                    options.append([(r, c)])
                elif x == 0 and forced is not None and t + 1 < len(forced):
                    options.append([forced[t + 1]])
                else:
                    options.append(
                        [(r + dr, c + dc) for dr, dc in MOVES.values() if _free(grid, (r + dr, c + dc))]
                    )
            for new in itertools.product(*options):
                if len(set(new)) < len(new):
                    continue
                if any(new[x] == pos[y] and new[y] == pos[x] and new[x] != pos[x]
                       for x in range(len(pos)) for y in range(x + 1, len(pos))):  # fmt: skip
                    continue
                if any(
                    _meets(pos[x], new[x], at(p, t), at(p, t + 1)) for x in range(len(pos)) for p in final
                ):
                    continue
                nxt.append(((t + 1, new, done), d + len(rest) - len(done)))
        for s, nd in nxt:
            if nd < best.get(s, 10**9):
                best[s] = nd
                tick += 1
                heapq.heappush(heap, (nd, tick, s))
    return None


def _meets(a0, a1, b0, b1):
    """Whether a move ``a0 -> a1`` and a move ``b0 -> b1`` in the same step collide (vertex or swap)."""
    return a1 == b1 or (a1 == b0 and a0 == b1 and a0 != a1)


def _random_board(rng, n, k):
    """A random solvable board (``test_solver``'s draw) with its solution."""
    while True:
        grid, starts, goals = random_board(rng, n, k)
        try:
            return grid, starts, goals, solve(grid, starts, goals)
        except UnsolvableInstance:  # not what this test is about
            continue


def _random_prefix(rng, grid, starts, goals, sol):
    """A prefix as a policy might write it: some lines the solver's, some wandering, some cut short."""
    plan = paths_to_actions(sol.paths)
    lines_n = int(rng.integers(0, len(starts) + 1))
    written = []
    for i in range(lines_n):
        if rng.random() < 0.5:
            line = list(plan[i])
        else:
            line, cell = [], starts[i]
            for _ in range(int(rng.integers(0, 5))):
                m = str(rng.choice(list(MOVES)))
                nxt = (cell[0] + MOVES[m][0], cell[1] + MOVES[m][1])
                if _free(grid, nxt):
                    line.append(m)
                    cell = nxt
            if rng.random() < 0.7:  # usually walk on to the goal so that the line may be final
                line += (
                    paths_to_actions([solve(grid, [cell], [goals[i]]).paths[0]])[0]
                    if cell != goals[i]
                    else []
                )
        written.append(line)
    open_last = bool(written) and rng.random() < 0.5
    if open_last:
        written[-1] = written[-1][: int(rng.integers(0, len(written[-1]) + 1))]
    return written, open_last


@pytest.mark.parametrize("seed", range(6))
def test_completions_match_brute_force_on_small_boards(seed):
    rng = np.random.default_rng([seed, 39])
    horizon = 12
    checked = found = 0
    for _ in range(40):
        n = int(rng.integers(2, 4))
        k = int(rng.integers(1, 4)) if n == 3 else int(rng.integers(1, 3))
        grid, starts, goals, sol = _random_board(rng, n, k)
        written, open_last = _random_prefix(rng, grid, starts, goals, sol)
        got = complete(grid, starts, goals, written, open_last=open_last)
        want = oracle_rest(grid, starts, goals, written, open_last, horizon)
        n_final = len(written) - 1 if open_last and written else len(written)
        if got is None:
            assert want is None, (grid, starts, goals, written, open_last)
            checked += 1
            continue
        found += 1
        # the completion is a valid plan that begins with the written lines
        for i, line in enumerate(written):
            if i < n_final:
                assert list(got.plan[i]) == [m for m in line] or _same_cells(starts[i], line, got.plan[i])
            else:
                assert _same_cells(starts[i], line, got.plan[i][: len(line)])
        from envengineer.mapf.instance import Instance
        from envengineer.mapf.validator import validate_plan

        inst = Instance(
            "t", tuple(grid), tuple(starts), tuple(goals), sol.soc, sol.makespan, sol.shortest_sum
        )
        verdict = validate_plan(inst, [list(p) for p in got.plan])
        assert verdict.valid and verdict.soc == got.soc
        fixed = sum(len(got.plan[i]) for i in range(n_final))
        if max(len(p) for p in got.paths) - 1 <= horizon:
            assert want == got.soc - fixed, (grid, starts, goals, written, open_last)
            checked += 1
    assert checked >= 30 and found >= 10


def _same_cells(start, a, b):
    """Two lines that visit the same cells (trailing waits aside)."""
    ca, cb = _cells(start, a), _cells(start, b)
    width = max(len(ca), len(cb))
    return [ca[min(t, len(ca) - 1)] for t in range(width)] == [cb[min(t, len(cb) - 1)] for t in range(width)]


def _soc_of_prefix(grid, starts, goals, steps):
    """The best completion's SoC of the first ``steps`` in writing order (``None``: no valid plan)."""
    lines, still_open = prefix_lines(steps)
    c = complete(grid, starts, goals, lines, open_last=still_open)
    return None if c is None else c.soc


@pytest.mark.parametrize("seed", range(4))
def test_labels_are_the_longest_optimal_prefix(seed):
    """Against a linear scan: every shorter prefix extends to an optimum, the next step does not."""
    rng = np.random.default_rng([seed, 3939])
    for _ in range(15):
        grid, starts, goals, sol = _random_board(rng, 3, int(rng.integers(2, 4)))
        written, open_last = _random_prefix(rng, grid, starts, goals, sol)
        lab = label(grid, starts, goals, written, open_last=open_last)
        steps = writing_steps(written, open_last=open_last)
        assert lab.total == len(steps) == sum(map(len, written)) + len(written) - open_last

        scan = [_soc_of_prefix(grid, starts, goals, steps[:m]) for m in range(len(steps) + 1)]
        kept = max(m for m, s in enumerate(scan) if s == sol.soc)
        assert all(s == sol.soc for s in scan[: kept + 1])
        assert lab.kept == kept and lab.completion.soc == sol.soc
        if kept < len(steps):
            assert lab.fatal == (scan[kept + 1] is None)
        else:
            assert lab.fatal is None
