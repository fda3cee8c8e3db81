"""The sweep forms of ``envengineer run`` and ``suite``: ``--seeds``, ``--executor``, ``--address``,
``--lanes``.

``cli/loop.py`` parses the options and calls these; they build the tasks, print them with ``--dry-run``,
or run the sweep (:func:`envengineer.sweep.run_sweep`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError


def run_sweep_command(args: argparse.Namespace, override_name: Callable[[str, dict], str]) -> int:
    """``run FILE --seeds ...``, ``--executor ray`` or ``--lanes N``; ``override_name`` names a run after its
    ``--set``."""
    from envengineer import sweep
    from envengineer.loop.experiment import load_experiment, parse_override
    from envengineer.loop.seeds import with_seed
    from envengineer.sweep.tasks import make_task, seeded_name

    if args.resume or args.redo_damaged or (args.seed is not None and args.seeds is not None):
        raise ConfigError(
            "--seeds, --executor, --address and --lanes take an experiment file; drop --resume, "
            "--redo-damaged and --seed (a sweep resumes when the same command runs again)"
        )
    if args.experiment is None:
        raise ConfigError("name an experiment file (e.g. experiments/cpu/plumbing.yaml)")
    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {args.seed}")
    sweep.check_executor(args.executor, args.address, args.lanes)
    sets = [*args.set, *([f"training.report_to={args.report_to}"] if args.report_to is not None else [])]
    overrides = dict(parse_override(s) for s in sets)
    if args.seeds is None:
        with_seed(overrides, args.seed)  # --seed and --set of one seed: refused here, naming --seed
    exp = load_experiment(args.experiment, overrides)
    name = override_name(exp.name, overrides) if overrides and "name" not in overrides else exp.name
    report = not args.no_report
    compare = None
    if args.seeds is None:  # one run, named and placed as `envengineer run` places it
        run_name = seeded_name(name, args.seed)
        out = args.out or Path("runs") / run_name
        tasks = [make_task(args.experiment, out, name=run_name, seed=args.seed, sets=sets, report=report)]
    else:
        parent = args.out or Path("runs")
        seeds = sweep.parse_seeds(args.seeds)
        tasks = sweep.file_tasks(args.experiment, seeds, parent, name=name, sets=sets, report=report)
        compare = parent / f"compare-{name}"
    if args.dry_run:
        sweep.print_tasks(tasks)
        return 0
    executor = sweep.make_executor(args.executor, args.address, lanes=args.lanes, tasks=tasks)
    sweep.run_sweep(tasks, executor, compare_out=compare)
    return 0


def suite_sweep_command(args: argparse.Namespace, runs: list[Any]) -> int:
    """``suite DIR --seeds ...``, ``--executor ray`` or ``--lanes N``: every distinct run x seed one task."""
    from envengineer import sweep

    sweep.check_executor(args.executor, args.address, args.lanes)
    seeds = sweep.parse_seeds(args.seeds) if args.seeds is not None else None
    tasks = sweep.suite_tasks(runs, seeds, args.out, sets=args.set)
    if args.dry_run:
        sweep.print_tasks(tasks)
        return 0
    executor = sweep.make_executor(args.executor, args.address, lanes=args.lanes, tasks=tasks)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        sweep.run_sweep(tasks, executor, compare_out=args.out / "compare")
    except sweep.SweepTaskFailed:
        _link(sweep, runs, tasks, args.out)  # the finished runs get their aliases all the same
        raise
    _link(sweep, runs, tasks, args.out)
    return 0


def _link(sweep: Any, runs: list[Any], tasks: list[Any], out: Path) -> None:
    for link in sweep.link_suite(runs, tasks, out):
        print(f"   {link.name} -> {link.readlink()}")
