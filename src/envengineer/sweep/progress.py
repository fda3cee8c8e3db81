"""Progress of a sweep read from the runs' ledgers: one line per run when it moves, a summary at the end.

The ledger is the only record of what finished (:mod:`envengineer.loop.rundir`), so polling it tells the
same story wherever a run runs; ``RUN/sweep.status.json`` says since when and on which host.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from envengineer.loop.rundir import FINAL_STAGES, ROUND_STAGES, RunDir, read_json
from envengineer.sweep.executors import TaskResult, read_status
from envengineer.sweep.tasks import SweepTask


def total_stages(exp: Any) -> int:
    """The ledger lines a finished run has (as :meth:`LoopRunner.run` counts them)."""
    warm = exp.warm_start.enabled and not exp.scripted
    return exp.rounds * len(ROUND_STAGES) + len(FINAL_STAGES) + int(warm) + int(exp.validation.start)


def ledger_state(run_dir: Path) -> tuple[int, str]:
    """``(stages finished, the last one as text)``, e.g. ``(6, "round 1 data")``; ``(0, "")`` when none."""
    try:
        done = RunDir(run_dir).done()
    except Exception:  # a ledger being written or damaged: the run itself will say
        return 0, ""
    if not done:
        return 0, ""
    r, stage = list(done)[-1]
    return len(done), (f"round {r} {stage}" if r is not None else stage)


class Progress:
    """Prints ``NAME: k/N stages, last: round R STAGE, M:SS`` whenever a run's ledger grows."""

    def __init__(self, tasks: Sequence[SweepTask], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.t0 = time.time()
        self.tasks = {t.name: t for t in tasks}
        self.totals = {t.name: total_stages(t.experiment()) for t in tasks}
        self.seen: dict[str, int] = {}
        self.active: set[str] = set()

    def started(self, task: SweepTask) -> None:
        self.active.add(task.name)
        self.seen[task.name] = ledger_state(task.run_dir)[0]

    def poll(self) -> None:
        for name in sorted(self.active):
            self._line_if_moved(self.tasks[name])

    def finished(self, result: TaskResult) -> None:
        name = result.task.name
        self.active.discard(name)
        self._line_if_moved(result.task)
        state = "finished" if result.ok else f"FAILED: {result.error}"
        self._print(
            f"{name}: {state} ({_clock(result.seconds)}{' on ' + result.host if result.host else ''})"
        )

    def line(self, task: SweepTask) -> str:
        n, last = ledger_state(task.run_dir)
        status = read_status(task.run_dir) or {}
        started = status.get("started")
        since = time.time() - float(started) if isinstance(started, (int, float)) else 0.0
        where = f" on {status['host']}" if status.get("host") else ""
        total = self.totals[task.name]
        return f"{task.name}: {n}/{total} stages, last: {last or 'none'}, {_clock(since)}{where}"

    def _line_if_moved(self, task: SweepTask) -> None:
        n = ledger_state(task.run_dir)[0]
        if n != self.seen.get(task.name):
            self.seen[task.name] = n
            self._print(self.line(task))

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def print_tasks(tasks: Sequence[SweepTask], stream: TextIO | None = None) -> None:
    """The sweep's plan: per run what it asks the scheduler for and whether it starts, resumes or is done."""
    out = stream or sys.stdout
    print("| run | seed | CPUs | GPUs | state | run directory |", file=out)
    print("|---|---|---|---|---|---|", file=out)
    for t in tasks:
        state = (
            "finished" if t.finished() else "resumes" if (t.run_dir / "experiment.yaml").exists() else "new"
        )
        seed = "" if t.seed is None else t.seed
        print(f"| {t.name} | {seed} | {t.num_cpus:g} | {t.num_gpus:g} | {state} | {t.run_dir} |", file=out)
    cpus, gpus = sum(t.num_cpus for t in tasks), sum(t.num_gpus for t in tasks)
    print(
        f"{len(tasks)} run(s); all at once they would ask for {cpus:g} CPU(s) and {gpus:g} GPU(s)", file=out
    )


def summary_markdown(results: Sequence[TaskResult]) -> str:
    """One row per run: status, stages, minutes, host, benchmark valid and optimal %, directory."""
    rows = [
        "| run | status | valid % | optimal % | time | host | run directory |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        scores = _summary(r.task.run_dir)
        valid = f"{scores['valid']:.2f}" if scores else ""
        optimal = f"{scores['optimal']:.2f}" if scores else ""
        status = "finished" if r.ok else "failed"
        rows.append(
            f"| {r.task.name} | {status} | {valid} | {optimal} | {_clock(r.seconds)} | {r.host} "
            f"| {r.task.run_dir} |"
        )
    return "\n".join(rows)


def compare_finished(results: Sequence[TaskResult], out: Path) -> Path | None:
    """``compare`` over the finished runs (arms of seeds grouped), into ``out``; None when it cannot."""
    dirs = [r.task.run_dir for r in results if r.ok]
    if not dirs:
        return None
    try:
        from envengineer.loop.compare import compare_runs

        return compare_runs(dirs, out=out)
    except ImportError as exc:
        print(f"no comparison ({exc.name} missing; install the train extra)", file=sys.stderr)
        return None


def headline_table(compare_md: str) -> str:
    """From ``compare.md``: the arms' benchmark valid % table (mean ± std over seeds), else the first.

    >>> headline_table("# C\\n\\n| a |\\n\\n### benchmark, valid %: x\\n\\n| b |\\n\\n### y\\n")
    '### benchmark, valid %: x\\n\\n| b |'
    """
    lines = compare_md.splitlines()
    start = next((i for i, x in enumerate(lines) if x.startswith("### benchmark, valid %")), None)
    if start is None:
        start = 0
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end]).strip()


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(read_json(run_dir / "benchmark" / "scores.json")["summary"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
