"""Kill-and-resume: a real ``envengineer run`` process is killed (SIGKILL) mid-round, then ``--resume``d.

The process runs the real CLI, runner, generator, evaluation (with its resumable responses file) and
engineer; only the trainer and the answering model are stand-ins, made slow so that the kill lands inside
a stage. After the resume the run directory must equal an uninterrupted run's: every stage recorded once,
no finished stage redone, no response lost or duplicated.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import ROUND_STAGES, RunDir, read_json, read_jsonl
from envengineer.mapf.instance import load_instances
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")

DRIVER = r'''
"""`envengineer` with a slow stand-in trainer and answering model (test driver)."""
import json
import os
import sys
import time
from pathlib import Path

import envengineer.loop.components as components_module
from envengineer.cli import main


def slow() -> float:
    return float(os.environ.get("LOOP_TEST_SLOW", "0"))


def log(**kw):
    path = os.environ.get("LOOP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(kw) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


class SlowGreedy:
    name = "slow-greedy"

    def __init__(self, instances):
        from envengineer.models import load_backend

        self.inner = load_backend("scripted", "greedy", instances=instances)

    def generate(self, conversations, params):
        time.sleep(slow())
        return self.inner.generate(conversations, params)


def trainer(model, instances, *, out_dir, preset, epochs, seed, max_steps):
    log(event="train_start", model=model, out=str(out_dir))
    time.sleep(5 * slow())
    checkpoint = Path(out_dir) / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "weights.txt").write_text(f"trained from {model} on {len(instances)} instances\n")
    log(event="train_end", out=str(out_dir))
    return {"checkpoint": str(checkpoint), "steps": 2, "seconds": 5 * slow(), "metrics": {"reward": 0.5}}


def evaluator(model, instances, *, out_dir, experiment, seed, progress):
    from envengineer.evaluation import evaluate

    log(event="eval_start", model=model, out=str(out_dir))
    report = evaluate(SlowGreedy(instances), instances, out_dir=out_dir, batch_size=2, progress=False)
    log(event="eval_end", out=str(out_dir))
    return report


_real = components_module.default_components


def components():
    c = _real()
    c.trainer = trainer
    c.evaluator = evaluator
    return c


components_module.default_components = components

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("resume")
    write_small_sets(d, 21)
    exp = Experiment.model_validate(
        {
            "name": "t-resume",
            "model": "stand-in-model",
            "rounds": 3,
            "samples_per_round": 6,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
            "evaluation": {"batch_size": 2, "benchmark_path": str(d / "benchmark.jsonl")},
            "engineer": {"kind": "threshold"},
        }
    )
    (d / "exp.yaml").write_text(exp.to_yaml())
    (d / "driver.py").write_text(DRIVER)
    return {
        "dir": d,
        "exp": d / "exp.yaml",
        "driver": d / "driver.py",
        "validation": d / "validation.jsonl",
        "benchmark": d / "benchmark.jsonl",
    }


def _prepare(run: Path, setup: dict[str, Path]) -> Path:
    run.mkdir(parents=True)
    (run / "validation_set.jsonl").write_bytes(setup["validation"].read_bytes())
    return run


def _env(log: Path, slow: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"LOOP_TEST_LOG": str(log), "LOOP_TEST_SLOW": str(slow), "PYTHONUNBUFFERED": "1"})
    return env


@pytest.fixture(scope="module")
def reference(setup: dict[str, Path]) -> Path:
    """The same run without interruption, in this process (no sleeps)."""
    import envengineer.loop.components as components_module

    real = components_module.default_components
    spec = importlib.util.spec_from_file_location("loop_test_driver", setup["driver"])
    driver = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    try:
        spec.loader.exec_module(driver)  # the driver swaps in its stand-ins module-wide ...
        from envengineer.loop.experiment import load_experiment
        from envengineer.loop.runner import run_experiment

        run = _prepare(setup["dir"] / "reference", setup)
        run_experiment(load_experiment(setup["exp"]), run, components=driver.components())
    finally:  # ... which must not answer for the tests that run after this file in the same process
        components_module.default_components = real
    return run


def _wait(cond: Callable[[], bool], proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the run ended (rc {proc.returncode}) before the kill point:\n{out[-3000:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("the kill point was never reached")
        time.sleep(0.02)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _events(log: Path) -> list[dict[str, Any]]:
    return read_jsonl(log) if log.exists() else []


def _started(log: Path, event: str, folder: str) -> bool:
    return any(e["event"] == event and e["out"].endswith(folder) for e in _events(log))


KILL_POINTS: dict[str, Callable[[Path, Path], bool]] = {
    # mid-validation of round 1: some responses written, not all
    "validation": lambda run, log: _lines(run / "round_01" / "validation" / "responses.jsonl") >= 2,
    # mid-training of round 1
    "train": lambda run, log: _started(log, "train_start", "round_01/train"),
    # mid-benchmark, after the last round
    "benchmark": lambda run, log: _lines(run / "benchmark" / "responses.jsonl") >= 2,
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_and_resume(point: str, tmp_path: Path, setup: dict[str, Path], reference: Path) -> None:
    run = _prepare(tmp_path / "run", setup)
    log = tmp_path / "events.jsonl"
    cmd = [
        sys.executable,
        str(setup["driver"]),
        "run",
        str(setup["exp"]),
        "--out",
        str(run),
        "--no-progress",
        "--no-report",
    ]
    proc = subprocess.Popen(
        cmd, env=_env(log, 0.15), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _wait(lambda: KILL_POINTS[point](run, log), proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    rd = RunDir(run)
    assert not rd.is_done(None, "benchmark")
    before = {(e.round, e.stage) for e in rd.entries()}
    events_before = len(_events(log))

    resumed = subprocess.run(
        [sys.executable, str(setup["driver"]), "run", "--resume", str(run), "--no-progress", "--no-report"],
        env=_env(log, 0.0),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    # every stage exactly once, in order; the stages finished before the kill are still the first lines
    keys = [(e.round, e.stage) for e in rd.entries()]
    expected = [(r, s) for r in range(3) for s in ROUND_STAGES] + [(None, "benchmark")]
    assert keys == expected
    assert set(keys[: len(before)]) == before

    # nothing finished was redone: the resumed process started only stages that had not finished
    after = _events(log)[events_before:]
    for e in after:
        if e["event"].endswith("_start"):
            folder = Path(e["out"]).relative_to(run)
            r = int(folder.parts[0].split("_")[1]) if folder.parts[0].startswith("round_") else None
            stage = {"train": "train", "validation": "validation", "benchmark": "benchmark"}[folder.parts[-1]]
            assert (r, stage) not in before, f"{folder} was finished before the kill but ran again"
    trains = [e for e in _events(log) if e["event"] == "train_end"]
    assert len(trains) == 3

    # the interrupted evaluation resumed its responses file: no answer lost, none duplicated, fewer asked
    val_n = len(load_instances(setup["validation"]))
    for r in range(3):
        rows = read_jsonl(run / f"round_{r:02d}" / "validation" / "responses.jsonl")
        assert len(rows) == len({row["id"] for row in rows}) == val_n
    bench_rows = read_jsonl(run / "benchmark" / "responses.jsonl")
    assert (
        len(bench_rows) == len({row["id"] for row in bench_rows}) == len(load_instances(setup["benchmark"]))
    )
    if point in ("validation", "benchmark"):
        info_dir = run / ("round_01/validation" if point == "validation" else "benchmark")
        info = read_json(info_dir / "eval_info.json")
        assert 0 < info["asked_this_run"] < info["instances"]

    # and the result equals the uninterrupted run's, file by file
    for rel in [
        f"round_{r:02d}/{f}"
        for r in range(3)
        for f in (
            "config.applied.yaml",
            "dataset/manifest.jsonl",
            "validation/scores.json",
            "projection.json",
        )
    ] + ["benchmark/scores.json", "benchmark/table.md"]:
        assert (run / rel).read_text().replace(str(run), "RUN") == (reference / rel).read_text().replace(
            str(reference), "RUN"
        ), rel
    # the checkpoint chain is the same: each round trained from the previous round's checkpoint
    for r in (1, 2):
        m = read_json(run / f"round_{r:02d}" / "train" / "metrics.json")
        assert m["model_in"] == str(run / f"round_{r - 1:02d}" / "train" / "checkpoint")


def test_torn_last_ledger_line_is_ignored_and_moved_aside(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.record(0, "config", seconds=1.0)
    with open(rd.ledger_path, "a") as fh:
        fh.write('{"round": 0, "stage": "da')  # a writer killed mid-line
    assert [e.stage for e in rd.entries()] == ["config"]
    rd.record(0, "data", seconds=1.0)
    assert [e.stage for e in rd.entries()] == ["config", "data"]
    lines = rd.ledger_path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["stage"] == "data"
    assert (tmp_path / "ledger.torn").read_text() == '{"round": 0, "stage": "da\n'
    with pytest.raises(Exception, match="already recorded"):
        rd.record(0, "data", seconds=1.0)


def test_atomic_write_leaves_old_file_on_failure(tmp_path: Path) -> None:
    from envengineer.loop.rundir import atomic_write_json

    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        atomic_write_json(path, {"a": Boom()})
    assert read_json(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
