"""Every malformed input a command reads ends in one line on stderr and a non-zero exit, never a traceback.

Each input class (not UTF-8, nested too deeply, numbers too large, NaN/inf, truncated or fake ``.gz``, a
directory where a file belongs, a file that cannot be written, negative seeds and budgets, a 5,000-wide
board) is fed to every command that reads that kind of file, in-process through ``envengineer.cli.main``.
"""

from __future__ import annotations

import doctest
import gzip
import json
import time
from pathlib import Path

import pytest

from envengineer.cli import describe_error, main

GOOD = {"id": "a", "grid": ["...", "...", "..."], "starts": [[0, 0], [0, 2]], "goals": [[0, 2], [0, 0]]}
SOLVED = {**GOOD, "optimal_soc": 6, "optimal_makespan": 4, "shortest_sum": 4}

#: Bad instance files (also used as bad responses files where the class applies).
BAD_JSONL: dict[str, bytes] = {
    "not-utf8.jsonl": b'\xff\xfe{"id": "a"}\n',
    "deep.jsonl": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "huge-int.jsonl": json.dumps({**GOOD, "starts": [[10**400, 0], [0, 2]]}).encode() + b"\n",
    "long-digits.jsonl": b'{"id": "a", "grid": ["..."], "starts": [[' + b"9" * 5000 + b", 0]]}\n",
    "inf.jsonl": json.dumps(GOOD).replace("[0, 0]", "[Infinity, 0]", 1).encode() + b"\n",
    "nan.jsonl": json.dumps(GOOD).replace("[0, 0]", "[NaN, 0]", 1).encode() + b"\n",
    "fake.jsonl.gz": b"this is not gzip data",
    "truncated.jsonl.gz": gzip.compress((json.dumps(GOOD) + "\n").encode() * 50)[:40],
    "not-json.jsonl": b"{oops\n",
}
#: Bad YAML files (round configurations, presets, experiment files).
BAD_YAML: dict[str, bytes] = {
    "not-utf8.yaml": b"\xff\xfenum_samples: 3\n",
    "deep.yaml": b"[" * 5000 + b"]" * 5000 + b"\n",
    "not-yaml.yaml": b"a: [1, 2\n",
    "huge.yaml": b"name: x\nnum_samples: " + b"9" * 5000 + b"\n",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str) -> None:
    """Non-zero, no traceback, and exactly one message line (progress bars aside)."""
    assert code != 0
    assert "Traceback" not in err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.strip() and "|" not in x]
    assert len(lines) == 1 and lines[0].startswith("envengineer: error: "), err[-500:]


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name, data in {**BAD_JSONL, **BAD_YAML}.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "adir").mkdir()
    (tmp_path / "good.jsonl").write_text(json.dumps(SOLVED) + "\n")
    (tmp_path / "resp.jsonl").write_text(json.dumps({"id": "a", "response": "x"}) + "\n")
    (tmp_path / "round.yaml").write_text(
        "num_samples: 2\nsizes: {3: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0.5}}\n"
    )
    return tmp_path


INSTANCE_COMMANDS = [
    ["solve", "{f}", "-o", "out.jsonl"],
    ["show", "{f}"],
    ["play", "{f}", "-o", "out.jsonl"],
    ["score", "{f}", "resp.jsonl"],
    ["eval", "--backend", "scripted", "--set", "{f}", "--out", "ev"],
]


@pytest.mark.parametrize("name", [*BAD_JSONL, "adir", "missing.jsonl"])
@pytest.mark.parametrize("command", INSTANCE_COMMANDS, ids=lambda c: c[0])
def test_bad_instance_files(files: Path, capsys, command: list[str], name: str) -> None:
    code, err = run(capsys, *(a.format(f=name) for a in command))
    assert_one_line(code, err)
    assert code == 2 and name in err


@pytest.mark.parametrize(
    "name", [n for n in BAD_JSONL if n.split(".")[0] not in ("huge-int", "inf", "nan")] + ["adir", "missing"]
)
def test_bad_responses_files(files: Path, capsys, name: str) -> None:
    code, err = run(capsys, "score", "good.jsonl", name)
    assert_one_line(code, err)
    assert code == 2


YAML_COMMANDS = [
    ["generate", "--config", "{f}", "-o", "out.jsonl"],
    ["train", "--round", "{f}", "--out", "tr"],
    ["sft", "--round", "{f}", "--out", "tr"],
    ["train", "--round", "round.yaml", "--grpo", "{f}", "--out", "tr"],
    ["sft", "--round", "round.yaml", "--preset", "{f}", "--out", "tr"],
    ["run", "{f}", "--dry-run"],
    ["run", "{f}", "--out", "rundir"],
]


