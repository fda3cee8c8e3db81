"""The testbed's command line: the documented commands work, bad input is one line and a non-zero exit."""

from __future__ import annotations

import json

import pytest

from envengineer.cli import main
from envengineer.mapf.instance import load_instances


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_generate_play_score_show_round_trip(tmp_path, capsys):
    inst = tmp_path / "i.jsonl"
    code, out, _ = run(
        capsys,
        "generate",
        "--agents",
        "2",
        "--size",
        "4",
        "--hole-ratio",
        "0.25",
        "--wait-ratio",
        "0.5",
        "-n",
        "10",
        "--seed",
        "1",
        "-o",
        str(inst),
    )
    assert code == 0 and "wrote 10 instances (5 need a wait)" in out
    for policy in ("optimal", "greedy"):
        resp = tmp_path / f"{policy}.jsonl"
        assert run(capsys, "play", str(inst), "--policy", policy, "-o", str(resp))[0] == 0
        code, out, _ = run(capsys, "score", str(inst), str(resp), "--json", str(tmp_path / f"{policy}.json"))
        assert code == 0 and "| 2 |" in out
        report = json.loads((tmp_path / f"{policy}.json").read_text())
        assert len(report["verdicts"]) == 10
        assert set(report["verdicts"][0]) >= {
            "id",
            "valid",
            "optimal",
            "makespan_optimal",
            "failure",
            "soc",
            "makespan",
        }
        if policy == "optimal":
            assert report["table"]["2"]["sum"] == {"valid": 100.0, "optimal": 100.0}
        else:
            assert report["table"]["2"]["sum"]["optimal"] <= 50.0  # half of the boards need a wait
    code, out, _ = run(capsys, "show", str(inst), "--index", "3", "--prompt")
    assert code == 0 and "prompt" in out


def test_generate_from_a_round_config(tmp_path, capsys):
    cfg = tmp_path / "round.yaml"
    cfg.write_text(
        "num_samples: 12\nsizes:\n  3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.5}\n"
        "  5: {data_ratio: 1, hole_ratio: 0.2, wait_ratio: 0.0}\n"
    )
    out_file = tmp_path / "round.jsonl"
    assert run(capsys, "generate", "--config", str(cfg), "-o", str(out_file))[0] == 0
    insts = load_instances(out_file)
    assert sorted(i.size for i in insts) == [3] * 6 + [5] * 6


def test_solve_fills_and_checks_user_boards(tmp_path, capsys):
    mine = tmp_path / "mine.jsonl"
    boards = [
        {
            "id": "swap board",
            "grid": ["...", "...", "..."],
            "starts": [[0, 0], [0, 2]],
            "goals": [[0, 2], [0, 0]],
        },
        {
            "id": 7,
            "grid": ["...", "...", "..."],
            "starts": [[1, 0], [1, 1]],
            "goals": [[1, 1], [1, 2]],
            "optimal_soc": 5,
            "optimal_makespan": 1,
            "shortest_sum": 2,
        },  # wrong stated optimum
    ]
    mine.write_text("\n".join(json.dumps(b) for b in boards) + "\n")
    code, out, err = run(capsys, "solve", str(mine), "-o", str(tmp_path / "solved.jsonl"))
    assert code == 1 and "were wrong" in out and "file says SoC 5" in err
    a, b = load_instances(tmp_path / "solved.jsonl")
    assert (a.optimal_soc, a.optimal_makespan, a.shortest_sum, a.needs_wait) == (6, 4, 4, True)
    assert (b.id, b.optimal_soc) == ("7", 2)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["generate", "--size", "4", "--hole-ratio", "0.9", "-o", "x.jsonl"],
            "--hole-ratio 0.9 is out of range",
        ),
        (["generate", "--size", "2", "--agents", "3", "-o", "x.jsonl"], "do not fit"),
        (["generate", "-o", "x.jsonl"], "give --size"),
        (["score", "missing.jsonl", "r.jsonl"], "no such file"),
        (["show", "BAD", "--index", "0"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD").write_text("{oops\n")
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err or "not valid JSON" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_round_config_and_unsolved_scoring(tmp_path, capsys):
    cfg = tmp_path / "round.yaml"
    cfg.write_text("sizes:\n  3: {data_ratio: 1, hole_ratio: 0.7, wait_ratio: 0.5}\n")
    code, _, err = run(capsys, "generate", "--config", str(cfg), "-o", str(tmp_path / "o.jsonl"))
    assert code == 2 and "hole_ratio" in err
    mine = tmp_path / "mine.jsonl"
    mine.write_text(
        json.dumps({"id": "a", "grid": ["..", ".."], "starts": [[0, 0]], "goals": [[1, 1]]}) + "\n"
    )
    (tmp_path / "r.jsonl").write_text('{"id": "a", "response": ""}\n')
    code, _, err = run(capsys, "score", str(mine), str(tmp_path / "r.jsonl"))
    assert code == 2 and "envengineer solve" in err


def test_every_command_and_argument_explains_itself() -> None:
    import argparse

    from envengineer.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        assert command.description, f"{name} has no description"
        for action in command._actions:
            assert action.help, f"{name} {action.dest} has no help"


def test_solve_refuses_nan_and_null_ids_instead_of_writing_them_back(tmp_path, capsys):
    board = {"grid": ["...", "...", "..."], "starts": [[0, 0], [0, 2]], "goals": [[0, 2], [0, 0]]}
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"id": "a", "weight": NaN, ' + json.dumps(board)[1:] + "\n")
    code, _, err = run(capsys, "solve", str(nan), "-o", str(tmp_path / "o.jsonl"))
    assert code == 2 and "NaN is not a JSON value" in err and not (tmp_path / "o.jsonl").exists()
    null = tmp_path / "null.jsonl"
    null.write_text(json.dumps({"id": None, **board}) + "\n")
    code, _, err = run(capsys, "solve", str(null), "-o", str(tmp_path / "o.jsonl"))
    assert code == 2 and "'id' is null" in err and not (tmp_path / "o.jsonl").exists()


def test_solve_fails_on_its_output_before_solving(tmp_path, capsys, monkeypatch):
    import envengineer.mapf.solver as solver

    def boom(*a, **k):
        raise AssertionError("solved before checking the output")

    monkeypatch.setattr(solver, "solve_instance", boom)
    mine = tmp_path / "mine.jsonl"
    board = {"id": "a", "grid": ["...", "...", "..."], "starts": [[0, 0], [0, 2]], "goals": [[0, 2], [0, 0]]}
    mine.write_text(json.dumps(board) + "\n")
    (tmp_path / "adir").mkdir()
    code, _, err = run(capsys, "solve", str(mine), "-o", str(tmp_path / "adir"))
    assert code == 2 and "is a directory" in err
    code, _, err = run(capsys, "solve", str(mine), "-o", str(mine / "x.jsonl"))
    assert code == 2 and "is a file, not a folder" in err
