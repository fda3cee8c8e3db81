"""Every experiment file runs through the whole loop, with fakes in place of the model.

The files' own settings are kept (engineer kind, context variant, training details, warm-start, rounds);
only the sizes shrink to the small sets of ``small_sets.py`` and the model parts are stand-ins: training
returns a checkpoint path, the greedy policy answers the evaluations, and a language-model engineer
answers with a fixed, valid configuration. The real model parts are covered by the demo, the plumbing
experiment and the training tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envengineer.loop.components import Components, default_components
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.rundir import ROUND_STAGES, RunDir, read_json
from envengineer.loop.runner import run_experiment
from small_sets import small_overrides, write_small_sets

pytest.importorskip("envengineer.evaluation")

ROOT = Path(__file__).resolve().parents[1] / "experiments"
FILES = sorted(p for p in ROOT.glob("*/*.yaml"))
PROPOSAL = {
    "rationale": "More 4x4 boards with waits.",
    "sizes": {
        "3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.3},
        "4": {"data_ratio": 2, "hole_ratio": 0.2, "wait_ratio": 0.6},
    },
}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 41)


class FixedAnswer:
    """A chat backend that always answers with the same valid configuration."""

    name = "fixed-answer"

    def generate(self, conversations: Any, params: Any) -> list[Any]:
        from envengineer.models import Completion

        return [Completion(json.dumps(PROPOSAL)) for _ in conversations]


def engineer_factory(
    experiment: Experiment, *, model: str | None, round: int, round0: Any, seed: int | None = None
) -> Any:
    if experiment.engineer.is_llm:
        from envengineer.engineer.engineers import LLMEngineer

        return LLMEngineer(FixedAnswer(), "fixed-answer", max_retries=experiment.engineer.retries)
    real = default_components().engineer_factory
    return real(experiment, model=model, round=round, round0=round0, seed=seed)


def trainer(model: Any, instances: Any, *, out_dir: Path, **_: Any) -> dict[str, Any]:
    return {"checkpoint": str(out_dir / "checkpoint"), "steps": 1, "seconds": 0.0, "metrics": {}}


def evaluator(model: Any, instances: Any, *, out_dir: Path, **_: Any) -> Any:
    from envengineer.evaluation import evaluate
    from envengineer.models import load_backend

    backend = load_backend("scripted", "greedy", instances=instances)
    return evaluate(backend, instances, out_dir=out_dir, progress=False)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_experiment_file_runs_the_loop(path: Path, sets: dict[str, Path], tmp_path: Path) -> None:
    exp = load_experiment(path, small_overrides(sets))
    full = load_experiment(path)
    assert (exp.engineer, exp.rounds, exp.warm_start.enabled) == (
        full.engineer,
        full.rounds,
        full.warm_start.enabled,
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    components = Components(
        trainer=trainer, warm_starter=trainer, evaluator=evaluator, engineer_factory=engineer_factory
    )
    summary = run_experiment(exp, run, components=components)

    stages = [(e.round, e.stage) for e in RunDir(run).entries()]
    warm = [(None, "warm_start")] if exp.warm_start.enabled and not exp.scripted else []
    warm += [(None, "start_validation")] if exp.validation.start else []
    assert stages == warm + [(r, s) for r in range(exp.rounds) for s in ROUND_STAGES] + [(None, "benchmark")]
    assert summary["n"] == sum(1 for _ in sets["benchmark"].open())
    for r in range(1, exp.rounds):
        round_dir = run / f"round_{r:02d}"
        assert read_json(round_dir / "projection.json")["source"] == f"engineer:{exp.engineer.kind}"
        assert read_json(round_dir / "engineer" / "decision.json")["fell_back"] is False
