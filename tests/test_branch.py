"""Branch rounds: a finished run's round K trained again under other configurations.

A branch given the run's own configuration must reproduce the run's round K file for file; another
configuration must train on other boards from the same checkpoint; a damaged run, an unfinished one and a
branch folder of another run are refused; a stopped branch set resumes without training again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envengineer.errors import ConfigError
from envengineer.loop.branch import BRANCHES, BranchSpec, half_of, run_branches
from envengineer.loop.rundir import DamagedRunError, RunDir, read_json
from envengineer.loop.runner import run_experiment
from small_sets import write_small_sets
from test_loop import prepare
from test_share import Recorder, arm, own

pytest.importorskip("envengineer.evaluation")


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


@pytest.fixture()
def source(tmp_path: Path, sets: dict[str, Path]) -> Path:
    """A finished two-round run with a warm-start (a stand-in trainer: each checkpoint names its boards)."""
    run = prepare(tmp_path / "run", sets)
    run_experiment(arm(sets, "random"), run, components=Recorder().components())
    return run


def other_config(source: Path, tmp_path: Path) -> Path:
    """Round 1's configuration with every size at the hardest holes and waits."""
    cfg = yaml.safe_load((source / "round_01" / "config.applied.yaml").read_text())
    for knobs in cfg["sizes"].values():
        knobs.update(hole_ratio=0.5, wait_ratio=1.0)
    path = tmp_path / "hard.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_runs_own_configuration_reproduces_its_round(tmp_path: Path, source: Path) -> None:
    rec = Recorder()
    spec = BranchSpec("own", source / "round_01" / "config.applied.yaml")
    record = run_branches(source, 1, [spec], tmp_path / "b", components=rec.components())
    branch = tmp_path / "b" / "own"

    # only round 1 trained, from the copy of the run's round 0 checkpoint
    assert rec.calls == [("train", str(branch / "round_00" / "train" / "checkpoint"))]
    # every file round 1's data, training and validation wrote is the run's own, byte for byte
    for stage in ("data", "train", "validation"):
        entry = RunDir(source).done()[(1, stage)]
        for rel in entry.paths.values():
            if (source / rel).is_file():
                assert own(source / rel, source) == own(branch / rel, branch, source), rel
    assert (branch / "round_01/train/checkpoint/weights.txt").read_text() == (
        source / "round_01/train/checkpoint/weights.txt"
    ).read_text()
    row = record["branches"][0]
    scores = read_json(source / "round_01" / "validation" / "scores.json")
    n = len(scores["verdicts"])
    assert row["all"]["n"] == n and row["all"]["valid"] == scores["summary"]["valid"]
    assert row["vs_own"]["all"]["n"] == n and row["vs_own"]["all"]["valid"]["mean"] == 0.0
    halves = [half_of(v["id"]) for v in scores["verdicts"]]
    assert row["select"]["n"] == halves.count("select") and row["report"]["n"] == halves.count("report")
    assert read_json(tmp_path / "b" / BRANCHES)["branches"][0]["name"] == "own"
    assert read_json(branch / "round_01" / "projection.json")["source"] == "branch:own"


def test_another_configuration_trains_other_boards_from_the_same_checkpoint(
    tmp_path: Path, source: Path
) -> None:
    rec = Recorder()
    specs = [
        BranchSpec("own", source / "round_01" / "config.applied.yaml"),
        BranchSpec("hard", other_config(source, tmp_path)),
    ]
    record = run_branches(source, 1, specs, tmp_path / "b", components=rec.components())
    b = tmp_path / "b"
    assert [c[1] for c in rec.calls] == [
        str(b / name / "round_00" / "train" / "checkpoint") for name in ("own", "hard")
    ]
    weights = "round_01/train/checkpoint/weights.txt"
    assert (b / "hard" / weights).read_text() != (b / "own" / weights).read_text()
    assert (b / "hard/round_00/train/checkpoint/weights.txt").read_text() == (
        source / "round_00/train/checkpoint/weights.txt"
    ).read_text()
    hard = record["branches"][1]
    assert {k["hole_ratio"] for k in hard["config"]["sizes"].values()} == {0.5}

    # a stopped branch set resumes: nothing trains again, the record is the same
    again = Recorder()
    assert run_branches(source, 1, specs, b, components=again.components()) == record
    assert again.calls == []


def test_round_zero_branches_from_the_warm_start(tmp_path: Path, source: Path) -> None:
    rec = Recorder()
    spec = BranchSpec("own", source / "round_00" / "config.applied.yaml")
    run_branches(source, 0, [spec], tmp_path / "b", components=rec.components())
    branch = tmp_path / "b" / "own"
    assert rec.calls == [("train", str(branch / "warm_start" / "checkpoint"))]  # no warm-start again
    assert own(branch / "round_00/train/checkpoint/weights.txt", branch) == own(
        source / "round_00/train/checkpoint/weights.txt", source
    )


