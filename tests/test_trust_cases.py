"""A resume or a comparison never mixes runs: the last silent cases (issue 28).

Each test builds the damaged or mismatched state itself, then checks the one-line refusal, its exit code,
and that nothing was reused or rerun behind the user's back.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from envengineer.cli import main
from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import RunDir, read_json
from envengineer.loop.runner import run_experiment
from small_sets import rehash_ledger, small_experiment, write_small_sets

pytest.importorskip("envengineer.evaluation")

ROOT = Path(__file__).resolve().parents[1]
PLUMBING = ROOT / "experiments" / "cpu" / "plumbing.yaml"


def _experiment(bench: Path, policy: str, **over: Any) -> Experiment:
    return small_experiment(bench, over.pop("name", "t-trust"), policy, **over)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Finished runs of one experiment with the optimal and the greedy scripted policy, and a one-round
    run of another experiment."""
    d = tmp_path_factory.mktemp("trust")
    bench = write_small_sets(d, 31)["benchmark"]
    out = {"optimal": d / "optimal", "greedy": d / "greedy", "other": d / "other"}
    run_experiment(_experiment(bench, "scripted:optimal"), out["optimal"])
    run_experiment(_experiment(bench, "scripted:greedy"), out["greedy"])
    run_experiment(_experiment(bench, "scripted:greedy", name="t-other", rounds=1), out["other"])
    scores = {k: read_json(out[k] / "benchmark" / "scores.json")["summary"]["valid"] for k in out}
    assert scores["optimal"] == 100.0 and scores["greedy"] < 100.0  # the two policies can be told apart
    return out


def _copy(src: Path, tmp_path: Path, name: str = "run") -> Path:
    shutil.copytree(src, tmp_path / name)
    return tmp_path / name


def _resume(run: Path, *extra: str) -> int:
    return main(["run", "--resume", str(run), "--no-progress", "--no-report", *extra])


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "internal error" not in err
    return err


# -- case 1: a run directory without its ledger ------------------------------------------------------------
@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_no_ledger_beside_outputs_is_refused_not_reused(
    runs: dict[str, Path], tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["optimal"], tmp_path)
    ledger = run / "ledger.jsonl"
    ledger.unlink() if damage == "deleted" else ledger.write_text("")
    exp = run / "experiment.yaml"
    exp.write_text(exp.read_text().replace("policy: scripted:optimal", "policy: scripted:greedy"))
    optimal_scores = (run / "benchmark" / "scores.json").read_bytes()

    assert _resume(run) == 2
    err = _one_line_error(capsys)
    assert "no ledger (ledger.jsonl is missing or empty)" in err
    assert "--redo-damaged" in err and "new run in another directory" in err
    # nothing reused, nothing rerun: the ledger and the optimal policy's files are as they were
    assert RunDir(run).entries() == []
    assert (run / "benchmark" / "scores.json").read_bytes() == optimal_scores

    # --redo-damaged sets the unvouched outputs aside and answers afresh: the greedy policy's scores
    assert _resume(run, "--redo-damaged") == 0
    for rel in ("benchmark/scores.json", "round_01/validation/responses.jsonl"):
        assert (run / rel).read_bytes() == (runs["greedy"] / rel).read_bytes(), rel
    assert (run / "set_aside" / "1" / "benchmark" / "scores.json").read_bytes() == optimal_scores
    assert {(e.round, e.stage) for e in RunDir(run).entries()} == set(RunDir(runs["greedy"]).done())


def test_no_ledger_without_an_edit_is_refused_not_silently_rerun(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["greedy"], tmp_path)
    (run / "ledger.jsonl").unlink()
    assert _resume(run) == 2
    assert "nothing vouches for them" in _one_line_error(capsys)
    assert not (run / "ledger.jsonl").exists()


def test_ledger_lines_cut_from_its_end_are_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["greedy"], tmp_path)
    lines = (run / "ledger.jsonl").read_text().splitlines(keepends=True)
    (run / "ledger.jsonl").write_text("".join(lines[:3]))  # round 0: config, data, train
    assert _resume(run) == 2
    err = _one_line_error(capsys)
    # round 0's validation may be a stage a kill interrupted; round 1's outputs and the benchmark may not
    assert "holds outputs of 5 stages (round_01/config.applied.yaml" in err
    assert "a ledger that does not record them as finished" in err
    assert len((run / "ledger.jsonl").read_text().splitlines()) == 3


