"""Small benchmark and validation sets of the real shape (sizes 3..5), shared by the loop tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.mapf.benchmark import build_set
from envengineer.mapf.instance import save_instances


def write_small_sets(
    directory: Path, seed: int, *, bench_agents: Sequence[int] = (3,), val_agents: Sequence[int] = (3,)
) -> dict[str, Path]:
    """Write ``benchmark.jsonl`` (seed) and a disjoint ``validation.jsonl`` (seed + 1), one board per cell."""
    bench = build_set(seed=seed, split="benchmark", per_cell=1, agents=bench_agents, max_size=5, workers=1)
    val = build_set(
        seed=seed + 1,
        split="validation",
        per_cell=1,
        agents=val_agents,
        max_size=5,
        workers=1,
        exclude={i.board_hash() for i in bench},
    )
    paths = {"benchmark": directory / "benchmark.jsonl", "validation": directory / "validation.jsonl"}
    save_instances(bench, paths["benchmark"])
    save_instances(val, paths["validation"])
    return paths


def rehash_ledger(run: Path) -> None:
    """Record the current hashes of a run's files in its ledger, as if the run had written them (tests
    that edit a run's files on purpose and want the edit read as the run's own)."""
    import json

    from envengineer.loop.rundir import file_digest

    lines = []
    for line in (run / "ledger.jsonl").read_text().splitlines():
        d = json.loads(line)
        d["hashes"] = {k: file_digest(run / k) for k in d.get("hashes", {})}
        lines.append(json.dumps(d) + "\n")
    (run / "ledger.jsonl").write_text("".join(lines))


def small_experiment(bench: Path, name: str, policy: str = "scripted:greedy", **over: Any) -> Any:
    """A two-round scripted run over the small sets (seconds): the trust tests' damaged runs start from it."""
    from envengineer.loop.experiment import Experiment

    return Experiment.model_validate(
        {
            "name": name,
            "policy": policy,
            "rounds": 2,
            "samples_per_round": 6,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
            "evaluation": {"batch_size": 4, "benchmark_path": str(bench)},
            "engineer": {"kind": "random"},
            **over,
        }
    )


def small_overrides(sets: dict[str, Path]) -> dict[str, Any]:
    """Overrides that shrink an experiment file to the small sets of :func:`write_small_sets` (its own
    settings otherwise kept): 8 samples a round, one validation board per cell, the small benchmark."""
    return {
        "samples_per_round": 8,
        "validation.per_cell": 1,
        "validation.agents": [3],
        "validation.max_size": 5,
        "validation.limit": None,
        "evaluation.benchmark_path": str(sets["benchmark"]),
        "evaluation.benchmark_per_cell": None,
        "evaluation.benchmark_limit": None,
        "warm_start.samples": 4,
    }


def dotted_experiment(data: dict[str, Any], settings: dict[str, Any]) -> Any:
    """The experiment of ``data`` with each dotted-key setting (``"training.learner": "sft"``) applied, as
    ``envengineer run --set`` applies them."""
    from envengineer.loop.experiment import Experiment, set_dotted

    for key, value in settings.items():
        set_dotted(data, key, value)
    return Experiment.from_dict(data)
