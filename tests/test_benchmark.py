"""The packaged benchmark: its shape (SPEC §4), its hash, and a validation set disjoint from it."""

from __future__ import annotations

from collections import Counter

import pytest

from envengineer.mapf import benchmark as bm
from envengineer.mapf.instance import save_instances


@pytest.fixture(scope="module")
def bench():
    return bm.load_benchmark()


def test_packaged_file_has_the_documented_hash():
    assert bm.sha256_file(bm.benchmark_path()) == bm.BENCHMARK_SHA256


def test_shape(bench):
    assert len(bench) == 3150
    cells = Counter((i.num_agents, i.size) for i in bench)
    assert set(cells) == {(k, n) for k in (3, 4, 5) for n in range(k, 11)}
    assert set(cells.values()) == {150}
    subsets = Counter((i.num_agents, i.size, i.meta["subset"]) for i in bench)
    assert set(subsets.values()) == {50}
    waits = Counter((i.meta["subset"], bool(i.needs_wait)) for i in bench)
    assert {s: waits[(s, True)] // 21 for s in bm.SUBSETS} == {"wr_025": 13, "wr_050": 25, "wr_075": 38}
    assert all(i.solved and 0 <= i.hole_ratio <= 0.5 for i in bench)
    assert len({i.board_hash() for i in bench}) == 3150
    assert len({i.id for i in bench}) == 3150


def test_validation_set_is_disjoint_and_of_the_same_shape(bench):
    val = bm.build_validation_set(per_cell=1, workers=1)
    assert len(val) == 21 * 3
    assert {i.board_hash() for i in val}.isdisjoint(i.board_hash() for i in bench)


def test_a_one_agent_validation_set_has_no_waits():
    # one agent's optimum never waits: every subset draws boards without one instead of failing
    val = bm.build_validation_set(per_cell=2, agents=(1,), min_size=3, max_size=4, workers=1)
    assert Counter((i.size, i.meta["subset"]) for i in val) == {(n, s): 2 for n in (3, 4) for s in bm.SUBSETS}
    assert not any(i.needs_wait for i in val)


@pytest.mark.slow
def test_rebuild_is_byte_identical(tmp_path):
    path = save_instances(bm.build_benchmark(), tmp_path / "benchmark.jsonl")
    assert bm.sha256_file(path) == bm.BENCHMARK_SHA256
