"""compare and report count each run once, warn on shared seeds, leave damaged scores out, and give
bootstrap intervals over seeds (issue 17, cases 3, 4 and 8; issue 16's intervals)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.loop.compare import compare_runs
from envengineer.loop.experiment import Experiment
from envengineer.loop.runner import run_experiment
from small_sets import rehash_ledger, write_small_sets

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cmp")
    sets = write_small_sets(d, 37)
    exp = Experiment.model_validate(
        {
            "name": "t-cmp",
            "policy": "scripted:greedy",
            "rounds": 1,
            "samples_per_round": 4,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
            "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
            "engineer": {"kind": "fixed"},
        }
    )
    run_experiment(exp, d / "a")
    # Ledger times have one-second resolution and this run takes less: start b in the next second, as two
    # real runs would, or their ledgers are byte for byte equal and compare rightly calls b a copy of a.
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    run_experiment(exp, d / "b")  # the same experiment, seeds and all: what two `run --seed 1` give
    return {"a": d / "a", "b": d / "b"}


@pytest.fixture
def a(base: dict[str, Path], tmp_path: Path) -> Path:
    shutil.copytree(base["a"], tmp_path / "a")
    return tmp_path / "a"


def _record(out: Path) -> dict[str, Any]:
    return json.loads((out / "compare.json").read_text())


def _arm_run(src: Path, root: Path, name: str, seed: int, value: float) -> Path:
    """A copy of a run with other seeds whose benchmark Sums are all ``value`` (valid; optimal half)."""
    run = root / f"{name}-s{seed}"
    shutil.copytree(src, run)
    exp = yaml.safe_load((run / "experiment.yaml").read_text())
    exp.update(name=f"{name}-s{seed}", seeds={**exp["seeds"], "data": seed, "training": seed})
    exp["engineer"]["max_new_tokens"] = 100 + sum(map(ord, name))  # another arm: another experiment
    (run / "experiment.yaml").write_text(yaml.safe_dump(exp))
    path = run / "benchmark" / "scores.json"
    scores = json.loads(path.read_text())
    for t in scores["table"].values():
        for cell in t["sizes"].values():
            cell["valid"], cell["optimal"] = value, value / 2
        t["sum"] = {"valid": value, "optimal": value / 2}
    path.write_text(json.dumps(scores))
    rehash_ledger(run)
    return run


def test_a_run_given_twice_or_through_a_link_or_a_copy_counts_once(a: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(a, target_is_directory=True)
    shutil.copytree(a, tmp_path / "copy")
    out = tmp_path / "out"
    compare_runs([a, a, tmp_path / "link", tmp_path / "copy"], out=out)
    record = _record(out)
    assert [len(v) for v in record["arms"].values()] == [1] and len(record["runs"]) == 1
    assert [w.split(" is ")[1].split(" ")[0:3] for w in record["warnings"]] == [
        ["the", "same", "directory"], ["the", "same", "directory"], ["a", "copy", "of"],
    ]  # fmt: skip
    text = (out / "compare.md").read_text()
    assert "counted once" in text and "± 0.00" not in text


def _retimed_copy(src: Path, dst: Path) -> Path:
    """A copy of a run whose ledger says it ran a second later: the same run, other ledger bytes."""
    shutil.copytree(src, dst)
    lines = [json.loads(line) for line in (dst / "ledger.jsonl").read_text().splitlines()]
    for d in lines:
        d["time"] = d["time"] + 1 if isinstance(d["time"], (int, float)) else d["time"] + " (copy)"
    (dst / "ledger.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    return dst


def _arms_n(out: Path) -> dict[str, int]:
    return {name: len(dirs) for name, dirs in _record(out)["arms"].items()}


@pytest.mark.parametrize("again", ["rerun", "copy"])
def test_a_run_and_its_copy_are_one_seed_of_the_arm(
    base: dict[str, Path], tmp_path: Path, again: str
) -> None:
    """A run of the same experiment and seeds with the same scores (``run --seed 1`` twice, or a copy
    whose ledger differs) is that run again: counted once, the note naming both directories."""
    a = base["a"]
    other = base["b"] if again == "rerun" else _retimed_copy(a, tmp_path / "copy")
    assert (a / "ledger.jsonl").read_bytes() != (other / "ledger.jsonl").read_bytes()
    out = tmp_path / "out"
    assert main(["compare", str(a), str(other), "--out", str(out)]) == 0
    record = _record(out)
    assert _arms_n(out) == {"t-cmp": 1} and [r["name"] for r in record["runs"]] == ["t-cmp"]
    (note,) = record["warnings"]
    copy = f"{other} is a copy of {a} (the same experiment, seeds and scores): counted once"
    assert note == f"arm 't-cmp': {copy}"
    text = (out / "compare.md").read_text()
    assert note in text and "± 0.00" not in text and "not independent seeds" not in text


def test_runs_of_an_arm_with_the_same_seeds_and_other_scores_are_warned_about(
    base: dict[str, Path], tmp_path: Path
) -> None:
    b = tmp_path / "b"
    shutil.copytree(base["b"], b)
    path = b / "benchmark" / "scores.json"
    scores = json.loads(path.read_text())
    scores["table"]["3"]["sum"]["valid"] += 1.0  # the same seeds, another outcome (not reproducible)
    path.write_text(json.dumps(scores))
    rehash_ledger(b)
    out = tmp_path / "out"
    assert main(["compare", str(base["a"]), str(b), "--out", str(out)]) == 0
    assert _arms_n(out) == {"t-cmp": 2}
    (warning,) = _record(out)["warnings"]
    assert "have the same seeds" in warning and "not independent seeds" in warning
    assert "have the same seeds" in (out / "compare.md").read_text()


def test_two_seeds_with_the_same_scores_are_two_seeds(a: Path, tmp_path: Path) -> None:
    other = tmp_path / "a-s7"
    shutil.copytree(a, other)
    exp = yaml.safe_load((other / "experiment.yaml").read_text())
    exp["seeds"] = {**exp["seeds"], "data": 7, "training": 7, "evaluation": 7}
    (other / "experiment.yaml").write_text(yaml.safe_dump(exp))
    rehash_ledger(other)
    out = tmp_path / "out"
    compare_runs([a, other], out=out)
    assert _arms_n(out) == {"t-cmp": 2} and _record(out)["warnings"] == []


def test_hand_edited_scores_are_reported_not_averaged(a: Path, tmp_path: Path) -> None:
    path = a / "benchmark" / "scores.json"
    scores = json.loads(path.read_text())
    scores["table"]["3"]["sizes"]["3"]["valid"] = 99.99
    path.write_text(json.dumps(scores))
    out = tmp_path / "out"
    compare_runs([a], out=out)
    record = _record(out)
    assert record["runs"][0]["sums"] == {} and record["runs"][0]["mean"] is None
    assert "benchmark/scores.json changed since stage 'benchmark' finished" in record["damaged"][0]
    assert "99.99" not in (out / "compare.md").read_text()
    assert main(["report", str(a)]) == 0
    report = (a / "report.md").read_text()
    assert "Damaged scores, left out" in report and "99.99" not in report


@pytest.mark.parametrize("content", ['{"table": [1, 2]}', "[1, 2]", "not json", '{"summary": {"n": 1}}'])
def test_malformed_scores_are_a_damage_note_even_with_a_matching_hash(
    a: Path, tmp_path: Path, content: str
) -> None:
    (a / "benchmark" / "scores.json").write_text(content)
    rehash_ledger(a)  # the ledger agrees: the shape is what is wrong
    out = tmp_path / "out"
    assert main(["compare", str(a), "--out", str(out)]) == 0
    assert "benchmark/scores.json" in _record(out)["damaged"][0]
    assert main(["report", str(a)]) == 0


@pytest.mark.parametrize("content", ["[1, 2]", "just text"])
def test_experiment_that_is_not_a_mapping_is_a_one_line_error(
    a: Path, tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (a / "experiment.yaml").write_text(content)
    assert main(["compare", str(a), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not an experiment" in err and "internal error" not in err


def test_bootstrap_intervals_per_arm_and_the_difference_to_a_reference(a: Path, tmp_path: Path) -> None:
    same = [_arm_run(a, tmp_path, "flat", s, 30.0) for s in range(3)]
    spread = [_arm_run(a, tmp_path, "wide", s, v) for s, v in enumerate((10.0, 20.0))]
    out = tmp_path / "out"
    compare_runs([*same, *spread], out=out, against="flat")
    iv = _record(out)["intervals"]
    assert iv["resamples"] == 10_000 and iv["level"] == 95.0 and iv["against"] == "flat"
    # identical seeds: an interval of width 0
    assert iv["arms"]["flat"]["benchmark"]["mean"]["valid"] == {
        "n": 3,
        "mean": 30.0,
        "low": 30.0,
        "high": 30.0,
    }
    assert iv["arms"]["flat"]["benchmark"]["mean"]["optimal"]["mean"] == 15.0
    # two seeds 10 and 20: resampled means are 10, 15 or 20
    assert iv["arms"]["wide"]["benchmark"]["3 agents"]["valid"] == {
        "n": 2,
        "mean": 15.0,
        "low": 10.0,
        "high": 20.0,
    }
    # wide - flat: -15 [-20, -10] (the reference has no spread)
    diff = iv["differences"]["wide"]["benchmark"]["mean"]["valid"]
    assert diff == {"n": 2, "mean": -15.0, "low": -20.0, "high": -10.0, "n_reference": 3}
    text = (out / "compare.md").read_text()
    assert "| `flat` | benchmark | mean | 3 | 30.00 [30.00, 30.00] | 15.00 [15.00, 15.00] |" in text
    assert (
        "### Difference to `flat`" in text
        and "| `wide` | benchmark | mean | 2 | -15.00 [-20.00, -10.00] |" in text
    )
    with pytest.raises(ConfigError, match="--against 'nope' is not an arm"):
        compare_runs(same, out=out, against="nope")


def test_arms_benchmarked_on_other_instances_get_no_benchmark_difference(a: Path, tmp_path: Path) -> None:
    flat = [_arm_run(a, tmp_path, "flat", s, 30.0) for s in range(2)]
    other = [_arm_run(a, tmp_path, "other", s, 20.0) for s in range(2)]
    for run in flat:  # the reference: scored on other boards (its scores name another set)
        path = run / "benchmark" / "scores.json"
        scores = json.loads(path.read_text())
        scores["scored_set"] = {"sha256": "0" * 64, "n": 3, "benchmark_version": "v1"}
        path.write_text(json.dumps(scores))
        rehash_ledger(run)
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"arm 'other' was benchmarked on .* the reference 'flat' on v1"):
        compare_runs([*flat, *other], out=out, against="flat")
    compare_runs([*flat, *other], out=out, against="flat", mixed=True)
    record = _record(out)
    # the benchmark scores of the two arms are other instances: no difference, and a note that says why
    assert "benchmark" not in record["intervals"]["differences"]["other"]
    assert "validation" in record["intervals"]["differences"]["other"]
    assert record["intervals"]["arms"]["other"]["benchmark"]["mean"]["valid"]["mean"] == 20.0
    (note,) = [w for w in record["warnings"] if "benchmarked on" in w]
    assert "'flat' on v1" in note and "left out" in note
    assert "| `other` | benchmark |" not in (out / "compare.md").read_text().split("### Difference")[1]
    # the same instances again: the difference is back
    compare_runs(
        [*other, *[_arm_run(a, tmp_path, "flat2", s, 30.0) for s in range(2)]], out=out, against="flat2"
    )
    assert _record(out)["intervals"]["differences"]["other"]["benchmark"]["mean"]["valid"]["mean"] == -10.0


def test_learning_curves_per_arm_are_means_over_seeds_with_intervals(a: Path, tmp_path: Path) -> None:
    from types import SimpleNamespace as NS

    from envengineer.loop.compare_figures import arm_curves, curves_figure, curves_markdown

    def run(start: float, *rounds: float) -> Any:
        def scores(v: float) -> dict[str, Any]:
            return {"summary": {"valid": v, "optimal": v / 2}}

        return NS(
            start_validation=scores(start),
            rounds=[NS(index=i, validation=scores(v)) for i, v in enumerate(rounds)],
        )

    curves = arm_curves({"x": [run(20.0, 30.0, 40.0), run(20.0, 10.0)], "y": [run(50.0)]})
    x = {c["point"]: c for c in curves["x"]}
    assert list(x) == ["start", "round 0", "round 1"]
    assert x["start"]["valid"] == {"n": 2, "mean": 20.0, "low": 20.0, "high": 20.0}
    # two seeds 30 and 10: resampled means are 10, 20 or 30
    assert x["round 0"]["valid"] == {"n": 2, "mean": 20.0, "low": 10.0, "high": 30.0}
    assert x["round 0"]["optimal"]["mean"] == 10.0
    assert x["round 1"]["valid"]["n"] == 1 and x["round 1"]["valid"]["low"] is None  # one run: no interval
    assert [c["point"] for c in curves["y"]] == ["start"]
    text = curves_markdown(curves)
    assert "| `x` | 2 | 20.00 (10.00) [20.00, 20.00] | 20.00 (10.00) [10.00, 30.00] | 40.00 (20.00) |" in text
    assert "| `y` | 1 | 50.00 (25.00) |  |  |" in text
    assert curves_figure(curves, tmp_path / "curves.png").stat().st_size > 0
    # compare writes them for arms of seeds
    same = [_arm_run(a, tmp_path, "flat", s, 30.0) for s in range(2)]
    out = tmp_path / "out"
    compare_runs(same, out=out)
    assert _record(out)["curves"]["flat"][-1]["valid"]["n"] == 2
    assert (
        "## Learning curves over seeds" in (out / "compare.md").read_text() and (out / "curves.png").exists()
    )
