"""The generator: exact counts, determinism in the seed, targets met, sets disjoint by board hash."""

from __future__ import annotations

import numpy as np
import pytest

from envengineer.errors import GenerationError
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import Target, generate_cell, generate_instance, generate_round, sample_board
from envengineer.mapf.solver import shortest_path_lengths

CONFIG = RoundConfig.model_validate(
    {
        "num_samples": 60,
        "sizes": {
            3: {"data_ratio": 1, "hole_ratio": 0.2, "wait_ratio": 0.5},
            5: {"data_ratio": 2, "hole_ratio": 0.3, "wait_ratio": 0.25},
            7: {"data_ratio": 1, "hole_ratio": 0.0, "wait_ratio": 0.0},
        },
    }
)


@pytest.fixture(scope="module")
def round_a():
    return generate_round(CONFIG, seed=11)


def test_round_counts_are_exact(round_a):
    alloc = CONFIG.allocation()  # {3: (15, 8), 5: (30, 8), 7: (15, 0)}
    assert alloc == {3: (15, 8), 5: (30, 8), 7: (15, 0)}
    for size, (count, waits) in alloc.items():
        at_size = [i for i in round_a if i.size == size]
        assert len(at_size) == count
        assert sum(i.needs_wait for i in at_size) == waits


def test_instances_meet_their_targets(round_a):
    for inst in round_a:
        assert inst.num_agents == 2 and inst.solved
        assert round(inst.hole_ratio * inst.size**2) == round(
            CONFIG.sizes[inst.size].hole_ratio * inst.size**2
        )
        lengths = shortest_path_lengths(inst.grid, inst.starts, inst.goals)
        assert inst.shortest_sum == sum(lengths)
        assert inst.optimal_soc >= inst.shortest_sum and inst.optimal_makespan >= max(lengths)


def test_generation_is_deterministic_in_the_seed(round_a):
    again = generate_round(CONFIG, seed=11)
    assert [i.to_json() for i in again] == [i.to_json() for i in round_a]
    other = generate_round(CONFIG, seed=12)
    assert {i.board_hash() for i in other} != {i.board_hash() for i in round_a}


def test_worker_processes_give_the_same_round_and_fill_the_memo(round_a, monkeypatch):
    from envengineer.mapf import solver

    solver.MEMO.clear()
    parallel = generate_round(CONFIG, seed=11, workers=2)
    assert [i.to_json() for i in parallel] == [i.to_json() for i in round_a]
    # the workers' solutions came back: the parent solves none of the round's boards
    monkeypatch.setattr(solver, "_optimum", lambda *a: pytest.fail("a board was solved again"))
    for inst in parallel:
        sol = solver.solve_instance(inst)
        assert (sol.soc, sol.makespan) == (inst.optimal_soc, inst.optimal_makespan)
    assert solver.MEMO.hits == len(parallel)


def test_work_in_processes_comes_back_in_order_and_errors_surface():
    from envengineer.mapf.generator import in_workers

    assert list(in_workers(int, ["1", "22", "3"], 2, [1, 5, 2])) == [1, 22, 3]
    with pytest.raises(ValueError, match="invalid literal"):
        list(in_workers(int, ["1", "x", "3"], 2, [1, 1, 1]))


def test_rounds_use_the_thread_allowance_for_workers(monkeypatch):
    from envengineer.mapf.generator import PARALLEL_FROM, round_workers

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a lane
    assert round_workers(PARALLEL_FROM, 8) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert round_workers(PARALLEL_FROM, 8) == 2 and round_workers(PARALLEL_FROM, 1) == 1
    assert round_workers(PARALLEL_FROM - 1, 8) == 1  # too small to pay for a process


def test_an_instance_regenerates_alone_from_its_seed(round_a):
    inst = round_a[7]
    target = Target(inst.num_agents, inst.size, CONFIG.sizes[inst.size].hole_ratio, bool(inst.needs_wait))
    assert generate_instance(target, inst.seed, instance_id=inst.id) == inst


def test_splits_never_share_a_stream():
    kw = {"num_agents": 2, "size": 6, "count": 30, "wait_count": 10, "seed": 3, "hole_ratio": 0.2}
    train = generate_cell(split="train", **kw)
    val = generate_cell(split="validation", **kw)
    assert not {i.board_hash() for i in train} & {i.board_hash() for i in val}
    assert {i.seed for i in train}.isdisjoint({i.seed for i in val})


def test_exclude_and_unique_are_honoured():
    kw = {
        "num_agents": 2,
        "size": 3,
        "count": 40,
        "wait_count": 0,
        "seed": 0,
        "hole_ratio": 0.0,
        "split": "custom",
    }
    first = generate_cell(**kw)
    hashes = {i.board_hash() for i in first}
    assert len(hashes) == len(first)  # unique by default
    second = generate_cell(**{**kw, "seed": 1}, exclude=hashes)
    assert hashes.isdisjoint(i.board_hash() for i in second)


def test_impossible_target_is_a_clear_error(monkeypatch):
    import envengineer.mapf.generator as gen

    monkeypatch.setattr(gen, "MAX_ATTEMPTS", 50)
    # A lone agent never needs to wait: the target cannot be met, and the error says which knob to change.
    with pytest.raises(GenerationError, match="wait_ratio or hole_ratio of size 4"):
        generate_cell(num_agents=1, size=4, count=1, wait_count=1, seed=0, split="custom", hole_ratio=0.0)


def test_sample_board_places_agents_legally():
    rng = np.random.default_rng(0)
    for _ in range(200):
        board = sample_board(rng, 4, 3, 0.5)
        if board is None:
            continue
        grid, starts, goals = board
        assert sum(r.count("H") for r in grid) == 8
        assert len(set(starts)) == len(set(goals)) == 3
        assert all(
            None not in shortest_path_lengths(grid, [s], [g]) for s, g in zip(starts, goals, strict=True)
        )
