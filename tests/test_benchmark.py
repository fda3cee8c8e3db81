"""The packaged benchmark: its two versions and their hashes, its shape (SPEC §4), v2's keep rule (every draw
decided, the build stops naming a draw it cannot decide), its shipped plans, and a validation set disjoint
from it."""

from __future__ import annotations

import functools
import json
from collections import Counter

import numpy as np
import pytest

from envengineer.errors import ConfigError, InstanceFormatError, SolverBudgetExceeded, UndecidedDraw
from envengineer.loop.experiment import Experiment
from envengineer.mapf import benchmark as bm
from envengineer.mapf import generator as gen
from envengineer.mapf import solver as solver_module
from envengineer.mapf.instance import save_instances
from envengineer.mapf.policies import respond
from envengineer.mapf.solver import paths_to_actions, solve
from envengineer.mapf.validator import format_answer, validate


@pytest.fixture(scope="module")
def bench():
    return bm.load_benchmark()


@pytest.fixture(scope="module")
def bench_v1():
    return bm.load_benchmark("v1")


@pytest.fixture(scope="module")
def bench_v2():
    return bm.load_benchmark("v2")


def test_the_default_version_ships():
    assert bm.benchmark_path().exists() and bm.benchmark_path() == bm.benchmark_path(bm.DEFAULT_VERSION)
    assert bm.BENCHMARK_SHA256 == bm.VERSIONS[bm.DEFAULT_VERSION].sha256
    assert Experiment.model_validate({"name": "x"}).evaluation.benchmark_version == bm.DEFAULT_VERSION
    assert bm.DEFAULT_VERSION == "v2"


def test_v1_loads_by_name_and_keeps_its_hash(bench_v1):
    assert bm.sha256_file(bm.benchmark_path("v1")) == bm.BENCHMARK_V1_SHA256
    assert bm.plans_path("v1") is None
    assert bm.benchmark_name("benchmark-v1") == "v1" and bm.benchmark_name("benchmark") == bm.DEFAULT_VERSION
    assert bm.benchmark_name("benchmark-v2") == "v2" and bm.benchmark_name("benchmark.jsonl") is None


def test_v2_file_and_plans_have_the_documented_hashes(bench_v1, bench_v2):
    assert bm.sha256_file(bm.benchmark_path("v2")) == bm.BENCHMARK_V2_SHA256
    assert bm.sha256_file(bm.plans_path("v2")) == bm.BENCHMARK_V2_PLANS_SHA256
    assert [i.id for i in bench_v1] == [i.id for i in bench_v2]  # the same ids, line for line
    assert bench_v1 != bench_v2


def test_a_missing_version_file_names_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setattr(bm, "_data", lambda name: tmp_path / name)
    with pytest.raises(InstanceFormatError, match="envengineer benchmark build --version v2 --workers 2 -o"):
        bm.load_benchmark("v2")


