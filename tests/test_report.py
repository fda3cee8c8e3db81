"""Reports and comparisons render from a run directory alone (a finished run and one that stopped)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import RunDir
from envengineer.loop.runner import run_experiment
from small_sets import rehash_ledger, write_small_sets

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def _evaluator(
    model: Any, instances: Any, *, out_dir: Path, experiment: Any, seed: int, progress: bool
) -> Any:
    """Greedy answers scored by the testbed (no model, no prompt rendering)."""
    import numpy as np

    from envengineer.mapf.policies import respond
    from envengineer.mapf.scoring import score

    rng = np.random.default_rng(seed)
    return score(instances, {i.id: respond("greedy", i, rng) for i in instances})


def _trainer(
    model: Any, instances: Any, *, out_dir: Path, preset: str, epochs: float, seed: int, max_steps: Any
) -> dict[str, Any]:
    rewards = [0.1, 0.2, 0.25]
    return {
        "checkpoint": str(out_dir / "checkpoint"),
        "steps": 3,
        "seconds": 1.5,
        "metrics": {"log_history": [{"step": i + 1, "reward": r} for i, r in enumerate(rewards)]},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("report")
    sets = write_small_sets(d, 31, bench_agents=(3, 4))
    out = {}
    for kind in ("random", "fixed"):
        exp = Experiment.model_validate(
            {
                "name": f"t-report-{kind}",
                "model": "m",
                "rounds": 3,
                "samples_per_round": 6,
                "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
                "evaluation": {"benchmark_path": str(sets["benchmark"])},
                "engineer": {"kind": kind},
            }
        )
        run = d / kind
        run.mkdir()
        shutil.copyfile(sets["validation"], run / "validation_set.jsonl")
        run_experiment(exp, run, components=Components(trainer=_trainer, evaluator=_evaluator))
        out[kind] = run
    return out


FIGURES = ("benchmark", "learning", "allocation", "knobs", "failures")


def test_report_renders_markdown_and_pngs(runs: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    from envengineer.cli import main

    run = runs["random"]
    assert main(["report", str(run)]) == 0
    assert "report.md" in capsys.readouterr().out
    text = (run / "report.md").read_text()
    for name in FIGURES:
        png = run / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5000, name
        assert f"(figures/{name}.png)" in text
    assert "| agents | 3x3 | 4x4 | 5x5 | Sum |" in text
    assert "| 3 |" in text and "| 4 |" in text
    assert "engineer:random" in text and "status | finished" in text
    assert text.count("\n| 0 |") >= 2  # rounds table and configuration table list round 0


def test_report_of_a_stopped_run(runs: dict[str, Path], tmp_path: Path) -> None:
    """A run killed after round 1's data renders what it has, and says it is not finished."""
    from envengineer.loop.report import load_run, write_report

    src = runs["fixed"]
    run = tmp_path / "stopped"
    run.mkdir()
    (run / "experiment.yaml").write_text((src / "experiment.yaml").read_text())
    keep = [
        e for e in RunDir(src).entries() if e.round == 0 or (e.round == 1 and e.stage in ("config", "data"))
    ]
    import shutil

    for r in (0, 1):
        shutil.copytree(src / f"round_{r:02d}", run / f"round_{r:02d}")
    rd = RunDir(run)
    for e in keep:
        rd.record(e.round, e.stage, seconds=e.seconds, paths=e.paths, info=e.info, status=e.status)
    record = load_run(run)
    assert not record.finished and [len(r.stages) for r in record.rounds] == [4, 2]
    path = write_report(run)
    text = path.read_text()
    assert "1 of 3 rounds complete" in text and "## Benchmark" not in text
    assert (run / "figures" / "allocation.png").exists() and not (run / "figures" / "benchmark.png").exists()


