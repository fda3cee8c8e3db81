"""The solver's answers on seeded boards of the solver benchmark, pinned: the optimal sum of costs and
makespan that the code gave before issue 60's clean-up (one path cost, a public board record, clearer
names), through every route a board can take: the default search, satisfiability forced at once, the
integer program, the dense table and the generator's decision of a draw."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
from envengineer.mapf import solver as solver_module
from envengineer.mapf.generator import decide_draw
from envengineer.mapf.solver import path_cost, solve
from envengineer.mapf.solver.dense import solve_dense
from envengineer.mapf.solver.ilp import solve_ilp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts' library
from bench_solver import sample_board

# bench_solver.py --agents 5 --size 10 --seed 7, boards 0-39: (soc, makespan) or how the solver ended
SEED7 = [
    (40, 13), (27, 9), (37, 12), "unsolvable", (32, 13), (57, 18), (38, 12), (41, 14), (20, 6), (33, 15),
    (27, 9), (30, 9), (30, 8), (46, 12), (35, 12), (24, 12), (15, 5), (46, 14), (40, 14), (56, 16),
    (22, 5), (36, 11), (49, 14), (31, 10), (17, 6), (14, 5), (29, 7), (42, 11), (51, 13), (35, 12),
    (38, 13), (18, 6), (71, 22), (28, 10), (27, 9), (20, 8), (26, 9), (57, 20), (39, 15), (41, 11),
]  # fmt: skip
# three agents on 4x4 (--agents 3 --size 4 --seed 3), boards 0-11; board 5 has no plan
SMALL = [
    (8, 5), (5, 2), (11, 4), (10, 4), (8, 3), "unsolvable", (7, 3), (9, 3), (6, 3), (5, 2), (22, 8), (9, 4),
]  # fmt: skip
# decide_draw on SMALL's boards, needs_wait=False: the wait-free draws' answers, None for the others
WAIT_FREE = [(8, 5), (5, 2), None, None, (8, 3), None, (7, 3), None, None, (5, 2), None, (9, 4)]


def _board(seed: int, agents: int, size: int, i: int):
    rng = np.random.default_rng(np.random.SeedSequence((seed, agents, size, i)))
    return sample_board(rng, size, agents, None)


def _answer(fn, board, **kw):
    """``fn(*board, **kw)``'s (soc, makespan), ``None`` where it gives none, or how it ended."""
    try:
        sol = fn(*board, **kw)
    except UnsolvableInstance:
        return "unsolvable"
    except SolverBudgetExceeded:
        return "budget"
    return None if sol is None else (sol.soc, sol.makespan)


def test_the_default_search_answers_as_before():
    assert [_answer(solve, _board(7, 5, 10, i), memo=False) for i in range(40)] == SEED7


def test_satisfiability_at_once_answers_as_before(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(solver_module, "CBS_UNITS_BEFORE_SAT", 0)
    monkeypatch.setattr(solver_module, "HORIZON_UNITS_BEFORE_SAT", 0)
    assert [_answer(solve, _board(7, 5, 10, i), memo=False) for i in range(20)] == SEED7[:20]


def test_the_integer_program_the_dense_table_and_the_generator_answer_as_before():
    boards = [_board(3, 3, 4, i) for i in range(12)]
    assert [_answer(solve, b, memo=False) for b in boards] == SMALL
    # the integer program does not decide a board without a plan (it tries horizon after horizon)
    planned = [i for i, x in enumerate(SMALL) if x != "unsolvable"]
    assert [_answer(solve_ilp, boards[i]) for i in planned] == [SMALL[i] for i in planned]
    assert [_answer(solve_dense, b) for b in boards] == SMALL
    assert [_answer(decide_draw, b, needs_wait=True) for b in boards] == [
        None if x == "unsolvable" else x for x in SMALL
    ]
    assert [_answer(decide_draw, b, needs_wait=False) for b in boards] == WAIT_FREE


def test_path_cost_is_the_generators_former_count_of_the_steps_before_resting():
    """The generator counted a wait-free path's cost as its length less the steps spent on its last cell
    at the end; :func:`path_cost` with that last cell as the goal is the same number on any path."""

    def resting(path):  # the generator's former ``_resting``
        t = len(path) - 1
        while t > 0 and path[t - 1] == path[-1]:
            t -= 1
        return len(path) - 1 - t

    rng = np.random.default_rng(60)
    for _ in range(500):
        cells = [int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 9)))]
        assert path_cost(cells, cells[-1]) == len(cells) - 1 - resting(cells)
        pairs = [divmod(c, 2) for c in cells]
        assert path_cost(pairs, pairs[-1]) == path_cost(cells, cells[-1])