def test_a_damaged_or_unfinished_run_is_refused(tmp_path: Path, source: Path, sets: dict[str, Path]) -> None:
    spec = BranchSpec("own", source / "round_01" / "config.applied.yaml")
    with pytest.raises(ConfigError, match="rounds 0 to 1"):
        run_branches(source, 2, [spec], tmp_path / "b", components=Recorder().components())
    scores = source / "round_00" / "validation" / "scores.json"
    scores.write_text(scores.read_text().replace('"valid"', '"valid" ', 1))
    with pytest.raises(DamagedRunError, match=r"scores\.json changed"):
        run_branches(source, 1, [spec], tmp_path / "b", components=Recorder().components())
    assert not (tmp_path / "b").exists()  # refused before any branch folder is written
    with pytest.raises(ConfigError, match="no run there"):
        run_branches(tmp_path / "nowhere", 1, [spec], tmp_path / "b")


def test_a_branch_folder_of_another_run_or_configuration_is_refused(
    tmp_path: Path, source: Path, sets: dict[str, Path]
) -> None:
    own_cfg = source / "round_01" / "config.applied.yaml"
    run_branches(source, 1, [BranchSpec("x", own_cfg)], tmp_path / "b", components=Recorder().components())
    other = prepare(tmp_path / "other", sets)
    run_experiment(arm(sets, "random", seeds={"data": 5}), other, components=Recorder().components())
    with pytest.raises(ConfigError, match="another run, round or configuration"):
        run_branches(other, 1, [BranchSpec("x", own_cfg)], tmp_path / "b", components=Recorder().components())
    hard = other_config(source, tmp_path)
    with pytest.raises(ConfigError, match="config_sha256"):
        run_branches(source, 1, [BranchSpec("x", hard)], tmp_path / "b", components=Recorder().components())


def test_bad_branch_arguments_are_one_line_errors(tmp_path: Path, source: Path) -> None:
    cfg = yaml.safe_load((source / "round_01" / "config.applied.yaml").read_text())
    with pytest.raises(ConfigError, match=r"NAME=ROUND\.yaml"):
        BranchSpec.parse("no-equals-sign")
    with pytest.raises(ConfigError, match="names the branch's folder"):
        BranchSpec.parse("../up=x.yaml")
    spec = BranchSpec("own", source / "round_01" / "config.applied.yaml")
    with pytest.raises(ConfigError, match="names repeat"):
        run_branches(source, 1, [spec, spec], tmp_path / "b")
    with pytest.raises(ConfigError, match="no such file"):
        run_branches(source, 1, [BranchSpec("gone", tmp_path / "gone.yaml")], tmp_path / "b")
    wrong = tmp_path / "agents.yaml"
    wrong.write_text(yaml.safe_dump({**cfg, "num_agents": 4}))
    with pytest.raises(ConfigError, match="num_agents 4"):
        run_branches(source, 1, [BranchSpec("w", wrong)], tmp_path / "b2", components=Recorder().components())


def test_the_runs_own_engineer_reproduces_its_round_and_another_engineer_is_asked(
    tmp_path: Path, source: Path, sets: dict[str, Path]
) -> None:
    rec = Recorder()
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump({"name": "f", "engineer": {"kind": "fixed"}}))
    specs = [
        BranchSpec("own", source / "experiment.yaml", "engineer"),
        BranchSpec("fixed", fixed, "engineer"),
    ]
    record = run_branches(source, 1, specs, tmp_path / "b", components=rec.components())
    b = tmp_path / "b"
    for rel in ("round_01/config.applied.yaml", "round_01/train/checkpoint/weights.txt"):
        assert (b / "own" / rel).read_bytes() == (source / rel).read_bytes(), rel
    # the fixed engineer trains round 0's configuration again, whatever the run's engineer chose
    assert (b / "fixed/round_01/config.applied.yaml").read_bytes() == (
        source / "round_00/config.applied.yaml"
    ).read_bytes()
    assert read_json(b / "fixed/round_01/projection.json")["source"] == "engineer:fixed"
    assert [r["kind"] for r in record["branches"]] == ["engineer", "engineer"]
    with pytest.raises(ConfigError, match="round 0 has no engineer"):
        run_branches(source, 0, specs[:1], tmp_path / "b0", components=Recorder().components())


def test_a_run_computed_by_other_code_is_refused_or_recorded(tmp_path: Path, source: Path) -> None:
    from envengineer.loop import fingerprint as fpm
    from test_fingerprint import _edit

    _edit(source, package_version="0.0.1")
    spec = BranchSpec("own", source / "round_01" / "config.applied.yaml")
    with pytest.raises(ConfigError, match=r"branch .* differs .* in package_version \(0\.0\.1 -> "):
        run_branches(source, 1, [spec], tmp_path / "b", components=Recorder().components())
    assert not (tmp_path / "b").exists()
    run_branches(
        source, 1, [spec], tmp_path / "b", components=Recorder().components(), allow_fingerprint_change=True
    )
    record = fpm.read_record(RunDir(tmp_path / "b" / "own"))
    assert fpm.governing(record, 0)["package_version"] == "0.0.1"  # the copied lines: the run's code
    assert fpm.latest(record)["package_version"] != "0.0.1"  # round 1: today's
