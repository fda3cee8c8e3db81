"""Resume verifies what it reuses: each kind of damaged or edited state is refused or redone, never used."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import pytest

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.integrity import DamagedRunError
from envengineer.loop.plan import preflight
from envengineer.loop.rundir import RunDir, file_digest, read_json
from envengineer.loop.runner import LoopRunner, run_experiment
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 23)


def _experiment(sets: dict[str, Path], **over: Any) -> Experiment:
    data: dict[str, Any] = {
        "name": "t-integrity",
        "policy": "scripted:greedy",
        "rounds": 2,
        "samples_per_round": 6,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
        "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
        "engineer": {"kind": "random"},
        **over,
    }
    return Experiment.model_validate(data)


@pytest.fixture(scope="module")
def reference(sets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-round run (the runner builds its own validation set)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    run_experiment(_experiment(sets), run)
    return run


@pytest.fixture
def run(reference: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(reference, copy)
    return copy


def _statuses(run: Path) -> list[tuple[Any, str, str]]:
    return [(e.round, e.stage, e.status) for e in RunDir(run).entries()]


def _resume(run: Path, redo: bool = False) -> dict[str, Any]:
    return run_experiment(None, run, resume=True, redo_damaged=redo)


def test_ledger_lines_carry_content_hashes(reference: Path) -> None:
    for e in RunDir(reference).entries():
        assert e.hashes, e
        for name, digest in e.hashes.items():
            if name not in ("experiment.yaml", "validation_set.jsonl"):
                assert name in {RunDir(reference).rel(p) for p in e.paths.values()}
            assert file_digest(reference / name) == digest
    config = next(e for e in RunDir(reference).entries() if e.stage == "config")
    assert set(config.hashes) >= {
        "experiment.yaml",
        "round_00/config.applied.yaml",
        "round_00/projection.json",
    }


def test_intact_run_resumes_to_nothing(run: Path) -> None:
    before = _statuses(run)
    _resume(run)
    assert _statuses(run) == before


def test_half_truncated_validation_set(run: Path, reference: Path) -> None:
    path = run / "validation_set.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedRunError) as info:
        _resume(run)
    assert "validation_set.jsonl changed" in str(info.value) and "\n" not in str(info.value)
    _resume(run, redo=True)  # rebuilt, and every stage that used it redone
    assert path.read_bytes() == data
    assert sum(s == "redo" for *_, s in _statuses(run)) == 9  # every finished stage: 2 x 4 + benchmark
    assert read_json(run / "benchmark" / "scores.json") == read_json(reference / "benchmark" / "scores.json")


def test_edited_applied_config(run: Path) -> None:
    path = run / "round_01" / "config.applied.yaml"
    original = path.read_text()
    path.write_text(original.replace("hole_ratio: 0.", "hole_ratio: 0.4", 1))
    with pytest.raises(
        DamagedRunError, match=r"round_01/config.applied.yaml changed .* stage 'config' of round 1"
    ):
        _resume(run)
    _resume(run, redo=True)  # the random engineer is seeded: the same configuration again
    assert path.read_text() == original
    statuses = _statuses(run)
    assert [x for x in statuses if x[2] == "redo"] == [(1, "config", "redo")]
    assert statuses[-1] == (1, "config", "done")  # nothing after it had to be redone


def test_edited_experiment_is_refused_even_with_redo(run: Path) -> None:
    path = run / "experiment.yaml"
    path.write_text(path.read_text().replace("rounds: 2", "rounds: 3"))
    for redo in (False, True):
        with pytest.raises(DamagedRunError, match=r"experiment\.yaml changed since the run started"):
            _resume(run, redo)
    assert main(["run", "--resume", str(run), "--no-progress", "--no-report"]) == 2


def test_scores_replaced_by_empty_object(run: Path, reference: Path) -> None:
    path = run / "round_00" / "validation" / "scores.json"
    path.write_text("{}")
    with pytest.raises(DamagedRunError, match=r"round_00/validation/scores.json changed"):
        _resume(run)
    _resume(run, redo=True)
    assert read_json(path) == read_json(reference / "round_00" / "validation" / "scores.json")
    assert [x for x in _statuses(run) if x[2] == "redo"] == [(0, "validation", "redo")]


def test_deleted_round_dataset(run: Path, reference: Path) -> None:
    shutil.rmtree(run / "round_00" / "dataset")
    with pytest.raises(DamagedRunError, match=r"round_00/dataset/.* is missing .* stage 'data' of round 0"):
        _resume(run)
    _resume(run, redo=True)  # generation is deterministic: the same instances
    got = gzip.decompress((run / "round_00" / "dataset" / "instances.jsonl.gz").read_bytes())
    assert got == gzip.decompress((reference / "round_00" / "dataset" / "instances.jsonl.gz").read_bytes())
    assert [x for x in _statuses(run) if x[2] == "redo"] == [(0, "data", "redo")]


def test_cli_names_the_damaged_file_in_one_line(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "round_01" / "validation" / "responses.jsonl").write_text("")
    assert main(["run", "--resume", str(run), "--no-progress", "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert "round_01/validation/responses.jsonl changed" in err and "--redo-damaged" in err
    assert len(err.splitlines()) == 1
    assert main(["run", "--resume", str(run), "--redo-damaged", "--no-progress", "--no-report"]) == 0


def test_empty_validation_set_is_an_error_before_anything_runs(
    sets: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(sets, validation={"agents": [12]})
    with pytest.raises(ConfigError, match="validation set would be empty"):
        preflight(exp)
    with pytest.raises(ConfigError, match="validation set would be empty"):
        run_experiment(exp, tmp_path / "a")
    assert not (tmp_path / "a" / "ledger.jsonl").exists()
    # --dry-run runs the same preflight
    path = tmp_path / "exp.yaml"
    path.write_text(exp.to_yaml())
    assert main(["run", str(path), "--dry-run"]) == 2
    assert "validation set would be empty" in capsys.readouterr().err
    # a validation set found empty at run time (here: an empty file) stops before any stage
    run = tmp_path / "b"
    run.mkdir()
    (run / "validation_set.jsonl").write_text("")
    with pytest.raises(ConfigError, match="the validation set is empty"):
        run_experiment(_experiment(sets), run)
    assert RunDir(run).entries() == []


def test_empty_benchmark_file_is_an_error_before_anything_runs(sets: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    exp = _experiment(sets, evaluation={"benchmark_path": str(empty)})
    with pytest.raises(ConfigError, match="holds no instance"):
        preflight(exp)
    with pytest.raises(ConfigError, match="holds no instance"):
        LoopRunner.start(exp, tmp_path / "run")


def test_edited_rationale_is_found(sets: dict[str, Path], tmp_path: Path) -> None:
    import json

    from envengineer.loop.components import Components
    from test_loop import GOOD_1, GOOD_2, ScriptedChat, scripted_factory

    run = tmp_path / "run"
    chat = ScriptedChat([json.dumps(GOOD_1), json.dumps(GOOD_2)])
    exp = _experiment(sets, engineer={"kind": "self"})
    run_experiment(exp, run, components=Components(engineer_factory=scripted_factory(chat)))
    path = run / "round_01" / "engineer" / "rationale.txt"
    path.write_text("something else the engineer never wrote\n")
    with pytest.raises(DamagedRunError, match=r"round_01/engineer/rationale.txt changed"):
        run_experiment(None, run, resume=True, components=Components(engineer_factory=scripted_factory(chat)))


@pytest.mark.parametrize("name", ["x.jsonl", "x.jsonl.gz"])
def test_truncated_instance_files_are_one_line_errors(
    sets: dict[str, Path], tmp_path: Path, name: str
) -> None:
    from envengineer.errors import InstanceFormatError
    from envengineer.mapf.instance import load_instances, save_instances

    path = tmp_path / name
    save_instances(load_instances(sets["validation"]), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if name.endswith(".gz") else data[:-3] + b"\xe2\x86")
    with pytest.raises(InstanceFormatError) as info:
        load_instances(path)
    assert "\n" not in str(info.value)


def test_a_redo_killed_midway_is_finished_by_a_plain_resume(run: Path, reference: Path) -> None:
    from envengineer.loop.components import Components, _default_evaluator

    path = run / "validation_set.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    calls = []

    def dies_second_time(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while redoing round 1's validation
        return _default_evaluator(*args, **kw)

    with pytest.raises(KeyboardInterrupt):
        run_experiment(
            None, run, resume=True, redo_damaged=True, components=Components(evaluator=dies_second_time)
        )
    done = RunDir(run).done()
    assert (1, "validation") not in done and (None, "benchmark") not in done  # still marked for redo
    _resume(run)  # no flag needed: nothing damaged is left, the rest runs
    assert set(RunDir(run).done()) == set(RunDir(reference).done())
    assert read_json(run / "benchmark" / "scores.json") == read_json(reference / "benchmark" / "scores.json")
