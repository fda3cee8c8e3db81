"""Sweeps: runs x seeds on an executor (here one after another or in lanes, or as Ray tasks on a cluster).

``envengineer run FILE --seeds 0-4`` and ``envengineer suite DIR --seeds 0-4`` build one
:class:`~envengineer.sweep.tasks.SweepTask` per distinct run and seed (``tasks.py``), refuse two tasks that
would write one run directory, skip the runs whose ledger already ends with the benchmark, and hand the
rest to an executor (``executors.py``: in this process one after another, in lanes of subprocesses side
by side on the cores, or Ray). Progress is read from the runs' ledgers (``progress.py``); at the end a
summary table and ``compare`` over the finished runs. A sweep that is stopped or killed is resumed by
the same command.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from envengineer.errors import ConfigError
from envengineer.sweep.executors import (
    Executor,
    LanesExecutor,
    RayExecutor,
    SequentialExecutor,
    SweepTaskFailed,
    TaskResult,
    lane_count,
    parse_lanes,
)
from envengineer.sweep.progress import (
    Progress,
    compare_finished,
    headline_table,
    print_tasks,
    summary_markdown,
)
from envengineer.sweep.tasks import (
    SweepTask,
    check_existing,
    check_unique,
    file_tasks,
    parse_seeds,
    suite_tasks,
)

EXECUTORS = ("sequential", "ray")

__all__ = [
    "EXECUTORS",
    "LanesExecutor",
    "RayExecutor",
    "SequentialExecutor",
    "SweepTask",
    "SweepTaskFailed",
    "TaskResult",
    "check_executor",
    "file_tasks",
    "link_suite",
    "make_executor",
    "parse_lanes",
    "parse_seeds",
    "print_tasks",
    "run_sweep",
    "suite_tasks",
]


def check_executor(kind: str, address: str | None = None, lanes: str | None = None) -> None:
    """``--executor``, ``--address`` and ``--lanes`` make sense together (Ray itself is not needed yet)."""
    if kind not in EXECUTORS:
        raise ConfigError(f"--executor {kind!r}: choose one of {', '.join(EXECUTORS)}")
    if address is not None and kind != "ray":
        raise ConfigError("--address names a Ray cluster; it goes with --executor ray")
    parse_lanes(lanes)
    if lanes is not None and kind == "ray":
        raise ConfigError(
            "--lanes goes with the sequential executor; Ray runs as many runs at once as its CPUs and "
            "GPUs allow (drop --lanes)"
        )


def make_executor(
    kind: str, address: str | None = None, *, lanes: str | None = None, tasks: Sequence[SweepTask] = ()
) -> Executor:
    """The executor named on the command line (``--executor``, ``--address``, ``--lanes``).

    The sequential executor runs the unfinished ``tasks`` in lanes side by side (one per core unless
    ``--lanes`` says otherwise); a lone run, or ``--lanes 1``, runs in this process with every core.
    """
    check_executor(kind, address, lanes)
    if kind == "ray":
        return RayExecutor(address)  # Ray is imported here
    n = lane_count(parse_lanes(lanes), [t for t in tasks if not t.finished()])
    return LanesExecutor(n) if n > 1 else SequentialExecutor()


def run_sweep(
    tasks: Sequence[SweepTask],
    executor: Executor,
    *,
    compare_out: Path | None = None,
    stream: TextIO | None = None,
) -> list[TaskResult]:
    """Run every unfinished task on ``executor``; print progress, the summary and the comparison.

    Raises:
        ConfigError: two tasks would write one run directory, or a directory holds another run.
        SweepTaskFailed: some runs failed (the others finished; the same command resumes the failed ones).
    """
    out = stream or sys.stdout
    check_unique(tasks)
    for t in tasks:
        check_existing(t)
    todo = [t for t in tasks if not t.finished()]
    earlier = {t.name for t in tasks} - {t.name for t in todo}
    label = getattr(executor, "label", type(executor).__name__)
    print(
        f"sweep: {len(tasks)} run(s), {len(earlier)} finished earlier, {len(todo)} to run ({label})",
        file=out,
        flush=True,
    )
    t0 = time.perf_counter()
    results = {r.task.name: r for r in (executor.run(todo, Progress(todo, out)) if todo else [])}
    seconds = time.perf_counter() - t0
    start = getattr(executor, "start_seconds", 0.0)
    every = [results.get(t.name) or TaskResult(t, True, 0.0, host="earlier") for t in tasks]
    print(f"\n{summary_markdown(every)}", file=out)
    print(
        f"sweep time {seconds:.1f} s" + (f" (starting Ray: {start:.1f} s)" if start else ""),
        file=out,
        flush=True,
    )
    if compare_out is not None:
        path = compare_finished(every, compare_out)
        if path is not None:
            print(
                f"\n{headline_table(path.read_text(encoding='utf-8'))}\n\ncomparison: {path}",
                file=out,
                flush=True,
            )
    failed = [r for r in every if not r.ok]
    if failed:
        raise SweepTaskFailed(
            f"{len(failed)} of {len(every)} runs failed ({'; '.join(str(r.error) for r in failed)[:800]}); "
            "the same command runs them again, resuming from their ledgers"
        )
    return every


def link_suite(runs: Sequence[Any], tasks: Sequence[SweepTask], out: Path) -> list[Path]:
    """``OUT/suite.json`` and the alias links of a suite sweep (per seed: ``ALIAS-sSEED -> NAME-sSEED``).

    ``tasks`` are :func:`suite_tasks` of ``runs``, in its order.
    """
    from envengineer.loop.suite import SuiteRun, link_aliases, write_suite_record

    per_run = max(1, len(tasks) // max(1, len(runs)))  # suite_tasks: each run's seeds in a row
    records = [
        SuiteRun(t.experiment(), list(runs[i // per_run].files), [t.name, *t.aliases])
        for i, t in enumerate(tasks)
    ]
    write_suite_record(records, out)
    return [link for rec in records for link in link_aliases(rec, out)]