def test_a_run_killed_in_its_first_stage_still_resumes(runs: dict[str, Path], tmp_path: Path) -> None:
    run = _copy(runs["greedy"], tmp_path)
    (run / "ledger.jsonl").unlink()
    for rel in ("round_00/dataset", "round_00/train", "round_00/validation", "round_01", "benchmark"):
        shutil.rmtree(run / rel)  # what is left: the first stage's files, as a kill before its line leaves
    assert _resume(run) == 0
    assert read_json(run / "benchmark" / "scores.json") == read_json(
        runs["greedy"] / "benchmark" / "scores.json"
    )


def test_a_new_run_refuses_a_directory_with_outputs_of_another(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(runs["optimal"], tmp_path)
    exp_file = tmp_path / "greedy.yaml"
    exp_file.write_text((run / "experiment.yaml").read_text().replace("scripted:optimal", "scripted:greedy"))
    (run / "ledger.jsonl").unlink()
    (run / "experiment.yaml").unlink()
    assert main(["run", str(exp_file), "--out", str(run), "--no-progress", "--no-report"]) == 2
    assert "holds outputs of an earlier run" in _one_line_error(capsys)
    assert not (run / "ledger.jsonl").exists()


def test_a_redone_stage_does_not_resume_answers_it_did_not_give(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(runs["greedy"], tmp_path)
    rel = "round_00/validation/responses.jsonl"
    shutil.copy(runs["optimal"] / rel, run / rel)  # the optimal policy's answers in the greedy run
    assert _resume(run) == 2
    assert _resume(run, "--redo-damaged") == 0
    assert (run / rel).read_bytes() == (runs["greedy"] / rel).read_bytes()
    assert read_json(run / "round_00/validation/scores.json") == read_json(
        runs["greedy"] / "round_00/validation/scores.json"
    )


def test_a_stage_redone_for_its_edited_scores_rescores_its_vouched_answers(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run = _copy(runs["greedy"], tmp_path)
    scores = run / "benchmark" / "scores.json"
    scores.write_text(scores.read_text().replace('"valid": ', '"valid": 1', 1))
    assert _resume(run, "--redo-damaged") == 0
    assert scores.read_bytes() == (runs["greedy"] / "benchmark" / "scores.json").read_bytes()
    assert read_json(run / "benchmark" / "eval_info.json")["asked_this_run"] == 0  # answers kept, rescored
    assert (run / "set_aside" / "1" / "benchmark" / "scores.json").exists()  # the edited file, kept aside


# -- case 2: an arm of compare holds one experiment ----------------------------------------------------------
def _seed_copy(src: Path, tmp_path: Path, seed: int) -> Path:
    """A copy of a run as `run --seed SEED` would name and seed it (its ledger agreeing)."""
    run = _copy(src, tmp_path, f"seed{seed}")
    exp = yaml.safe_load((run / "experiment.yaml").read_text())
    exp.update(name=f"{exp['name']}-s{seed}", seeds={**exp["seeds"], "data": seed, "training": seed})
    (run / "experiment.yaml").write_text(yaml.safe_dump(exp))
    rehash_ledger(run)
    return run


def test_an_arm_of_different_experiments_is_refused_naming_the_fields(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    arm = f"a={runs['greedy']},{runs['other']}"
    assert main(["compare", "--arm", arm, "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert "are different experiments (rounds differ)" in err and "--mixed-arms" in err
    assert not (out / "compare.md").exists()


def test_mixed_arms_pool_only_when_asked_and_say_so(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    arm = f"a={runs['greedy']},{runs['other']}"
    assert main(["compare", "--arm", arm, "--mixed-arms", "--out", str(out)]) == 0
    record = json.loads((out / "compare.json").read_text())
    assert any("different experiments (rounds differ)" in w for w in record["warnings"])
    text = (out / "compare.md").read_text()
    assert "## Arms (some mix different experiments" in text
    assert "runs that differ only in their seeds" not in text
    # seeds of one experiment make one arm without the flag
    seeded = _seed_copy(runs["greedy"], tmp_path, 2)
    assert main(["compare", "--arm", f"a={runs['greedy']},{seeded}", "--out", str(out)]) == 0
    assert "## Arms (runs that differ only in their seeds)" in (out / "compare.md").read_text()


def test_runs_from_another_round0_configuration_are_not_seeds_of_one_arm(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _seed_copy(runs["greedy"], tmp_path, 3)
    exp = yaml.safe_load((other / "experiment.yaml").read_text())
    exp["seeds"]["config"] = exp["seeds"].get("config", 0) + 1  # --seed never sets it: another experiment
    (other / "experiment.yaml").write_text(yaml.safe_dump(exp))
    rehash_ledger(other)
    assert main(["compare", "--arm", f"a={runs['greedy']},{other}", "--out", str(tmp_path / "out")]) == 2
    assert "are different experiments (seeds.config differ)" in _one_line_error(capsys)


# -- case 3 and the seed bound: --seed, --set seeds.* ---------------------------------------------------
def test_seed_and_set_of_the_same_seed_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(PLUMBING), "--set", "seeds.data=5", "--seed", "3", "--dry-run"]) == 2
    err = _one_line_error(capsys)
    assert "--seed sets seeds.data (to 3), and so does --set seeds.data=5" in err
    assert main(["run", str(PLUMBING), "--set", "seeds={data: 5}", "--seed", "3", "--dry-run"]) == 2
    assert "seeds.data" in _one_line_error(capsys)
    assert main(["run", str(PLUMBING), "--set", "seeds.training=5", "--seeds", "0-1", "--dry-run"]) == 2
    assert "--seeds sets seeds.training" in _one_line_error(capsys)
    # the round-0 configuration's seed is not one --seed sets
    assert main(["run", str(PLUMBING), "--set", "seeds.config=5", "--seed", "3", "--dry-run"]) == 0


@pytest.mark.parametrize(
    "value, expected",
    [
        (str(2**32), "seeds.data: Input should be less than 4294967296"),
        ("-1", "seeds.data: Input should be greater than or equal to 0"),
        ("9" * 5000, "a number has more than 4300 digits; write a smaller one"),
    ],
)
def test_seeds_under_set_keep_their_bound(
    value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(PLUMBING), "--set", f"seeds.data={value}", "--dry-run"]) == 2
    err = _one_line_error(capsys)
    assert expected in err and "sys.set_int_max_str_digits" not in err


def test_a_too_long_number_in_a_file_is_our_error_and_aliases_stay_as_they_were(tmp_path: Path) -> None:
    from envengineer.yamlio import YAMLDataError, load_yaml

    with pytest.raises(YAMLDataError, match=r"^a number has more than 4300 digits; write a smaller one$"):
        load_yaml("seeds: {data: " + "9" * 5000 + "}")
    with pytest.raises(YAMLDataError, match=r"^line 2, column 4: aliases \(\*name\) are not accepted"):
        load_yaml("a: &x [1]\nb: *x")


def test_the_largest_seed_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(PLUMBING), "--set", f"seeds.data={2**32 - 1}", "--dry-run"]) == 0


# -- case 4: export never writes a dataset folder under a .parquet name -------------------------------------
def test_export_refuses_an_existing_folder_named_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "adir.parquet"
    folder.mkdir()
    instances = tmp_path / "set.jsonl"
    write_small_sets(tmp_path, 3)["validation"].rename(instances)
    assert main(["export", str(instances), "-o", str(folder)]) == 2
    assert "adir.parquet is a folder, but a name ending in .parquet" in _one_line_error(capsys)
    assert list(folder.iterdir()) == []
    assert main(["export", str(instances), "-o", str(folder), "--overwrite"]) == 2
    assert list(folder.iterdir()) == []


# -- a command whose extra is missing names it -------------------------------------------------------------
def test_compare_without_matplotlib_names_the_extra(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails as when not installed
    assert main(["compare", str(runs["greedy"]), "--out", str(tmp_path / "out")]) == 2
    err = _one_line_error(capsys)
    assert "need matplotlib; install it with pip install 'envengineer[train]'" in err
    assert main(["report", str(runs["greedy"]), "--out", str(tmp_path / "report")]) == 2
    assert "envengineer[train]" in _one_line_error(capsys)
