"""The warm-start on several agent counts (warm_start.agents): equal shares, mixed, each recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.runner import run_experiment
from envengineer.mapf.config import RoundConfig
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")


def test_warm_start_on_two_and_three_agents(tmp_path: Path) -> None:
    sets = write_small_sets(tmp_path / "sets", 11)
    seen: list[Any] = []

    def warm(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
        seen.extend(instances)
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 1}

    def evaluator(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> Any:
        from envengineer.evaluation import evaluate
        from envengineer.models import load_backend

        return evaluate(load_backend("scripted", "greedy", instances=instances), instances, out_dir=out_dir)

    exp = Experiment.model_validate(
        {
            "name": "t-agents",
            "model": "m",
            "rounds": 0,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
            "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
            "warm_start": {"enabled": True, "samples": 21, "agents": [2, 3], "sizes": [3, 4]},
        }
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    run_experiment(exp, run, components=Components(warm_starter=warm, evaluator=evaluator))
    counts = [i.num_agents for i in seen]
    assert (counts.count(2), counts.count(3)) == (11, 10)  # 21 split as evenly as it goes
    assert counts != sorted(counts)  # shuffled together: batches mix agent counts
    assert RoundConfig.load(run / "warm_start" / "config.yaml").num_agents == 2
    assert RoundConfig.load(run / "warm_start" / "config.a3.yaml").num_agents == 3
    assert len((run / "warm_start" / "manifest.jsonl").read_text().splitlines()) == 21