@pytest.mark.parametrize("name", [*BAD_YAML, "adir", "missing.yaml"])
@pytest.mark.parametrize("command", YAML_COMMANDS, ids=lambda c: "-".join(c[:3:2]))
def test_bad_yaml_files(files: Path, capsys, command: list[str], name: str) -> None:
    code, err = run(capsys, *(a.format(f=name) for a in command))
    assert_one_line(code, err)
    assert code == 2 and name in err


@pytest.mark.parametrize(
    "body",
    [
        "validation: {per_cell: many}",
        "validation: {per_cell: -3}",
        "validation: {agents: three}",
        "validation: {max_size: .inf}",
        "epochs_per_round: .nan",
        "samples_per_round: .inf",
        "seeds: {data: -1}",
        "evaluation: {benchmark_path: adir}",
        "evaluation: {gpu_memory_utilization: 1.5}",
        "evaluation: {batch_size: [1]}",
    ],
)
def test_experiment_files_with_bad_settings(files: Path, capsys, body: str) -> None:
    exp = files / "exp.yaml"
    exp.write_text("name: x\npolicy: scripted:optimal\nrounds: 0\nengineer: {kind: fixed}\n" + body + "\n")
    runs = [["run", str(exp), "--out", str(files / "r")]]
    if "benchmark_path" not in body:  # a dry run prints the plan; the run's preflight refuses the directory
        runs.append(["run", str(exp), "--dry-run"])
    for argv in runs:
        code, err = run(capsys, *argv)
        assert_one_line(code, err)
        assert code == 2


def test_run_dirs_that_are_no_runs(files: Path, capsys) -> None:
    no_runs = (["run", "--resume", "adir"], ["report", "adir"], ["compare", "adir"], ["run", "--resume", "x"])
    for argv in no_runs:
        code, err = run(capsys, *argv)
        assert_one_line(code, err)
    (files / "broken").mkdir()
    (files / "broken" / "experiment.yaml").mkdir()  # a directory where the file belongs
    code, err = run(capsys, "run", "--resume", "broken")
    assert_one_line(code, err)


def test_outputs_that_cannot_be_written(files: Path, capsys) -> None:
    for argv in (
        ["generate", "--size", "3", "-n", "2", "-o", "adir"],
        ["solve", "good.jsonl", "-o", "adir"],
        ["play", "good.jsonl", "-o", "adir"],
        ["score", "good.jsonl", "resp.jsonl", "--json", "adir"],
        ["generate", "--size", "3", "-n", "2", "-o", "good.jsonl/x.jsonl"],
    ):
        code, err = run(capsys, *argv)
        assert_one_line(code, err)
        assert code == 2
    assert not list(files.glob("*.tmp")), "a failed write left its temporary file"  # issue 12 item 9


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--size", "3", "-n", "2", "--seed", "-5", "-o", "o.jsonl"],
        ["generate", "--size", "3", "-n", "2", "--seed", "9" * 40, "-o", "o.jsonl"],
        ["play", "good.jsonl", "--seed", "-1", "-o", "o.jsonl"],
        ["solve", "good.jsonl", "-o", "o.jsonl", "--node-budget", "-3"],
        ["solve", "good.jsonl", "-o", "o.jsonl", "--node-budget", "0"],
        ["solve", "good.jsonl", "-o", "o.jsonl", "--time-limit", "nan"],
        ["solve", "good.jsonl", "-o", "o.jsonl", "--time-limit", "-1"],
        ["train", "--round", "round.yaml", "--out", "t", "--seed", "-1"],
        ["sft", "--round", "round.yaml", "--out", "t", "--data-seed", "-2"],
        ["eval", "--backend", "scripted", "--seed", "-1"],
        ["benchmark", "validation", "-o", "v.jsonl", "--seed", "-1"],
    ],
    ids=lambda a: " ".join(a[:1] + a[-2:]),
)
def test_negative_seeds_and_budgets_are_refused_by_the_parser(files: Path, capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "error: argument" in err and "Traceback" not in err


def test_a_5000_wide_board_is_refused_before_solving(files: Path, capsys) -> None:
    big = {"id": "b", "grid": ["." * 5000] * 5000, "starts": [[0, 0], [0, 2]], "goals": [[4999, 9], [0, 0]]}
    (files / "big.jsonl").write_text(json.dumps(big) + "\n")
    (files / "bigcfg.yaml").write_text(
        "num_samples: 2\nsizes: {5000: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0}}\n"
    )
    t0 = time.perf_counter()
    code, err = run(capsys, "solve", "big.jsonl", "-o", "o.jsonl")
    assert_one_line(code, err)
    assert "larger than the solver takes" in err
    code, err = run(capsys, "generate", "--config", "bigcfg.yaml", "-o", "o.jsonl")
    assert_one_line(code, err)
    assert "larger than the solver takes" in err
    assert time.perf_counter() - t0 < 30


def test_too_many_agents_get_the_hint_that_fits(files: Path, capsys) -> None:
    (files / "crowd.yaml").write_text(
        "num_samples: 2\nnum_agents: 16\nsizes: {3: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0}}\n"
    )
    for argv in (
        ["generate", "--config", "crowd.yaml", "-o", "o.jsonl"],
        ["generate", "--size", "3", "--agents", "16", "-o", "o.jsonl"],
    ):
        code, err = run(capsys, *argv)
        assert_one_line(code, err)
        assert "at most 4 agents on 3x3 or a grid of at least 6x6" in err
        assert "wait_ratio" not in err  # the old hint blamed the wait ratio


def test_debug_shows_the_traceback(files: Path, capsys) -> None:
    with pytest.raises(Exception, match="not UTF-8"):
        main(["show", "not-utf8.jsonl", "--debug"])


def test_unforeseen_errors_are_one_line_too() -> None:
    message, code = describe_error(KeyError("boom"))
    assert code == 1 and "internal error KeyError" in message and "--debug" in message
    assert describe_error(RecursionError())[1] == 2
    assert describe_error(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))[1] == 2


