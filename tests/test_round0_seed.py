"""``seeds.config: null``: each seed of an arm draws its own round-0 configuration from its data seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from envengineer.loop.runner import LoopRunner
from envengineer.loop.seeds import with_seed
from envengineer.mapf.config import round0_config
from small_sets import write_small_sets
from test_loop import make_experiment


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


def _round0(tmp_path: Path, sets: dict[str, Path], seed: int, config: int | None) -> object:
    seeds = {k.removeprefix("seeds."): v for k, v in with_seed({}, seed).items()}
    exp = make_experiment(sets, seeds={**seeds, "config": config})
    return LoopRunner(exp, tmp_path / f"r{seed}-{config}").round0


def test_a_fixed_config_seed_shares_round0_and_null_draws_it_per_seed(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    shared = [_round0(tmp_path, sets, s, 0) for s in (1, 2)]
    assert shared[0] == shared[1]  # --seed leaves seeds.config: one start for every seed
    own = [_round0(tmp_path, sets, s, None) for s in (1, 2)]
    assert own[0] != own[1]
    space_kw = {"num_agents": own[0].num_agents, "num_samples": own[0].num_samples}
    assert own[1] == round0_config(2, **space_kw)  # drawn with the data seed --seed 2 set
