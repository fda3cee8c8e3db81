"""Sweeps on a local Ray: equal to the sequential executor, a killed run retried, a killed sweep rerun.

Each test starts a local Ray instance (about 5 s on 2 idle cores); the runs are the plumbing experiment
(a scripted policy, no model), sized to take a few seconds so that a kill lands mid-run. The deadlines
are generous: on cores crowded by other work a niced run can wait minutes for CPU time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from envengineer.cli.loop import override_name
from envengineer.loop.experiment import load_experiment, parse_override
from envengineer.loop.rundir import RunDir
from envengineer.sweep import RayExecutor, file_tasks, run_sweep

ROOT = Path(__file__).resolve().parents[1]
PLUMBING = ROOT / "experiments" / "cpu" / "plumbing.yaml"
SETS = ("samples_per_round=200",)
NAME = override_name(load_experiment(PLUMBING).name, dict(parse_override(s) for s in SETS))
#: Files whose content holds wall-clock times (or is the sweep's own bookkeeping).
TIMED = {"eval_info.json", "decision.json", "ledger.jsonl"}
#: Longest wait for a sweep or a stage (never reached on idle cores: the tests take about 30 s there).
DEADLINE_S = 900
SWEEP_FILES = {"sweep.log", "sweep.status.json", ".sweep.lock"}


def sweep_command(out: Path, *extra: str) -> list[str]:
    sets = [a for s in SETS for a in ("--set", s)]
    return [sys.executable, "-m", "envengineer.cli", "run", str(PLUMBING), "--seeds", "0-1",
            "--out", str(out), "--no-report", *sets, *extra]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The two seeds run by the sequential executor, in a fresh process as a user runs them."""
    out = tmp_path_factory.mktemp("sequential")
    cmd = sweep_command(out, "--lanes", "1")  # one run after another, in the sweep's own process
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0 and "(sequential executor)" in done.stdout, done.stderr[-2000:]
    tasks = file_tasks(PLUMBING, [0, 1], out, name=NAME, sets=SETS, report=False)
    assert all(t.finished() for t in tasks)
    return [t.run_dir for t in tasks]


def assert_same_run(a: Path, b: Path) -> None:
    """Equal ledger stages, the same files, equal content apart from wall-clock times."""
    stages = [[(e.round, e.stage, e.status) for e in RunDir(d).entries()] for d in (a, b)]
    assert stages[0] == stages[1] and stages[0][-1][1] == "benchmark"
    files = [{p.relative_to(d) for p in d.rglob("*") if p.is_file() and _kept(p)} for d in (a, b)]
    assert files[0] == files[1]
    for rel in sorted(files[0]):
        if rel.name not in TIMED:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert (a / "benchmark" / "scores.json").read_bytes() == (b / "benchmark" / "scores.json").read_bytes()


def _kept(p: Path) -> bool:
    """Not the sweep's bookkeeping, nor the temporary file of an atomic write its writer's kill left."""
    return p.name not in SWEEP_FILES and not (p.name.startswith(".") and p.name.endswith(".tmp"))


def run_processes(run_dir: Path) -> list[int]:
    """The ``envengineer run`` processes writing ``run_dir`` (from their command lines)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"envengineer.cli" in cmd and str(run_dir).encode() in cmd:
            pids.append(int(proc.name))
    return pids


def stages_done(run_dir: Path) -> int:
    return len(RunDir(run_dir).done()) if (run_dir / "ledger.jsonl").exists() else 0


def test_ray_sweep_equals_the_sequential_one_and_retries_a_killed_run(
    reference: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = file_tasks(PLUMBING, [0, 1], tmp_path, name=NAME, sets=SETS, report=False)
    victim = tasks[1].run_dir
    killed: list[int] = []

    def kill_mid_run() -> None:  # the run's process dies; Ray's retry resumes it from the ledger
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline and not killed:
            if 2 <= stages_done(victim) and not RunDir(victim).is_done(None, "benchmark"):
                for pid in run_processes(victim):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except ProcessLookupError:  # it ended meanwhile
                        pass
            time.sleep(0.02)

    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    executor = RayExecutor(num_cpus=2, poll_s=0.2)
    results = run_sweep(tasks, executor)
    killer.join(1)
    out = capsys.readouterr().out
    assert [r.ok for r in results] == [True, True], out
    assert killed, "the run ended before it could be killed"
    assert "(ray executor)" in out and "starting Ray:" in out and executor.start_seconds > 0
    log = (victim / "sweep.log").read_text()
    attempts = [line for line in log.splitlines() if line.startswith("== ")]
    assert len(attempts) >= 2, log[-2000:]  # (Ray's memory monitor on a crowded machine may add one)
    assert all("--resume" in a for a in attempts[1:])  # every retry continued the run
    assert "round 0/2 config" in log  # the run's own log lines are in its directory
    for ref, t in zip(reference, tasks, strict=True):
        assert_same_run(ref, t.run_dir)


def test_a_sweep_killed_with_sigkill_reruns_to_the_same_runs(reference: list[Path], tmp_path: Path) -> None:
    cmd = sweep_command(tmp_path, "--executor", "ray")
    dirs = [tmp_path / f"{NAME}-s{s}" for s in (0, 1)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline and sum(stages_done(d) for d in dirs) < 3:
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole sweep: driver, Ray and the runs
        proc.wait()
    assert not all(RunDir(d).is_done(None, "benchmark") for d in dirs)  # killed mid-way
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "| finished |" in again.stdout
    for ref, d in zip(reference, dirs, strict=True):
        assert_same_run(ref, d)
    tasks = file_tasks(PLUMBING, [0, 1], tmp_path, name=NAME, sets=SETS, report=False)
    assert all(t.finished() for t in tasks)  # the same command again would run nothing
