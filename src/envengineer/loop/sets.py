"""The held-out sets of a run: the validation set (built once, kept in the run) and the benchmark part."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment
from envengineer.loop.integrity import Verifier
from envengineer.loop.rundir import VALIDATION_SET, RunDir
from envengineer.mapf.instance import Instance, load_instances, save_instances

log = logging.getLogger(__name__)


def check_sets(exp: Experiment, validation: Sequence[Instance], benchmark: Sequence[Instance]) -> None:
    """An empty validation or benchmark set is an error before anything runs (no run with n = 0)."""
    if exp.rounds > 0 and not validation:
        v = exp.validation
        raise ConfigError(
            f"the validation set is empty (agents {list(v.agents)}, max_size {v.max_size}); "
            "choose agent counts that fit the sizes (agents <= max_size)"
        )
    if not benchmark:
        raise ConfigError(
            "the benchmark set is empty; check evaluation.benchmark_path, benchmark_per_cell and "
            "benchmark_limit"
        )


def validation_set(
    exp: Experiment, rd: RunDir, verifier: Verifier, full_benchmark: Sequence[Instance], progress: bool
) -> list[Instance]:
    """The validation set, built once per run and kept in ``validation_set.jsonl`` (resume reuses it)."""
    path = rd.root / VALIDATION_SET
    if path.exists() and not verifier.check_validation_set(VALIDATION_SET):
        path.unlink()  # damaged, and redo_damaged: rebuilt below
    if path.exists():
        return load_instances(path)
    from envengineer.mapf.benchmark import benchmark_version, build_set

    v = exp.validation
    log.info("building the validation set (%d per cell, agents %s)", v.per_cell, list(v.agents))
    built = build_set(
        decide=benchmark_version(exp.evaluation.benchmark_version).decide,
        seed=v.seed,
        split="validation",
        per_cell=v.per_cell,
        agents=v.agents,
        max_size=v.max_size,
        min_size=v.min_size,
        exclude={i.board_hash() for i in full_benchmark},
        progress=progress,
    )
    chosen = select_benchmark(built, None, v.limit)
    save_instances(chosen, path)
    return chosen


def full_benchmark(exp: Experiment) -> list[Instance]:
    """The whole benchmark: ``evaluation.benchmark_path``, else the packaged 3,150 instances of
    ``evaluation.benchmark_version``."""
    if exp.evaluation.benchmark_path:
        return load_instances(exp.evaluation.benchmark_path)
    from envengineer.mapf.benchmark import load_benchmark

    return load_benchmark(exp.evaluation.benchmark_version)


def select_benchmark(
    instances: Sequence[Instance], per_cell: int | None, limit: int | None = None
) -> list[Instance]:
    """The benchmark part ``benchmark_per_cell`` / ``benchmark_limit`` keep: a seeded, stratified subset.

    See :func:`envengineer.mapf.benchmark.draw_subset`: every cell keeps its share of instances that need a
    wait, and the same arguments give the same subset in every run.
    """
    from envengineer.mapf.benchmark import draw_subset

    return draw_subset(instances, per_cell=per_cell, limit=limit)