def test_compare_two_runs(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from envengineer.cli import main

    out = tmp_path / "cmp"
    assert main(["compare", str(runs["random"]), str(runs["fixed"]), "--out", str(out)]) == 0
    text = (out / "compare.md").read_text()
    assert "`t-report-random`" in text and "`t-report-fixed`" in text
    assert "| run | engineer | rounds | 3 agents | 4 agents | mean |" in text
    assert (out / "compare.png").read_bytes()[:8] == PNG
    assert "t-report-fixed" in capsys.readouterr().out


def test_report_numbers(runs: dict[str, Path]) -> None:
    from envengineer.loop.report import allocation, load_run, outcome_counts, train_rewards

    record = load_run(runs["fixed"])
    rounds, sizes, share = allocation(record)
    assert rounds == [0, 1, 2] and sizes == list(range(3, 11))
    for i in range(3):
        assert sum(share[n][i] for n in sizes) == pytest.approx(100.0)
    assert [share[n][0] for n in sizes] == [share[n][2] for n in sizes]  # fixed: same allocation each round
    counts = outcome_counts(record.rounds[0].validation)
    assert sum(sum(c.values()) for c in counts.values()) == record.rounds[0].validation["summary"]["n"]
    pts = train_rewards(record)
    assert len(pts) == 9 and pts[-1][0] == pytest.approx(3.0)


def test_report_errors_name_the_fix(tmp_path: Path) -> None:
    from envengineer.errors import ConfigError
    from envengineer.loop.report import write_report

    with pytest.raises(ConfigError, match="not a run directory"):
        write_report(tmp_path)


def test_report_has_subset_table_parse_share_tokens_and_no_context_for_non_llm(runs: dict[str, Path]) -> None:
    from envengineer.loop.report import write_report

    text = write_report(runs["fixed"]).read_text()
    assert "| pooled | wr_025 | wr_050 | wr_075 |" in text  # the paper's Table 5 shape
    assert "| valid / optimal % (n) |" in text and "parsed " in text
    assert "tokens / answer |" in text  # rounds table column
    assert "| context | none (not a language model) |" in text


def _seeded_copies(
    src: Path, root: Path, name: str, shifts: list[float], kind: str | None = None
) -> list[Path]:
    """Copies of a finished run with other seeds and benchmark/validation rates shifted (synthetic arms)."""
    import json

    import yaml

    out = []
    for seed, shift in enumerate(shifts):
        run = root / f"{name}-s{seed}"
        shutil.copytree(src, run)
        exp = yaml.safe_load((run / "experiment.yaml").read_text())
        exp["name"] = f"{name}-s{seed}"
        exp["seeds"] = {**exp.get("seeds", {}), "data": seed, "training": seed}
        if kind:
            exp["engineer"]["kind"] = kind
        (run / "experiment.yaml").write_text(yaml.safe_dump(exp))
        paths = [run / "benchmark" / "scores.json", *sorted(run.glob("round_*/validation/scores.json"))]
        for path in paths:
            scores = json.loads(path.read_text())
            for t in scores["table"].values():
                for cell in t["sizes"].values():
                    cell["valid"] = cell["optimal"] = shift
                t["sum"] = {"valid": shift, "optimal": shift / 2}
            path.write_text(json.dumps(scores))
        rehash_ledger(run)
        out.append(run)
    return out


def test_compare_groups_seeds_into_arms_with_mean_and_spread(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from envengineer.cli import main

    fixed = _seeded_copies(runs["fixed"], tmp_path, "cpu-fixed", [10.0, 20.0, 30.0])
    rand = _seeded_copies(runs["random"], tmp_path, "cpu-random", [40.0, 40.0, 46.0])
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, fixed + rand), "--out", str(out)]) == 0
    text = (out / "compare.md").read_text()
    assert "## Arms (runs that differ only in their seeds)" in text
    assert "| `cpu-fixed` | 3 | 3 |" in text and "| `cpu-random` | 3 | 3 |" in text
    # benchmark valid Sum: mean 20, sample std 10, range 10-30; validation the same; optimal halves
    assert "**20.00 ± 10.00 [10.00–30.00]**" in text and "**42.00 ± 3.46 [40.00–46.00]**" in text
    assert "**10.00 ± 5.00 [5.00–15.00]**" in text
    assert "### benchmark, valid %" in text and "### last validation, optimal %" in text
    assert "| run | benchmark wr_025 |" in text  # per-subset table
    assert (out / "allocation.png").read_bytes()[:8] == PNG
    assert "allocation.png" in capsys.readouterr().out