def test_solver_limits_and_time_limit() -> None:
    from envengineer.errors import ConfigError, InstanceFormatError, SolverBudgetExceeded
    from envengineer.mapf import generator, solver

    with pytest.raises(ConfigError):
        solver.solve(["...", "...", "..."], [(0, 0)], [(2, 2)], node_budget=-1)
    with pytest.raises(ConfigError):
        solver.solve(["...", "...", "..."], [(0, 0)], [(2, 2)], time_limit=0)
    with pytest.raises(InstanceFormatError, match="at most 16"):
        solver.check_limits(10, 17)
    # a crowded board the solver does not settle in a second: a huge node budget still ends by the clock
    grid = ["...H.H....", "....H...H.", "...H.H...H", ".HH...HH..", ".H..H..H.H",
            "..HHHHH...", "...H.H.HH.", ".H.H...H..", "..........", ".....H.HH."]  # fmt: skip
    starts = [(7, 6), (8, 5), (2, 4), (1, 7), (6, 6), (8, 3), (9, 4), (1, 1), (4, 5), (8, 9), (3, 9), (5, 9),
              (0, 1), (7, 0), (9, 1), (8, 2)]  # fmt: skip
    goals = [(4, 0), (9, 9), (4, 2), (7, 8), (8, 7), (9, 4), (8, 9), (0, 2), (3, 4), (8, 2), (6, 1), (8, 8),
             (5, 1), (3, 9), (9, 2), (4, 8)]  # fmt: skip
    t0 = time.perf_counter()
    with pytest.raises(SolverBudgetExceeded, match=r"time_limit=0\.3"):
        solver.solve(grid, starts, goals, node_budget=10**12, time_limit=0.3)
    assert time.perf_counter() - t0 < 5
    for module in (solver, generator):
        assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_benchmark_outputs_and_versions_are_checked_before_the_build(files: Path, capsys) -> None:
    """A build takes minutes: a place that cannot be written and an empty version fail at once."""
    t0 = time.perf_counter()
    for argv, says in (
        (["benchmark", "build", "-o", "/proc/x"], "/proc/x: cannot write there"),
        (["benchmark", "validation", "-o", "/proc/x/v.jsonl"], "/proc/x/v.jsonl: cannot write there"),
        (["benchmark", "build", "--version", "", "-o", "b.jsonl"], "unknown benchmark version ''"),
        (["benchmark", "info", "--version", ""], "unknown benchmark version ''"),
    ):
        code, err = run(capsys, *argv)
        assert_one_line(code, err)
        assert says in err, err
    assert time.perf_counter() - t0 < 10  # nothing was built
    assert not list(files.glob(".*write-check*")) and not Path("b.jsonl").exists()


def test_instances_are_said_dropped_only_when_an_exclude_file_is_given(files: Path, caplog) -> None:
    import argparse
    import logging

    from envengineer.cli.train import data_source

    caplog.set_level(logging.WARNING, logger="envengineer.cli.train")
    args = argparse.Namespace(instances=Path("good.jsonl"), round=None, exclude=[])
    assert len(data_source(args).instances) == 1
    assert "dropped" not in caplog.text, caplog.text  # no --exclude: nothing to say
    other = dict(SOLVED, id="b", grid=["...", "...", ".H."])
    Path("held.jsonl").write_text(json.dumps(other) + "\n")
    data_source(argparse.Namespace(instances=Path("good.jsonl"), round=None, exclude=[Path("held.jsonl")]))
    assert "dropped 0 of 1 instances" in caplog.text  # asked for: said, even when nothing went


@pytest.mark.parametrize("command", ["sft", "train"])
def test_training_outputs_are_checked_before_any_work(files: Path, capsys, command: str) -> None:
    code, err = run(capsys, command, "--round", "round.yaml", "--out", "good.jsonl")
    assert_one_line(code, err)
    assert "--out good.jsonl: is a file, not a folder" in err, err
