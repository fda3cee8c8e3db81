"""Executors: a list of sweep tasks in, one result per task out.

:class:`SequentialExecutor` runs the tasks one after another in this process, as ``envengineer suite``
always has. :class:`RayExecutor` makes every task one Ray task with the CPUs and GPUs its run asks for; the
Ray task runs ``envengineer run`` in a subprocess (a crash stays in that run) writing ``RUN/sweep.log``, and
Ray retries a task that died, which then resumes from the run's ledger. Ray is imported only here and only
when asked for (``pip install 'envengineer[ray]'``).

Whatever runs a task holds an exclusive lock on ``RUN/.sweep.lock`` while it writes the run, so two tasks
(of one sweep, of two sweeps, or a retry next to a dying first attempt) never write one run directory; the
lock dies with its process, so a killed sweep leaves none behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.machine import THREAD_VARIABLES as THREAD_VARIABLES  # its old home, which tests import
from envengineer.machine import lane_threads, thread_env, usable_cpus
from envengineer.sweep.tasks import SweepTask

log = logging.getLogger(__name__)

LOCK = ".sweep.lock"
STATUS = "sweep.status.json"
LOG = "sweep.log"
#: Extra attempts Ray makes of a task whose process died or whose run failed (each resumes the ledger).
DEFAULT_RETRIES = 2
#: Lines of a failed run's log quoted in its error.
_TAIL = 5


class SweepTaskFailed(EnvEngineerError):
    """A run of a sweep ended with an error (its log is ``RUN/sweep.log``)."""


@dataclass
class TaskResult:
    """What became of one task: finished (``ok``) or failed with a one-line ``error``."""

    task: SweepTask
    ok: bool
    seconds: float = 0.0
    error: str | None = None
    host: str = ""


class Monitor(Protocol):
    """What an executor tells about progress (:class:`envengineer.sweep.progress.Progress`)."""

    def started(self, task: SweepTask) -> None: ...
    def poll(self) -> None: ...
    def finished(self, result: TaskResult) -> None: ...


class Executor(Protocol):
    def run(self, tasks: Sequence[SweepTask], monitor: Monitor) -> list[TaskResult]: ...


# -- the run lock -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def run_lock(
    run_dir: Path, *, note: Callable[[str], None] | None = None, poll_s: float = 1.0
) -> Iterator[int]:
    """Hold ``RUN/.sweep.lock`` exclusively; wait while another process holds it (then resume after it).

    Yields the lock's file descriptor: a subprocess given it (``pass_fds``) holds the lock with this
    process, so it stays held while either lives. Writes ``RUN/sweep.status.json`` (host, pid, start
    time, attempt) once the lock is held.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and note is not None:
                    note(f"{run_dir}: another process is writing this run; waiting for it to end")
                waited = True
                time.sleep(poll_s)
        _write_status(run_dir)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``sweep.status.json`` (who runs it since when), or None."""
    try:
        data = json.loads((run_dir / STATUS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_status(run_dir: Path) -> None:
    from envengineer.loop.rundir import atomic_write_json

    old = read_status(run_dir) or {}
    attempt = int(old.get("attempt", 0)) + 1 if isinstance(old.get("attempt", 0), int) else 1
    atomic_write_json(
        run_dir / STATUS,
        {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(), "attempt": attempt},
    )


# -- one task ---------------------------------------------------------------------------------------------
def run_command(task: SweepTask) -> list[str]:
    """The ``envengineer run`` command of a task: start it, or resume it when its directory holds it."""
    base = [sys.executable, "-m", "envengineer.cli", "run"]
    tail = ["--no-progress", *([] if task.report else ["--no-report"])]
    if (task.run_dir / "experiment.yaml").exists():
        return [*base, "--resume", str(task.run_dir), *tail]
    sets = [a for s in task.sets for a in ("--set", s)]
    seed = ["--seed", str(task.seed)] if task.seed is not None else []
    return [
        *base,
        str(task.file),
        *sets,
        *seed,
        "--set",
        f"name={task.name}",
        "--out",
        str(task.run_dir),
        *tail,
    ]


def run_in_subprocess(
    task: SweepTask, cwd: str | None = None, *, threads: int | None = None
) -> dict[str, Any]:
    """One task as ``envengineer run`` in a subprocess, under the run lock, output into ``RUN/sweep.log``.

    With ``threads`` the subprocess (and the stages it starts) gets that many torch and BLAS threads.

    Raises:
        SweepTaskFailed: the run exited with an error (the message quotes the log's last lines).
    """
    t0 = time.perf_counter()
    log_path = task.run_dir / LOG
    with run_lock(task.run_dir) as lock_fd:
        cmd = run_command(task)
        with open(log_path, "ab") as log:
            log.write(f"\n== {time.strftime('%Y-%m-%dT%H:%M:%S')} {socket.gethostname()}: ".encode())
            log.write((" ".join(cmd) + "\n").encode())
            log.flush()
            where = cwd if cwd and os.path.isdir(cwd) else None
            env = thread_env(threads) if threads is not None else None
            proc = subprocess.run(  # the run shares the lock: it stays held should this process die first
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=where,
                env=env,
                pass_fds=(lock_fd,),
                check=False,
            )
    if proc.returncode != 0:
        lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-_TAIL:]
        raise SweepTaskFailed(
            f"{task.name}: exit {proc.returncode}; {log_path}: " + " | ".join(x.strip() for x in lines)
        )
    return {"seconds": time.perf_counter() - t0, "host": socket.gethostname()}


def run_in_process(task: SweepTask) -> None:
    """Run one task in this process the way ``envengineer run`` does (start, or resume its directory)."""
    from envengineer.loop.runner import run_experiment

    exp = task.experiment()
    with run_lock(task.run_dir, note=print):
        resume = (task.run_dir / "experiment.yaml").exists()
        run_experiment(exp, task.run_dir, resume=resume, progress=False)
        if task.report:
            try:
                from envengineer.loop.report import write_report

                write_report(task.run_dir)
            except ImportError as exc:
                print(
                    f"{task.name}: no report ({exc.name} missing; install the train extra)", file=sys.stderr
                )


# -- executors --------------------------------------------------------------------------------------------
class SequentialExecutor:
    """The tasks one after another in this process; a failed run is reported and the next one runs."""

    label = "sequential executor"
    start_seconds = 0.0

    def run(self, tasks: Sequence[SweepTask], monitor: Monitor) -> list[TaskResult]:
        results = []
        for task in tasks:
            monitor.started(task)
            t0 = time.perf_counter()
            try:
                run_in_process(task)
                result = TaskResult(task, True, time.perf_counter() - t0, host=socket.gethostname())
            except EnvEngineerError as exc:
                result = TaskResult(task, False, time.perf_counter() - t0, error=_one_line(str(exc)))
            monitor.finished(result)
            results.append(result)
        return results


def parse_lanes(text: str | None) -> int | None:
    """``--lanes N``: how many runs go at once (None: not given, one per core).

    >>> parse_lanes("2")
    2
    """
    if text is None:
        return None
    if not re.fullmatch(r"\s*\d{1,6}\s*", str(text)) or int(text) < 1:
        raise ConfigError(
            f"--lanes {text!r}: give a whole number of runs at once, 1 or more "
            "(1: one after another in this process; default: one per core)"
        )
    return int(text)


def lane_count(lanes: int | None, tasks: Sequence[SweepTask], cpus: int | None = None) -> int:
    """How many of ``tasks`` run at once: ``lanes`` when given, else one per core; at most one per task.

    Lanes are for CPU runs: they share no GPUs out, so by default a sweep with a GPU run goes one at a
    time, and ``--lanes`` above 1 with a GPU run is an error pointing to Ray. More lanes than usable cores
    (``cpus``, default :func:`usable_cpus`) run as asked, one thread each, with a warning that they
    oversubscribe the machine.

    >>> lane_count(None, [], cpus=2)
    1
    """
    gpu_run = next((t for t in tasks if t.num_gpus > 0), None)
    given = lanes
    if lanes is None:
        lanes = 1 if gpu_run is not None else cpus or usable_cpus()
    n = max(1, min(lanes, len(tasks)))
    if n > 1 and gpu_run is not None:
        raise ConfigError(
            f"--lanes {lanes}: {gpu_run.name} asks for {gpu_run.num_gpus:g} GPU(s) and lanes do not share "
            "GPUs out; use --executor ray (each run gets its own GPUs) or --lanes 1"
        )
    have = cpus or usable_cpus()
    if n > have:
        asked = f"--lanes {given}" + (f" ({n} lanes, one per run)" if given != n else "")
        log.warning(
            "%s on %d usable CPU(s): the lanes oversubscribe this machine, each gets 1 thread and they "
            "slow each other down; --lanes %d gives each lane a core",
            asked, have, have,
        )  # fmt: skip
    return n


class LanesExecutor:
    """Up to ``lanes`` tasks at once, each ``envengineer run`` in a subprocess with ``threads`` threads.

    Two torch processes that each take every core lose most of their time to each other, while processes
    of one thread each run side by side at nearly full speed. ``threads`` defaults to the cores split
    evenly over the lanes (one each when there are as many lanes as cores). Every run is the command a Ray
    task runs, under the run lock, writing ``RUN/sweep.log``; its directory equals a sequential run's.
    """

    def __init__(self, lanes: int, *, threads: int | None = None, poll_s: float = 1.0) -> None:
        self.lanes = lanes
        self.threads = threads if threads is not None else lane_threads(lanes, usable_cpus())
        self.poll_s = poll_s
        self.start_seconds = 0.0

    @property
    def label(self) -> str:
        return f"{self.lanes} lanes of {self.threads} thread(s)"

    def run(self, tasks: Sequence[SweepTask], monitor: Monitor) -> list[TaskResult]:
        waiting = list(tasks)
        running: dict[Future[dict[str, Any]], tuple[SweepTask, float]] = {}
        results: dict[str, TaskResult] = {}
        with ThreadPoolExecutor(max_workers=self.lanes) as pool:  # a thread waits on each run's process
            while waiting or running:
                while waiting and len(running) < self.lanes:
                    task = waiting.pop(0)
                    monitor.started(task)
                    future = pool.submit(run_in_subprocess, task, threads=self.threads)
                    running[future] = (task, time.perf_counter())
                done, _ = wait(running, timeout=self.poll_s, return_when=FIRST_COMPLETED)
                for future in done:
                    task, t0 = running.pop(future)
                    try:
                        info = future.result()
                        result = TaskResult(task, True, float(info["seconds"]), host=str(info["host"]))
                    except EnvEngineerError as exc:
                        result = TaskResult(task, False, time.perf_counter() - t0, error=_one_line(str(exc)))
                    results[task.name] = result
                    monitor.finished(result)
                monitor.poll()
        return [results[t.name] for t in tasks]


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray: pip install 'envengineer[ray]' (or use --executor sequential)"
        ) from None
    return ray


def ray_threads(task: SweepTask) -> int:
    """Threads of a Ray task's run: one per CPU it asks for (Ray's own rule for ``OMP_NUM_THREADS``)."""
    return max(1, int(task.num_cpus))


def _ray_task(task: SweepTask, cwd: str | None) -> dict[str, Any]:
    return run_in_subprocess(task, cwd, threads=ray_threads(task))


class RayExecutor:
    """Every task one Ray task with its run's CPUs and GPUs, on a local Ray or the cluster at ``address``.

    Without ``address`` (and without ``RAY_ADDRESS`` set) a local Ray instance starts inside this process
    with ``num_cpus`` CPUs (default: all of them) and stops at the end; ``start_seconds`` is what starting
    and connecting took. Each task's run gets one torch and BLAS thread per CPU it asks for.
    """

    label = "ray executor"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        retries: int = DEFAULT_RETRIES,
        poll_s: float = 2.0,
    ) -> None:
        self.ray = import_ray()  # a missing Ray is a one-line error before anything runs
        self.address = address
        self.num_cpus = num_cpus
        self.retries = retries
        self.poll_s = poll_s
        self.start_seconds = 0.0

    def run(self, tasks: Sequence[SweepTask], monitor: Monitor) -> list[TaskResult]:
        ray = self.ray
        t0 = time.perf_counter()
        local = self.address is None and not os.environ.get("RAY_ADDRESS")
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": "warning",
        }
        if local:  # "local": a new instance even where `ray start` left one running
            options["num_cpus"] = self.num_cpus or os.cpu_count() or 1
        ray.init(address="local" if local else self.address, **options)
        self.start_seconds = time.perf_counter() - t0
        try:
            check_fits(tasks, ray.cluster_resources(), local=local)
            return self._run(ray, tasks, monitor)
        finally:
            ray.shutdown()

    def _run(self, ray: Any, tasks: Sequence[SweepTask], monitor: Monitor) -> list[TaskResult]:
        remote = ray.remote(_ray_task)
        cwd = os.getcwd()
        pending: dict[Any, tuple[SweepTask, float]] = {}
        for task in tasks:
            ref = remote.options(
                num_cpus=task.num_cpus,
                num_gpus=task.num_gpus,
                max_retries=self.retries,
                retry_exceptions=True,
                name=task.name,
            ).remote(task, cwd)
            pending[ref] = (task, time.perf_counter())
            monitor.started(task)
        results: dict[str, TaskResult] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
            for ref in done:
                task, t0 = pending.pop(ref)
                try:
                    info = ray.get(ref)
                    result = TaskResult(task, True, float(info["seconds"]), host=str(info["host"]))
                except ray.exceptions.RayError as exc:
                    cause = getattr(exc, "cause", None) or exc
                    result = TaskResult(task, False, time.perf_counter() - t0, error=_one_line(str(cause)))
                results[task.name] = result
                monitor.finished(result)
            monitor.poll()
        return [results[t.name] for t in tasks]


def check_fits(tasks: Sequence[SweepTask], available: dict[str, float], *, local: bool) -> None:
    """A task asking for more CPUs or GPUs than the (local) cluster has would wait forever: an error.

    On an attached cluster an autoscaler may add nodes, so there it is only a warning.
    """
    for task in tasks:
        for what, need in (("CPU", task.num_cpus), ("GPU", task.num_gpus)):
            have = float(available.get(what, 0.0))
            if need > have:
                text = f"{task.name} asks for {need:g} {what}(s) and the Ray cluster has {have:g}; " + (
                    "run it where it fits (--address) or lower launch.processes" if local else "it waits"
                )
                if local:
                    raise ConfigError(text)
                print(f"warning: {text} for the autoscaler", file=sys.stderr)


def _one_line(text: str, limit: int = 600) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
