"""Sweeps without Ray: seeds, tasks and their resources, duplicates, the run lock, the sequential executor
and its lanes.

The Ray executor's tests are in test_sweep_ray.py (skipped where Ray is not installed).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.loop.rundir import RunDir
from envengineer.sweep import (
    LanesExecutor,
    SequentialExecutor,
    file_tasks,
    make_executor,
    parse_seeds,
    run_sweep,
    suite_tasks,
)
from envengineer.sweep.executors import (
    THREAD_VARIABLES,
    SweepTaskFailed,
    TaskResult,
    import_ray,
    lane_count,
    ray_threads,
    run_command,
    run_lock,
)
from envengineer.sweep.tasks import check_existing, check_unique, make_task, resources

ROOT = Path(__file__).resolve().parents[1]
PLUMBING = ROOT / "experiments" / "cpu" / "plumbing.yaml"
SMALL = ("rounds=2", "samples_per_round=8")
#: Files of a run directory that hold wall-clock times, and the sweep's own bookkeeping.
TIMED = {"eval_info.json", "decision.json", "ledger.jsonl"}
SWEEP_FILES = {"sweep.log", "sweep.status.json", ".sweep.lock"}


def test_parse_seeds_reads_ranges_and_lists_in_order() -> None:
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds(" 3 , 0-1 ") == [3, 0, 1]
    assert parse_seeds("7") == [7]
    assert parse_seeds("4294967294-4294967295") == [4294967294, 4294967295]  # the largest seeds


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("4-0", "backwards"),
        ("0,0", "twice"),
        ("0-2,1", "twice"),
        ("a", "not a seed"),
        ("-1", "not a seed"),
        ("", "not a seed"),
        ("0-5000", "more than"),
        ("0-4294967296", r"seed 4294967296 is too large; seeds lie in \[0, 4294967295\]"),
        ("99999999999", "too large"),
    ],
)
def test_parse_seeds_refuses_bad_text(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_seeds(text)


def test_resources_follow_the_launch_section() -> None:
    from envengineer.loop.experiment import load_experiment

    gpu = ROOT / "experiments" / "gpu" / "main-self.yaml"
    assert resources(load_experiment(PLUMBING)) == (1.0, 0.0)
    assert resources(load_experiment(ROOT / "experiments" / "cpu" / "main-self.yaml")) == (1.0, 0.0)
    assert resources(load_experiment(gpu)) == (1.0, 1.0)
    assert resources(load_experiment(gpu, {"launch.processes": 8})) == (8.0, 8.0)


def test_file_tasks_name_runs_as_run_seed_does(tmp_path: Path) -> None:
    tasks = file_tasks(PLUMBING, [0, 3], tmp_path, name="cpu-plumbing", sets=SMALL)
    assert [t.name for t in tasks] == ["cpu-plumbing-s0", "cpu-plumbing-s3"]
    assert [t.run_dir for t in tasks] == [tmp_path / "cpu-plumbing-s0", tmp_path / "cpu-plumbing-s3"]
    exp = tasks[1].experiment()
    assert exp.name == "cpu-plumbing-s3" and exp.rounds == 2
    assert (exp.seeds.data, exp.seeds.training, exp.seeds.evaluation, exp.seeds.config) == (3, 3, 3, 0)


def test_suite_tasks_cross_runs_with_seeds_and_keep_aliases(tmp_path: Path) -> None:
    from envengineer.loop.suite import suite_files, suite_plan

    runs = suite_plan(suite_files(ROOT / "experiments" / "gpu"), only=["main-self", "main-fixed"])
    tasks = suite_tasks(runs, [0, 1], tmp_path)
    by_name = {t.name: t for t in tasks}
    assert [t.name for t in tasks] == [f"{r.name}-s{s}" for r in runs for s in (0, 1)]  # seeds in a row
    assert sorted(by_name) == [f"gpu-main-{a}-s{s}" for a in ("fixed", "self") for s in (0, 1)]
    assert "gpu-ablation-v6-s1" in by_name["gpu-main-self-s1"].aliases
    assert all(t.num_gpus == 1.0 for t in tasks)
    assert sorted(t.name for t in suite_tasks(runs, None, tmp_path)) == ["gpu-main-fixed", "gpu-main-self"]


def test_two_tasks_of_one_run_directory_are_refused(tmp_path: Path) -> None:
    a = make_task(PLUMBING, tmp_path / "x", name="a", seed=0, sets=SMALL)
    b = make_task(PLUMBING, tmp_path / "sub" / ".." / "x", name="b", seed=1, sets=SMALL)
    with pytest.raises(ConfigError, match="two runs of the sweep would write"):
        check_unique([a, b])
    check_unique([a, make_task(PLUMBING, tmp_path / "y", name="b", seed=1, sets=SMALL)])


def test_a_directory_holding_another_run_is_refused(tmp_path: Path) -> None:
    task = make_task(PLUMBING, tmp_path / "r", name="r", seed=0, sets=SMALL)
    check_existing(task)  # nothing there yet
    other = make_task(PLUMBING, tmp_path / "r", name="r", seed=1, sets=SMALL)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "experiment.yaml").write_text(other.experiment().to_yaml())
    with pytest.raises(ConfigError, match="holds another run"):
        check_existing(task)
    check_existing(other)


def test_run_command_starts_then_resumes(tmp_path: Path) -> None:
    task = make_task(PLUMBING, tmp_path / "r", name="cpu-plumbing-s2", seed=2, sets=SMALL, report=False)
    cmd = run_command(task)
    assert cmd[:4] == [sys.executable, "-m", "envengineer.cli", "run"]
    assert cmd[4] == str(PLUMBING) and "--seed" in cmd and cmd[cmd.index("--seed") + 1] == "2"
    assert "name=cpu-plumbing-s2" in cmd and "--no-report" in cmd
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "experiment.yaml").write_text(task.experiment().to_yaml())
    assert run_command(task)[4:6] == ["--resume", str(tmp_path / "r")]


def test_the_run_lock_keeps_a_second_writer_waiting(tmp_path: Path) -> None:
    got = threading.Event()

    def second() -> None:
        with run_lock(tmp_path, poll_s=0.02):
            got.set()

    with run_lock(tmp_path):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        assert not got.is_set()  # held: the second waits
    t.join(5)
    assert got.is_set()
    assert json.loads((tmp_path / "sweep.status.json").read_text())["attempt"] == 2


def test_a_run_subprocess_keeps_the_lock_after_its_parent_lets_go(tmp_path: Path) -> None:
    import fcntl
    import os
    import subprocess

    with run_lock(tmp_path) as fd:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=(fd,))
    try:  # the parent closed its descriptor; the child's copy still holds the lock
        probe = os.open(tmp_path / ".sweep.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        child.kill()
        child.wait()
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the child is gone
    os.close(probe)


def test_sequential_sweep_runs_seeds_then_skips_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = file_tasks(PLUMBING, [0, 1], tmp_path, name="p", sets=SMALL, report=False)
    results = run_sweep(tasks, SequentialExecutor(), compare_out=tmp_path / "compare")
    assert [r.ok for r in results] == [True, True]
    for t in tasks:
        assert RunDir(t.run_dir).is_done(None, "benchmark")
    out = capsys.readouterr().out
    assert "2 to run (sequential executor)" in out and "| p-s1 | finished |" in out
    assert "### benchmark, valid %" in out  # the arm of the two seeds, mean ± std
    assert "`p` | 2 |" in (tmp_path / "compare" / "compare.md").read_text()
    before = (tasks[0].run_dir / "ledger.jsonl").read_text()
    run_sweep(tasks, SequentialExecutor())
    assert "2 finished earlier, 0 to run" in capsys.readouterr().out
    assert (tasks[0].run_dir / "ledger.jsonl").read_text() == before


def test_a_failed_run_does_not_stop_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = make_task(
        PLUMBING,
        tmp_path / "bad",
        name="bad",
        seed=0,
        sets=(*SMALL, "evaluation.benchmark_path=/nonexistent/benchmark.jsonl"),
    )
    good = make_task(PLUMBING, tmp_path / "good", name="good", seed=0, sets=SMALL, report=False)
    with pytest.raises(SweepTaskFailed, match="1 of 2 runs failed"):
        run_sweep([bad, good], SequentialExecutor())
    assert RunDir(tmp_path / "good").is_done(None, "benchmark")
    assert "| bad | failed |" in capsys.readouterr().out


def test_cli_run_seeds_dry_run_lists_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = ROOT / "experiments" / "gpu" / "main-fixed.yaml"
    argv = ["run", str(gpu), "--seeds", "0-2", "--out", str(tmp_path), "--set", "launch.processes=2"]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "| gpu-main-fixed-processes-2-s2 | 2 | 2 | 2 | new |" in out
    assert "3 run(s); all at once they would ask for 6 CPU(s) and 6 GPU(s)" in out
    assert not any(tmp_path.iterdir())


def test_cli_suite_seeds_runs_and_links_aliases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "exps"
    folder.mkdir()
    (folder / "main-a.yaml").write_text(PLUMBING.read_text().replace("cpu-plumbing", "main-a"))
    (folder / "same-a.yaml").write_text(PLUMBING.read_text().replace("cpu-plumbing", "same-a"))
    out = tmp_path / "runs"
    argv = ["suite", str(folder), "--seeds", "0-1", "--out", str(out), "--set", "rounds=1"]
    assert main(argv) == 0
    assert RunDir(out / "main-a-s1").is_done(None, "benchmark")
    assert (out / "same-a-s1").is_symlink() and (out / "same-a-s1").readlink() == Path("main-a-s1")
    record = json.loads((out / "suite.json").read_text())
    assert [r["run"] for r in record] == ["main-a-s0", "main-a-s1"] and record[0]["aliases"] == ["same-a-s0"]
    assert (out / "compare" / "compare.md").exists() and (out / "main-a-s0" / "report.md").exists()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--seeds", "0-1", "--seed", "2"], "drop --resume"),
        (["--seeds", "1-0"], "backwards"),
        (["--address", "ray://x:10001"], "goes with --executor ray"),
        (["--seeds", "0-1", "--lanes", "0"], "1 or more"),
        (["--seeds", "0-1", "--lanes", "-2"], "1 or more"),
        (["--seeds", "0-1", "--lanes", "two"], "1 or more"),
        (["--seeds", "0-1", "--lanes", "1.5"], "1 or more"),
        (["--seeds", "0-1", "--lanes", "2", "--executor", "ray"], "goes with the sequential executor"),
        (["--lanes", "2", "--resume", "runs/x"], "drop --resume"),
    ],
)
def test_cli_sweep_option_errors_are_one_line(
    extra: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(PLUMBING), "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_without_ray_the_ray_executor_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    with pytest.raises(ConfigError, match=r"pip install 'envengineer\[ray\]'"):
        import_ray()
    assert main(["run", str(PLUMBING), "--seeds", "0-1", "--out", str(tmp_path), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'envengineer[ray]'" in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing ran


# -- lanes --------------------------------------------------------------------------------------------------
class Quiet:
    """A monitor that prints nothing."""

    def started(self, task: object) -> None: ...
    def poll(self) -> None: ...
    def finished(self, result: TaskResult) -> None: ...


def test_a_lane_process_gets_its_threads_whatever_the_parent_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    for name in THREAD_VARIABLES:
        monkeypatch.setenv(name, "3")  # the parent's setting must not leak into a lane
    probe = """
