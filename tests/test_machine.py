"""The process policy in ``envengineer.machine``: threads a process and a lane may use, and how pools start
their workers (issue 43)."""

from __future__ import annotations

import sys

import pytest

from envengineer import machine

#: What a worker that imported this module afresh sees; the parent changes it in the pool test.
_WHERE = "imported"


def _where(_: object) -> str:
    return _WHERE


def test_the_thread_allowance_is_omp_num_threads_else_the_usable_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(machine, "usable_cpus", lambda: 6)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # what a lane of two threads gets
    assert machine.thread_allowance() == 2
    for unusable in ("", "0", "-1", "two", "1.5"):
        monkeypatch.setenv("OMP_NUM_THREADS", unusable)
        assert machine.thread_allowance() == 6, unusable
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert machine.thread_allowance() == 6


def test_a_round_takes_its_workers_from_the_thread_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    from envengineer.mapf.generator import PARALLEL_FROM, round_workers

    monkeypatch.setattr(machine, "usable_cpus", lambda: 3)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert round_workers(PARALLEL_FROM, 8) == 3 and round_workers(PARALLEL_FROM, 2) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a lane
    assert round_workers(PARALLEL_FROM, 8) == 1


def test_lanes_divide_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from envengineer.sweep.executors import LanesExecutor

    monkeypatch.setattr(machine, "usable_cpus", lambda: 8)
    assert [machine.lane_threads(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert machine.lane_threads(2, cpus=2) == 1 and machine.lane_threads(3, cpus=2) == 1
    env = machine.thread_env(3)
    assert [env[name] for name in machine.THREAD_VARIABLES] == ["3", "3", "3"]
    monkeypatch.setattr("envengineer.sweep.executors.usable_cpus", lambda: 8)
    assert [LanesExecutor(n).threads for n in (1, 2, 3, 9)] == [8, 4, 2, 1]
    assert LanesExecutor(2, threads=1).threads == 1


def test_pool_workers_are_fresh_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    from envengineer.mapf import benchmark, generator

    assert machine.START_METHOD == "spawn" and machine.pool_context().get_start_method() == "spawn"
    assert generator.in_workers is machine.in_workers is benchmark.in_workers  # one pool for both
    monkeypatch.setattr(sys.modules[__name__], "_WHERE", "parent")
    assert _where(None) == "parent"
    # a forked worker would see the parent's value; a spawned one imports this module afresh
    assert list(machine.in_workers(_where, [0, 1, 2], 2, [1, 3, 2])) == ["imported"] * 3


def test_the_benchmark_build_gives_the_same_set_in_spawned_workers() -> None:
    from envengineer.mapf.benchmark import VALIDATION_SEED, build_set

    kw = {"seed": VALIDATION_SEED, "split": "validation", "per_cell": 1, "agents": (3, 4), "max_size": 6}
    alone, pooled = build_set(**kw, workers=1), build_set(**kw, workers=2)
    assert [i.to_json() for i in pooled] == [i.to_json() for i in alone]
