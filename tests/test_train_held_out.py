"""`envengineer train` never trains on held-out boards without saying so (issue 16)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from envengineer.cli import main
from envengineer.mapf.benchmark import load_benchmark
from envengineer.mapf.config import round0_config
from envengineer.mapf.instance import load_instances, save_instances
from small_sets import write_small_sets

grpo = pytest.importorskip("envengineer.training.grpo")


class _Result:
    checkpoint = Path("ckpt")
    metrics: ClassVar[dict[str, Any]] = {}
    steps = 0
    seconds = 0.0


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake(name: str) -> Any:
        def run(model: Any, data: Any, **kw: Any) -> _Result:
            seen[name] = (data, kw)
            return _Result()

        return run

    def generate(config: Any, out: Any, **kw: Any) -> tuple[list, float]:  # what --round generates from
        seen["round"] = (config, kw)
        return [], 0.0

    monkeypatch.setattr(grpo, "require_train_deps", lambda: None)
    monkeypatch.setattr(grpo, "train_round", fake("instances"))
    monkeypatch.setattr(grpo, "generate_round_data", generate)
    return seen


def test_round_excludes_the_benchmark_and_exclude_files(tmp_path: Path, calls: dict[str, Any]) -> None:
    sets = write_small_sets(tmp_path, 61)
    round_file = tmp_path / "round.yaml"
    round_file.write_text(yaml.safe_dump(round0_config(0).model_dump(mode="json")))
    out = tmp_path / "out"
    assert main(["train", "--round", str(round_file), "--out", str(out), "--grpo", "grpo-cpu"]) == 0
    bench = {i.board_hash() for i in load_benchmark()}
    assert calls["round"][1]["exclude"] == bench and len(bench) == 3150
    args = ["train", "--round", str(round_file), "--out", str(out), "--grpo", "grpo-cpu"]
    assert main([*args, "--exclude", str(sets["validation"])]) == 0
    val = {i.board_hash() for i in load_instances(sets["validation"])}
    assert calls["round"][1]["exclude"] == bench | val


def test_instances_on_excluded_boards_are_dropped_with_a_count(
    tmp_path: Path, calls: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    sets = write_small_sets(tmp_path, 63)
    val = load_instances(sets["validation"])
    held = tmp_path / "held.jsonl"
    save_instances(val[:2], held)
    args = [
        "train",
        "--instances",
        str(sets["validation"]),
        "--out",
        str(tmp_path / "o"),
        "--grpo",
        "grpo-cpu",
    ]
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--exclude", str(held)]) == 0
    kept = calls["instances"][0]
    assert [i.id for i in kept] == [i.id for i in val[2:]]
    assert f"dropped 2 of {len(val)} instances whose boards are in an --exclude file" in caplog.text
    assert main([*args, "--exclude", str(sets["validation"])]) == 2  # nothing left to train on


def _warm_start_seeds(tmp_path: Path, argv_seed: int | None, pinned: int | None) -> tuple[Any, Any]:
    """(data seed, training seed) the warm-start stage uses for `run --seed argv_seed`."""
    from types import SimpleNamespace

    from envengineer.loop.experiment import Experiment
    from envengineer.loop.rundir import RunDir
    from envengineer.loop.stages import warm_start
    from envengineer.mapf.config import DEFAULT_SPACE

    data: dict[str, Any] = {"name": "t-ws", "warm_start": {"enabled": True, "samples": 4, "seed": pinned}}
    if argv_seed is not None:  # what `run --seed N` sets
        data["seeds"] = {"data": argv_seed, "training": argv_seed, "evaluation": argv_seed}
    seen: dict[str, Any] = {}

    def generator(config: Any, seed: Any, **kw: Any) -> list:
        seen["data"] = seed
        return []

    def warm_starter(model: Any, instances: Any, *, seed: Any, out_dir: Path, **kw: Any) -> dict[str, Any]:
        seen["train"] = seed
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 0, "seconds": 0.0, "metrics": {}}

    loop = SimpleNamespace(
        exp=Experiment.model_validate(data),
        rd=RunDir(tmp_path / f"run-{argv_seed}-{pinned}"),
        space=DEFAULT_SPACE,
        comps=SimpleNamespace(generator=generator, warm_starter=warm_starter),
        exclude=frozenset(),
        progress=False,
        warm_checkpoint=None,
    )
    warm_start.run(loop)  # type: ignore[arg-type]
    return seen["data"], seen["train"]


def test_warm_start_seed_follows_the_run_seed_unless_pinned(tmp_path: Path) -> None:
    s0, s1, s2 = (_warm_start_seeds(tmp_path, n, None) for n in (None, 1, 2))
    assert len({s0, s1, s2}) == 3  # each run seed gets its own warm-start data and training
    assert _warm_start_seeds(tmp_path, 1, None) == s1  # and the same seed the same warm-start
    assert _warm_start_seeds(tmp_path, 1, 7) == _warm_start_seeds(tmp_path, 2, 7)  # pinned: shared