def test_compare_explicit_arms_and_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    from envengineer.cli import main
    from envengineer.errors import ConfigError
    from envengineer.loop.compare import compare_runs, parse_arm

    a = _seeded_copies(runs["fixed"], tmp_path, "left", [0.0, 50.0])
    out = tmp_path / "cmp"
    assert main(["compare", "--arm", f"mine={a[0]},{a[1]}", str(runs["random"]), "--out", str(out)]) == 0
    text = (out / "compare.md").read_text()
    assert "| `mine` | 2 | 3 |" in text and "| `t-report-random` | 1 | 3 |" in text
    assert "**25.00 ± 35.36 [0.00–50.00]**" in text
    for bad in ("noequals", "=a,b", "name="):
        with pytest.raises(ConfigError, match="NAME=DIR"):
            parse_arm(bad)
    with pytest.raises(ConfigError, match="already in another arm"):
        compare_runs([], out=out, arms={"x": [a[0]], "y": [a[0]]})


def test_paired_gain_over_the_starting_model_is_exact_and_its_interval_brackets_it() -> None:
    from envengineer.loop.report_data import paired_gain

    def scores(valid: list[bool], optimal: list[bool]) -> dict:
        pairs = enumerate(zip(valid, optimal, strict=True))
        return {"verdicts": [{"id": f"b{i}", "valid": v, "optimal": o} for i, (v, o) in pairs]}

    before = scores([True, False, False, False], [True, False, False, False])
    after = scores([True, True, True, False], [True, True, False, False])
    gain = paired_gain(before, after)
    assert gain["n"] == 4
    assert gain["valid"]["mean"] == 50.0 and gain["optimal"]["mean"] == 25.0  # +2 and +1 boards of 4
    assert gain["valid"]["low"] <= 50.0 <= gain["valid"]["high"]
    same = paired_gain(before, before)
    assert (same["valid"]["low"], same["valid"]["high"]) == (0.0, 0.0)
    assert paired_gain(before, {"verdicts": [{"id": "other", "valid": True}]}) is None
    one = paired_gain(before, {"verdicts": [{"id": "b1", "valid": True, "optimal": False}]})
    assert one["n"] == 1 and one["valid"]["mean"] == 100.0 and one["valid"]["low"] is None


def test_report_shows_the_rounds_training_diagnostics() -> None:
    from envengineer.loop.report import _diagnostics_row

    metrics = {
        "sampled": {"3": {"completions": 48, "valid": 0.5, "groups": 6, "zero_std": 0.5},
                    "4": {"completions": 16, "valid": 0.25, "groups": 2, "zero_std": 1.0}},
        "log_history": [{"entropy": 0.4}, {"loss": 1}, {"entropy": 0.25}],
        "probe": {"rows": [{"step": 0, "valid": 0.5, "kl": 0.0}, {"step": 25, "valid": 0.25, "kl": 0.0123}]},
    }  # fmt: skip
    row = _diagnostics_row(2, metrics)
    # sampled valid (24 + 4) / 64 = 43.75 %; zero-variance groups (3 + 2) / 8 = 62.5 %
    assert row == "| 2 | 43.8 (3: 50, 4: 25) | 62.5 | 0.400 → 0.250 | 50 → 25 | 0.0123 |"
    assert _diagnostics_row(0, {}) is None