import json, os, sys, torch
seen = {name: os.environ[name] for name in sys.argv[2:]}
json.dump({**seen, "torch": torch.get_num_threads()}, open(sys.argv[1], "w"))
"""
    monkeypatch.setattr(  # the lane machinery as it is, with a probe for the run's command
        "envengineer.sweep.executors.run_command",
        lambda task: [sys.executable, "-c", probe, str(task.run_dir / "threads.json"), *THREAD_VARIABLES],
    )
    tasks = [make_task(PLUMBING, tmp_path / n, name=n, seed=s, sets=SMALL) for s, n in enumerate("ab")]
    results = LanesExecutor(2, threads=1, poll_s=0.05).run(tasks, Quiet())
    assert [r.ok for r in results] == [True, True], [r.error for r in results]
    for t in tasks:
        seen = json.loads((t.run_dir / "threads.json").read_text())
        assert seen == {**dict.fromkeys(THREAD_VARIABLES, "1"), "torch": 1}
        assert (t.run_dir / "sweep.log").exists()  # the lane's output went to the run's log


def test_lanes_default_to_one_per_core_for_cpu_runs_and_refuse_gpu_runs(tmp_path: Path) -> None:
    cpu = [make_task(PLUMBING, tmp_path / f"c{s}", name=f"c{s}", seed=s, sets=SMALL) for s in range(3)]
    gpu = make_task(ROOT / "experiments" / "gpu" / "main-fixed.yaml", tmp_path / "g", name="g", seed=0)
    assert lane_count(None, cpu, cpus=2) == 2
    assert lane_count(None, cpu, cpus=8) == 3  # no more lanes than runs
    assert lane_count(None, cpu[:1], cpus=2) == 1  # a lone run keeps every core
    assert lane_count(1, cpu, cpus=2) == 1 and lane_count(5, cpu, cpus=2) == 3
    assert lane_count(None, [*cpu, gpu], cpus=2) == 1  # lanes share no GPUs out
    with pytest.raises(ConfigError, match="--executor ray"):
        lane_count(2, [*cpu, gpu], cpus=2)
    assert isinstance(make_executor("sequential", lanes="1", tasks=cpu), SequentialExecutor)
    lanes = make_executor("sequential", lanes="2", tasks=cpu)
    assert isinstance(lanes, LanesExecutor) and lanes.lanes == 2


def test_more_lanes_than_cpus_run_as_asked_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cpu = [make_task(PLUMBING, tmp_path / f"c{s}", name=f"c{s}", seed=s, sets=SMALL) for s in range(3)]
    monkeypatch.setattr("envengineer.sweep.executors.usable_cpus", lambda: 2)
    caplog.set_level("WARNING", logger="envengineer.sweep.executors")
    lanes = make_executor("sequential", lanes="1000", tasks=cpu)
    assert isinstance(lanes, LanesExecutor) and (lanes.lanes, lanes.threads) == (3, 1)  # one lane per run
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("--lanes 1000 (3 lanes, one per run) on 2 usable CPU(s): the lanes oversub")
    assert "each gets 1 thread" in warning and warning.endswith("--lanes 2 gives each lane a core")
    caplog.clear()
    assert make_executor("sequential", lanes="3", tasks=cpu).lanes == 3
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("--lanes 3 on 2 usable CPU(s)")
    caplog.clear()
    for given in ("2", "1", None):  # as many lanes as cores or fewer, or the default: no warning
        make_executor("sequential", lanes=given, tasks=cpu)
    monkeypatch.setattr("envengineer.sweep.executors.usable_cpus", lambda: 8)
    make_executor("sequential", lanes="1000", tasks=cpu)  # 3 lanes on 8 cores
    assert caplog.records == []


def test_a_ray_task_runs_with_one_thread_per_cpu_it_asks_for(tmp_path: Path) -> None:
    gpu = ROOT / "experiments" / "gpu" / "main-fixed.yaml"
    one = make_task(PLUMBING, tmp_path / "c", name="c", seed=0, sets=SMALL)
    four = make_task(gpu, tmp_path / "g", name="g", seed=0, sets=("launch.processes=4",))
    assert (ray_threads(one), ray_threads(four)) == (1, 4)


def test_two_lanes_write_the_run_directories_a_sequential_sweep_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sequential = file_tasks(PLUMBING, [0, 1], tmp_path / "seq", name="p", sets=SMALL, report=False)
    lanes = file_tasks(PLUMBING, [0, 1], tmp_path / "lanes", name="p", sets=SMALL, report=False)
    run_sweep(sequential, SequentialExecutor())
    results = run_sweep(lanes, LanesExecutor(2, threads=1, poll_s=0.05))
    assert [r.ok for r in results] == [True, True]
    assert "2 to run (2 lanes of 1 thread(s))" in capsys.readouterr().out
    for a, b in zip(sequential, lanes, strict=True):
        assert_same_run(a.run_dir, b.run_dir)


def assert_same_run(a: Path, b: Path) -> None:
    """Equal ledgers (stages and the content hashes they record), equal files apart from wall-clock times."""
    ledgers = [[(e.round, e.stage, e.status, e.hashes) for e in RunDir(d).entries()] for d in (a, b)]
    assert ledgers[0] == ledgers[1] and ledgers[0][-1][1] == "benchmark"
    files = [
        {p.relative_to(d) for p in d.rglob("*") if p.is_file() and p.name not in SWEEP_FILES} for d in (a, b)
    ]
    assert files[0] == files[1]
    for rel in sorted(files[0]):
        if rel.name not in TIMED:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
