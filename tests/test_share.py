"""``--share-from``: an arm takes the stages before the engineer from another arm of the same seed.

The shared run must end exactly where computing those stages itself would have taken it (same files,
same later rounds), say in its ledger where each stage came from, and refuse a source that differs
outside the engineer or holds a damaged file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError
from envengineer.loop.components import Components
from envengineer.loop.rundir import DamagedRunError, RunDir, read_json
from envengineer.loop.runner import run_experiment
from envengineer.loop.share import BEFORE_ENGINEER
from small_sets import write_small_sets
from test_loop import greedy, make_experiment, prepare

pytest.importorskip("envengineer.evaluation")


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


class Recorder:
    """A stand-in trainer and warm-start that write a checkpoint naming its input and record each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def trainer(self, model: Any, instances: Any, *, out_dir: Path, **_: Any) -> dict[str, Any]:
        self.calls.append(("train", str(model)))
        return self._checkpoint(model, instances, out_dir)

    def warm(self, model: Any, instances: Any, *, out_dir: Path, **_: Any) -> dict[str, Any]:
        self.calls.append(("warm", str(model)))
        return self._checkpoint(model, instances, out_dir)

    @staticmethod
    def _checkpoint(model: Any, instances: Any, out_dir: Path) -> dict[str, Any]:
        ckpt = Path(out_dir) / "checkpoint"
        ckpt.mkdir(parents=True, exist_ok=True)
        boards = ",".join(sorted(i.board_hash() for i in instances))
        (ckpt / "weights.txt").write_text(f"{Path(str(model)).parent.name}:{boards}\n")
        return {"checkpoint": str(ckpt), "steps": 2, "seconds": 0.1, "metrics": {}}

    def components(self) -> Components:
        return Components(trainer=self.trainer, warm_starter=self.warm, evaluator=greedy)


def own(path: Path, *runs: Path) -> bytes:
    """A file's bytes with the runs' folders (in checkpoint paths) written as RUN: a copied record names
    the run that computed it."""
    data = path.read_bytes()
    for run in runs:
        data = data.replace(str(run).encode(), b"RUN")
    return data


def arm(sets: dict[str, Path], kind: str, warm: bool = True, **over: Any) -> Any:
    return make_experiment(
        sets,
        name=f"t-{kind}",
        policy=None,
        model="base-model",
        rounds=2,
        warm_start={"enabled": warm, "samples": 6},
        validation={"start": True},
        engineer={"kind": kind},
        **over,
    )


@pytest.mark.parametrize("warm", [True, False], ids=["warm-start", "packaged-model"])
def test_a_shared_arm_ends_where_computing_its_start_would(
    tmp_path: Path, sets: dict[str, Path], warm: bool
) -> None:
    source = prepare(tmp_path / "fixed", sets)
    run_experiment(arm(sets, "fixed", warm), source, components=Recorder().components())

    alone, shared = prepare(tmp_path / "alone", sets), prepare(tmp_path / "shared", sets)
    run_experiment(arm(sets, "random", warm), alone, components=Recorder().components())
    rec = Recorder()
    run_experiment(arm(sets, "random", warm), shared, components=rec.components(), share_from=source)

    # only round 1 was computed, from the copy of round 0's checkpoint
    assert rec.calls == [("train", str(shared / "round_00" / "train" / "checkpoint"))]
    entries = {e.key: e for e in RunDir(shared).entries()}
    for key in BEFORE_ENGINEER[0 if warm else 1 :]:
        assert entries[key].info["shared_from"] == str(source)
    assert warm or (None, "warm_start") not in entries
    assert "shared_from" not in entries[(1, "config")].info
    assert entries[(0, "train")].info["checkpoint"] == str(shared / "round_00" / "train" / "checkpoint")
    # every file of every stage is what the arm computed alone
    mine, theirs = RunDir(shared).done(), RunDir(alone).done()
    assert set(mine) == set(theirs)
    for entry in theirs.values():
        for rel in entry.paths.values():
            a, b = alone / rel, shared / rel
            if a.is_file():
                assert own(a, alone) == own(b, shared, source), rel
    weights = "round_01/train/checkpoint/weights.txt"
    assert (shared / weights).read_text() == (alone / weights).read_text()
    assert read_json(shared / "round_01" / "projection.json")["source"] == "engineer:random"
    # a resume trusts the shared lines: nothing runs again
    lines = len(RunDir(shared).entries())
    run_experiment(None, shared, resume=True, components=Recorder().components())
    assert len(RunDir(shared).entries()) == lines


def test_a_source_that_differs_outside_the_engineer_is_refused(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = prepare(tmp_path / "fixed", sets)
    run_experiment(arm(sets, "fixed"), source, components=Recorder().components())
    other_seed = arm(sets, "random", seeds={"data": 5})
    with pytest.raises(ConfigError, match=r"differs from this one in seeds\.data"):
        run_experiment(other_seed, tmp_path / "new", share_from=source)
    assert not (tmp_path / "new").exists()  # refused before the new run's folder is written
    with pytest.raises(ConfigError, match="no run there"):
        run_experiment(arm(sets, "random"), tmp_path / "new", share_from=tmp_path / "nowhere")


def test_a_damaged_source_is_not_copied(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = prepare(tmp_path / "fixed", sets)
    run_experiment(arm(sets, "fixed"), source, components=Recorder().components())
    scores = source / "round_00" / "validation" / "scores.json"
    scores.write_text(scores.read_text().replace('"valid"', '"valid" ', 1))
    target = prepare(tmp_path / "random", sets)
    with pytest.raises(DamagedRunError, match=r"scores\.json changed"):
        run_experiment(arm(sets, "random"), target, components=Recorder().components(), share_from=source)
    assert (0, "validation") not in RunDir(target).done()


def test_share_from_only_starts_a_run(
    tmp_path: Path, sets: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    from envengineer.cli import main

    assert main(["run", "--resume", str(tmp_path), "--share-from", str(tmp_path)]) != 0
    assert "--share-from starts one new run" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="starts a new run"):
        run_experiment(None, tmp_path, resume=True, share_from=tmp_path)