def test_an_unknown_version_is_a_clear_error():
    message = r"unknown benchmark version 'v3'; use one of v1, v2 \(default v[12]\)"
    with pytest.raises(ConfigError, match=message):
        bm.load_benchmark("v3")
    with pytest.raises(ConfigError, match=message):
        bm.benchmark_name("benchmark-v3")
    with pytest.raises(ConfigError, match="benchmark_version"):
        Experiment.from_dict({"name": "x", "evaluation": {"benchmark_version": "v3"}})
    exp = Experiment.model_validate({"name": "x", "evaluation": {"benchmark_version": "v2"}})
    assert exp.evaluation.benchmark_version == "v2"


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_shape(version, request):
    instances = request.getfixturevalue(f"bench_{version}")
    assert len(instances) == 3150
    cells = Counter((i.num_agents, i.size) for i in instances)
    assert set(cells) == {(k, n) for k in (3, 4, 5) for n in range(k, 11)}
    assert set(cells.values()) == {150}
    subsets = Counter((i.num_agents, i.size, i.meta["subset"]) for i in instances)
    assert set(subsets.values()) == {50}
    waits = Counter((i.meta["subset"], bool(i.needs_wait)) for i in instances)
    assert {s: waits[(s, True)] // 21 for s in bm.SUBSETS} == {"wr_025": 13, "wr_050": 25, "wr_075": 38}
    assert all(i.solved and 0 <= i.hole_ratio <= 0.5 for i in instances)
    assert len({i.board_hash() for i in instances}) == 3150
    assert len({i.id for i in instances}) == 3150


def test_shipped_plans_are_valid_optimal_and_for_v2_boards(bench_v2):
    by_hash = {i.board_hash(): i for i in bench_v2}
    rows = [json.loads(line) for line in bm.plans_path("v2").read_text().splitlines()]
    assert rows and len({r["board_hash"] for r in rows}) == len(rows)
    for row in rows:
        inst = by_hash[row["board_hash"]]
        assert inst.id == row["id"]
        verdict = validate(inst, respond("optimal", inst, np.random.default_rng(0)))
        assert verdict.valid and verdict.soc == inst.optimal_soc, inst.id


@pytest.fixture
def fresh_plans():
    """The shipped plans read anew in this test and after it (they are read once per process)."""
    bm._shipped_plans.cache_clear()
    yield
    bm._shipped_plans.cache_clear()


def test_a_damaged_plans_file_is_refused_naming_both_hashes(bench_v2, monkeypatch, tmp_path, fresh_plans):
    good = bm.plans_path("v2").read_bytes()
    row = json.loads(good.splitlines()[0])
    inst = next(i for i in bench_v2 if i.id == row["id"])
    damaged = good.replace(b'"paths":[[[1,6],[1,5]', b'"paths":[[[1,6],[1,6]', 1)  # one cell of one step
    assert damaged != good
    (tmp_path / "benchmark-v2-plans.jsonl").write_bytes(damaged)
    monkeypatch.setattr(bm, "_data", lambda name: tmp_path / name)
    actual = bm.hashlib.sha256(damaged).hexdigest()
    message = (
        rf"benchmark-v2-plans\.jsonl: sha256 {actual}, but this release ships {bm.BENCHMARK_V2_PLANS_SHA256}"
    )
    with pytest.raises(InstanceFormatError, match=message):
        bm.shipped_plan(inst)
    with pytest.raises(InstanceFormatError, match="plans file is damaged or edited"):
        respond("optimal", inst, np.random.default_rng(0))  # never an "optimal" answer from it


def test_the_plans_file_is_checked_once_per_process(bench_v2, monkeypatch, fresh_plans):
    checked = []
    real = bm.check_plans_file
    monkeypatch.setattr(
        bm, "check_plans_file", lambda path, expected: checked.append(path) or real(path, expected)
    )
    row = json.loads(bm.plans_path("v2").read_text().splitlines()[0])
    inst = next(i for i in bench_v2 if i.id == row["id"])
    assert bm.shipped_plan(inst) == bm.shipped_plan(inst) is not None
    assert checked == [bm.plans_path("v2")]


def test_the_first_shipped_board_is_beyond_the_default_budget(bench_v2):
    """Why plans ship at all: the solver does not settle these boards within its default budget."""
    row = json.loads(bm.plans_path("v2").read_text().splitlines()[0])
    inst = next(i for i in bench_v2 if i.id == row["id"])
    with pytest.raises(SolverBudgetExceeded):
        solve(inst.grid, inst.starts, inst.goals, memo=False)


def test_a_draw_the_build_cannot_decide_stops_it_naming_the_draw(monkeypatch):
    """With a budget of one unit nothing is decided: the first draw of the first instance of the first
    subset stops the build, and the message says which draw that is and how to fix it."""
    monkeypatch.setattr(gen, "solve", functools.partial(gen.solve, node_budget=1))  # the fast path too
    with pytest.raises(UndecidedDraw) as err:
        bm.build_set(
            seed=7, split="custom", per_cell=1, agents=(2,), min_size=3, max_size=3, decide=1, workers=1
        )
    text = str(err.value)
    for part in (
        "draw 0 of instance 2agents_3x3_wr025_000000",
        "2 agents, 3x3, subset wr_025, stream 0, index 0, seed 7",
        "seed tuple (7, 3, 2, 3, 0, 0)",
        "not decided within node_budget=1",
        "raise DECIDE_BUDGET",
    ):
        assert part in text


def test_v2_keeps_a_draw_v1_drops_for_its_budget(bench_v1):
    """4 agents on 4x4, wait subset wr_025, instance 6: its draw 3 needs more than the solver's default
    budget, so v1 redraws and v2 keeps it (solvable, and it needs a wait as that instance must). The first
    7 instances of the subset are built alone (each has its own seed; the subset is the cell's first
    stream and its first 13 need a wait), exactly as in the whole cell."""
    kw = dict(num_agents=4, size=4, count=7, wait_count=7, seed=bm.BENCHMARK_SEED, split="benchmark")
    kw.update(hole_ratio=None, stream=0, id_prefix="4agents_4x4_wr025", meta={"subset": "wr_025"})
    plans: dict = {}
    part = {
        "v1": gen.generate_cell(**kw),
        "v2": gen.generate_cell(**kw, decide=gen.DECIDE_BUDGET, plans=plans),
    }
    shipped = {i.id: i for i in bench_v1}
    assert [i.to_dict() for i in part["v1"]] == [shipped[i.id].to_dict() for i in part["v1"]]
    kept = part["v2"][6]
    assert kept.id == "4agents_4x4_wr025_000006" and kept.needs_wait and kept.id in plans
    assert kept.board_hash() != part["v1"][6].board_hash()
    assert [i.to_dict() for i in part["v2"][:6]] == [i.to_dict() for i in part["v1"][:6]]


@pytest.mark.parametrize(("agents", "size"), [(3, 3), (3, 4)])
def test_the_decided_rule_keeps_what_an_unlimited_search_keeps(monkeypatch, agents, size):
    """v2's promise: the kept draws do not depend on the search. With a default budget so small that every
    draw goes to :func:`~envengineer.mapf.generator.decide_draw`, the cell is the one the budgeted rule
    gives when the solver settles every draw (the finite joint searches, a budget they never reach)."""
    kw = dict(num_agents=agents, size=size, count=8, wait_count=4, seed=5, split="custom", hole_ratio=None)
    real = gen.solve
    monkeypatch.setattr(gen, "solve", functools.partial(real, node_budget=10))
    plans: dict = {}
    decided = gen.generate_cell(**kw, decide=10**8, plans=plans)
    monkeypatch.setattr(solver_module, "JOINT_SPACE", 10**9)
    monkeypatch.setattr(solver_module, "JOINT_SPACE_SOC", 10**9)
    monkeypatch.setattr(gen, "solve", functools.partial(real, node_budget=10**8))
    unlimited = gen.generate_cell(**kw)
    assert [i.to_dict() for i in decided] == [i.to_dict() for i in unlimited]
    assert plans and set(plans) <= {i.id for i in decided}
    for inst in decided:  # each shipped plan is valid and optimal
        if inst.id in plans:
            verdict = validate(inst, format_answer(paths_to_actions(plans[inst.id])))
            assert verdict.valid and verdict.soc == inst.optimal_soc, inst.id


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
    """The whole v2 build, in two worker processes (about 340 s of CPU: 3 to 4 minutes on 2 cores), equals
    the shipped file byte for byte. The plans are checked for being valid and optimal, not byte for byte:
    which boards need one, and which of their optima the solver returns, may change with the solver without
    changing the benchmark."""
    plans: dict = {}
    built = bm.build_benchmark(version="v2", workers=2, plans=plans)
    path = save_instances(built, tmp_path / "benchmark-v2.jsonl")
    assert bm.sha256_file(path) == bm.BENCHMARK_V2_SHA256
    assert plans, "the build holds boards beyond the default budget"
    for inst in built:
        if inst.id in plans:
            verdict = validate(inst, format_answer(paths_to_actions(plans[inst.id])))
            assert verdict.valid and verdict.soc == inst.optimal_soc, inst.id
