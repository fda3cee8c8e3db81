"""The suite (each distinct run of a folder once), run naming after --set, and the dry-run for 0 rounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envengineer.cli import main
from envengineer.cli.loop import override_name
from envengineer.errors import ConfigError
from envengineer.loop.experiment import load_experiment
from envengineer.loop.suite import run_key, suite_files, suite_plan, suite_totals
from small_sets import write_small_sets

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("ablation-v6", "details-bookkeeping", "engineer-self", "main-self")


@pytest.mark.parametrize("scale", ["gpu", "cpu"])
def test_the_paper_set_has_one_run_for_the_four_names_of_the_method(scale: str) -> None:
    files = suite_files(ROOT / "experiments" / scale)
    runs = suite_plan(files)
    by_stem = {f.stem: r for r in runs for f in r.files}
    method = by_stem["main-self"]
    assert sorted(f.stem for f in method.files) == list(SHARED)
    assert method.name == f"{scale}-main-self"  # named after its main-* file
    assert sorted(method.aliases) == sorted(f"{scale}-{s}" for s in SHARED if s != "main-self")
    for other in ("main-fixed", "main-base", "ablation-v5", "details-full", "engineer-base"):
        assert len(by_stem[other].files) == 1, other  # really different runs stay apart
    totals = suite_totals(runs, len(files))
    repeats = 3
    if scale == "cpu":  # the demo is the small-policy LLM-engineer arm's seed 0: one run for both files
        assert sorted(f.stem for f in by_stem["demo"].files) == ["demo", "policy-main-llm"]
        repeats += 1
    assert totals["runs"] == len(files) - repeats and totals["repeats_saved"] == repeats
    assert totals["grpo_steps_without_dedup"] - totals["grpo_steps"] == 3 * method.plan["grpo_steps"]


def test_run_key_compares_what_a_run_does() -> None:
    a = load_experiment(ROOT / "experiments/gpu/main-self.yaml")
    b = load_experiment(ROOT / "experiments/gpu/details-bookkeeping.yaml")  # {variant: V6, T: bookkeeping}
    assert a.engineer.context != b.engineer.context and run_key(a) == run_key(b)
    c = load_experiment(ROOT / "experiments/gpu/main-self.yaml", {"seeds.data": 1})
    assert run_key(c) != run_key(a)
    fixed = load_experiment(ROOT / "experiments/gpu/main-fixed.yaml")
    assert run_key(fixed) == run_key(
        load_experiment(ROOT / "experiments/gpu/main-fixed.yaml", {"engineer.context": "V2"})
    )


def test_suite_dry_run_prints_plan_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suite", str(ROOT / "experiments/gpu"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "19 experiment files, 16 distinct runs, 3 repeats skipped" in out
    assert "| gpu-main-self | ablation-v6, details-bookkeeping, engineer-self, main-self |" in out
    assert "total: 42,000 GRPO steps (each file on its own: 51,000)" in out
    assert "none (0 round(s): no proposal)" in out  # main-base
    assert "without an estimate" in out
    assert main(["suite", str(ROOT / "experiments/gpu"), "--dry-run", "--only", "engineer-self"]) == 0
    assert "1 distinct runs" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="names no file"):
        suite_plan(suite_files(ROOT / "experiments/gpu"), only=["nope"])
    with pytest.raises(ConfigError, match="not a folder"):
        suite_files(ROOT / "nowhere")


def test_suite_runs_each_distinct_run_once_and_links_the_other_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = write_small_sets(tmp_path, 41)
    folder = tmp_path / "exps"
    folder.mkdir()
    base = {
        "policy": "scripted:greedy",
        "rounds": 2,
        "samples_per_round": 4,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
        "evaluation": {"benchmark_path": str(sets["benchmark"])},
        "engineer": {"kind": "fixed"},
    }
    (folder / "_base.yaml").write_text(yaml.safe_dump({"name": "base", **base}))
    for stem, extra in (("a-main", {}), ("a-alias", {"description": "same run"}), ("b", {"rounds": 1})):
        (folder / f"{stem}.yaml").write_text(
            yaml.safe_dump({"base": "_base.yaml", "name": f"t-{stem}", **extra})
        )
    out = tmp_path / "runs"
    assert main(["suite", str(folder), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "3 experiment files, 2 distinct runs, 1 repeats skipped" in text
    record = json.loads((out / "suite.json").read_text())
    assert [r["run"] for r in record] == ["t-a-alias", "t-b"]
    assert record[0]["aliases"] == ["t-a-main"]
    assert (out / "t-a-main").is_symlink() and (out / "t-a-main" / "benchmark" / "scores.json").exists()
    assert (out / "t-b" / "benchmark" / "scores.json").exists()
    # a second call resumes the finished runs instead of repeating them
    assert main(["suite", str(folder), "--out", str(out), "--no-progress"]) == 0
    assert "resuming" in capsys.readouterr().out


def test_set_overrides_rename_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        override_name("cpu-main-self", {"engineer.kind": "fixed", "rounds": 1})
        == "cpu-main-self-kind-fixed-rounds-1"
    )
    assert override_name("x", {"seeds.data": 1, "seeds.training": 2}) == "x-data-1-training-2"
    assert override_name("x", {"model": "/models/Qwen 3/4B"}) == "x-model-_models_Qwen_3_4B"
    assert len(override_name("n" * 118, {"engineer.kind": "random"})) <= 120
    # a long --set list is cut, but never the seed suffix, and never into another run's name
    many = {f"validation.k{i}": "v" * 12 for i in range(7)}
    s0, s1 = (
        override_name("cpu-policy-main-fixed", {**many, "seeds.data": s, "seeds.training": s}) for s in (0, 1)
    )
    assert s0.endswith("-s0") and s1.endswith("-s1") and len(s0) <= 120 and s0[:-3] == s1[:-3]
    other = override_name("cpu-policy-main-fixed", {**many, "validation.k6": "w" * 12, "seeds.data": 0})
    assert other.endswith("-s0") and other != s0
    path = str(ROOT / "experiments/cpu/main-self.yaml")
    assert main(["run", path, "--set", "engineer.kind=fixed", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment cpu-main-self-kind-fixed -> runs/cpu-main-self-kind-fixed" in out
    assert main(["run", path, "--set", "engineer.kind=fixed", "--set", "name=mine", "--dry-run"]) == 0
    assert "experiment mine -> runs/mine" in capsys.readouterr().out


def test_dry_run_of_an_evaluation_only_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(ROOT / "experiments/gpu/main-base.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "engineer:    none (0 round(s): no proposal is asked for)" in out
    assert "no validation (no round), 3150 benchmark instances" in out
    assert "training:    none" in out and "context" not in out


def test_show_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader (e.g. `head`) is gone before anything is written
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "envengineer.cli", "show", "benchmark", "--prompt"],
        stdout=write,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    os.close(write)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr


def _suite_folder(tmp_path: Path, files: dict[str, dict]) -> Path:
    sets = write_small_sets(tmp_path, 43)
    folder = tmp_path / "exps"
    folder.mkdir(exist_ok=True)
    base = {
        "policy": "scripted:greedy",
        "rounds": 1,
        "samples_per_round": 4,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
        "evaluation": {"benchmark_path": str(sets["benchmark"])},
        "engineer": {"kind": "fixed"},
    }
    for stem, extra in files.items():
        (folder / f"{stem}.yaml").write_text(yaml.safe_dump({**base, **extra}))
    return folder


def test_two_experiments_under_one_name_are_refused_naming_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _suite_folder(tmp_path, {"a": {"name": "same"}, "b": {"name": "same", "rounds": 2}})
    with pytest.raises(ConfigError, match=r"a\.yaml and .*b\.yaml both name their experiment 'same'") as err:
        suite_plan(suite_files(folder))
    assert "rounds" in str(err.value)
    assert main(["suite", str(folder), "--out", str(tmp_path / "runs"), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "both name their experiment" in captured.err and not (tmp_path / "runs" / "same").exists()
    # the same experiment under one name in two files is one run
    (folder / "b.yaml").write_text((folder / "a.yaml").read_text())
    assert [r.files for r in suite_plan(suite_files(folder))] == [[folder / "a.yaml", folder / "b.yaml"]]


def test_an_edited_file_is_not_resumed_from_its_old_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _suite_folder(tmp_path, {"a": {"name": "t-edit"}})
    out = tmp_path / "runs"
    assert main(["suite", str(folder), "--out", str(out), "--no-progress"]) == 0
    record = json.loads((out / "suite.json").read_text())
    assert len(record[0]["key"]) == 16
    data = yaml.safe_load((folder / "a.yaml").read_text())
    (folder / "a.yaml").write_text(yaml.safe_dump({**data, "rounds": 2}))
    capsys.readouterr()
    assert main(["suite", str(folder), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "was run from another experiment than" in err and "(rounds differ)" in err and "--redo" in err
    assert yaml.safe_load((out / "t-edit" / "experiment.yaml").read_text())["rounds"] == 1
    # --redo moves the old run aside and runs the file as it is now
    assert main(["suite", str(folder), "--out", str(out), "--no-progress", "--redo"]) == 0
    assert yaml.safe_load((out / "t-edit" / "experiment.yaml").read_text())["rounds"] == 2
    assert [p.name.split("-")[0] for p in out.glob("t-edit.replaced-*")] == ["t"]
    assert json.loads((out / "suite.json").read_text())[0]["key"] != record[0]["key"]
