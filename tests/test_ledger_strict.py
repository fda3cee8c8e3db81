"""The ledger is read strictly: a torn, retyped, duplicated or foreign line is damage (issue 17, case 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from envengineer.cli import main
from envengineer.loop.experiment import Experiment
from envengineer.loop.integrity import DamagedRunError
from envengineer.loop.rundir import RunDir, read_json
from envengineer.loop.runner import run_experiment
from small_sets import small_experiment, write_small_sets

pytest.importorskip("envengineer.evaluation")


def _experiment(bench: Path, name: str = "t-ledger") -> Experiment:
    return small_experiment(bench, name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sets = write_small_sets(tmp_path_factory.mktemp("sets"), 29)
    run = tmp_path_factory.mktemp("ref") / "run"
    run_experiment(_experiment(sets["benchmark"]), run)
    other = tmp_path_factory.mktemp("other") / "run"
    run_experiment(_experiment(sets["benchmark"], "t-other"), other)
    (run.parent / "other_ledger.jsonl").write_bytes((other / "ledger.jsonl").read_bytes())
    return run


@pytest.fixture
def run(reference: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(reference, copy)
    return copy


def _lines(run: Path) -> list[str]:
    return (run / "ledger.jsonl").read_text().splitlines()


def _write(run: Path, lines: list[str]) -> None:
    (run / "ledger.jsonl").write_text("".join(line + "\n" for line in lines))


def _index(lines: list[str], r: Any, stage: str) -> int:
    return next(
        i
        for i, line in enumerate(lines)
        if json.loads(line)["round"] == r and json.loads(line)["stage"] == stage
    )


def _torn(lines: list[str]) -> list[str]:
    i = _index(lines, 1, "config")
    return [*lines[:i], '{"round": 1, "stage": "con', *lines[i + 1 :]]


def _retyped(lines: list[str]) -> list[str]:
    i = _index(lines, 1, "config")
    return [*lines[:i], lines[i].replace('"round": 1', '"round": "1"'), *lines[i + 1 :]]


def _duplicated(lines: list[str]) -> list[str]:
    i = _index(lines, 1, "data")
    return [*lines, lines[i]]


@pytest.mark.parametrize(
    "damage, why",
    [
        (_torn, "torn or not JSON"),
        (_retyped, "round '1' is not a round number"),
        (_duplicated, "repeats stage 'data' of round 1"),
        (lambda lines: [*lines[:3], "[1, 2, 3]", *lines[3:]], "a JSON list, not an object"),
        (lambda lines: [*lines, '{"round": 0, "status": "done"}'], "keys ['stage'] missing"),
        (lambda lines: [*lines, '{"round": 0, "stage": "config", "status": "done", "x": 1}'], "unknown keys"),
        (lambda lines: [*lines, '{"round": 7, "stage": "polish", "status": "done"}'], "stage 'polish'"),
    ],
)
def test_damaged_ledger_line_is_refused_in_one_line(
    run: Path, damage: Any, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(run, damage(_lines(run)))
    with pytest.raises(DamagedRunError, match="--redo-damaged") as err:
        run_experiment(None, run, resume=True)
    assert why in str(err.value) and "ledger.jsonl:" in str(err.value)
    assert main(["run", "--resume", str(run), "--no-report", "--no-progress"]) == 2
    text = capsys.readouterr().err
    assert "internal error" not in text and "Traceback" not in text and why in text


def test_line_of_another_run_is_foreign(run: Path, reference: Path) -> None:
    foreign = (reference.parent / "other_ledger.jsonl").read_text().splitlines()[0]
    _write(run, [*_lines(run), foreign])
    with pytest.raises(DamagedRunError, match=r"another experiment\.yaml"):
        run_experiment(None, run, resume=True)


@pytest.mark.parametrize("damage", [_torn, _retyped])
def test_redo_damaged_reruns_every_stage_from_the_damaged_line(
    run: Path, reference: Path, damage: Any
) -> None:
    lines = _lines(run)
    i = _index(lines, 1, "config")
    _write(run, damage(lines))
    summary = run_experiment(None, run, resume=True, redo_damaged=True)
    assert summary == read_json(reference / "benchmark" / "scores.json")["summary"]
    entries = RunDir(run).entries()  # the repaired ledger reads clean
    # round 1's config and everything after it ran again, in order, after the kept lines
    assert [(e.round, e.stage) for e in entries[i:]] == [
        (1, "config"), (1, "data"), (1, "train"), (1, "validation"), (None, "benchmark"),
    ]  # fmt: skip
    assert (run / "ledger.jsonl.damaged").read_text().splitlines() == damage(lines)


def test_duplicated_line_redo_keeps_the_run(run: Path, reference: Path) -> None:
    _write(run, _duplicated(_lines(run)))
    run_experiment(None, run, resume=True, redo_damaged=True)
    assert len(RunDir(run).entries()) == len(_lines(reference))


def test_a_foreign_first_line_is_the_odd_one_out(run: Path, reference: Path) -> None:
    foreign = (reference.parent / "other_ledger.jsonl").read_text().splitlines()[0]
    lines = _lines(run)
    _write(run, [foreign, *lines[1:]])
    with pytest.raises(DamagedRunError, match=r"ledger\.jsonl:1: recorded under another experiment\.yaml"):
        run_experiment(None, run, resume=True)
