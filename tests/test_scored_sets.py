"""Scored sets identified by content: eval resumes only onto answers to the same boards, scores.json names
the instances it scored, compare pairs arms only on identical sets, and resume shape-checks the scores it
reads back."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.evaluation import EvaluationError, evaluate
from envengineer.loop.report_data import RunRecord
from envengineer.loop.rundir import RunDir
from envengineer.loop.runner import run_experiment
from envengineer.mapf.instance import Instance, instances_digest, load_instances, save_instances
from envengineer.models import load_backend
from small_sets import rehash_ledger, small_experiment, write_small_sets


def _moved(inst: Instance) -> Instance:
    """The same id on another board: the last agent's goal swapped with another free cell's."""
    free = [
        (r, c)
        for r, row in enumerate(inst.grid)
        for c, ch in enumerate(row)
        if ch == "." and (r, c) not in inst.starts and (r, c) not in inst.goals
    ]
    from envengineer.mapf.solver import solve_instance

    moved = dataclasses.replace(inst, goals=(*inst.goals[:-1], free[0]))
    sol = solve_instance(moved)
    return moved.with_optimum(
        optimal_soc=sol.soc, optimal_makespan=sol.makespan, shortest_sum=sol.shortest_sum
    )


# -- the digest -------------------------------------------------------------------------------------------
def test_the_digest_names_ids_and_boards_not_their_order() -> None:
    from envengineer.mapf.benchmark import load_benchmark

    v1, v2 = load_benchmark("v1"), load_benchmark("v2")
    assert [i.id for i in v1] == [i.id for i in v2]  # every id shared ...
    other = [a.id for a, b in zip(v1, v2, strict=True) if a.board_hash() != b.board_hash()]
    assert len(other) == 60  # ... 60 of them on other boards
    assert instances_digest(v1) != instances_digest(v2)
    assert instances_digest(v2) == instances_digest(list(reversed(v2)))
    same = [a for a in v1 if a.id not in other][:50]
    assert instances_digest(same) == instances_digest([b for b in v2 if b.id in {a.id for a in same}])


# -- eval resumes only onto answers to the same boards ----------------------------------------------------
def test_eval_refuses_to_resume_onto_answers_to_other_boards(tmp_path: Path) -> None:
    sets = write_small_sets(tmp_path, 11)
    first = load_instances(sets["benchmark"])
    second = [_moved(first[0]), *first[1:]]  # one id, another board
    backend = load_backend("scripted", "optimal", instances=first)
    out = tmp_path / "ev"
    evaluate(backend, first, out_dir=out, progress=False)
    with pytest.raises(EvaluationError) as err:
        evaluate(backend, second, out_dir=out, progress=False)
    msg = str(err.value)
    assert f"{out / 'responses.jsonl'} holds answers to other boards for 1 ids" in msg
    assert repr(first[0].id) in msg and first[0].board_hash()[:12] in msg and "another --out" in msg
    # the same boards resume, asking nothing again
    report = evaluate(backend, first, out_dir=out, progress=False)
    info = json.loads((out / "eval_info.json").read_text())
    assert info["asked_this_run"] == 0 and report.summary()["valid"] == 100.0
    assert info["instances_sha256"] == instances_digest(first)


def test_eval_refuses_answers_that_name_no_board(tmp_path: Path) -> None:
    sets = write_small_sets(tmp_path, 12)
    instances = load_instances(sets["benchmark"])
    out = tmp_path / "ev"
    out.mkdir()
    rows = [{"id": i.id, "response": "", "completion_tokens": None, "error": None} for i in instances[:2]]
    (out / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    backend = load_backend("scripted", "optimal", instances=instances)
    with pytest.raises(EvaluationError, match="holds 2 answers that name no board"):
        evaluate(backend, instances, out_dir=out, progress=False)


def test_eval_command_refuses_benchmark_answers_of_another_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = write_small_sets(tmp_path, 13)
    instances = load_instances(sets["benchmark"])
    other = tmp_path / "other.jsonl"
    save_instances([_moved(instances[0]), *instances[1:]], other)
    out = tmp_path / "ev"
    assert main(["eval", "--backend", "scripted", "--set", str(sets["benchmark"]), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", "--backend", "scripted", "--set", str(other), "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert "holds answers to other boards for 1 ids" in err and "Traceback" not in err


# -- the loop's scores.json names its set; compare pairs only identical sets -----------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sets")
    sets = write_small_sets(d, 41)
    run_experiment(small_experiment(sets["benchmark"], "sets-a"), d / "a")
    other = small_experiment(
        sets["benchmark"], "sets-b", validation={"per_cell": 1, "agents": [3], "max_size": 4, "seed": 99}
    )
    run_experiment(other, d / "b")
    return {"a": d / "a", "b": d / "b", "benchmark": sets["benchmark"]}


def _copy(src: Path, dst: Path, name: str, seed: int) -> Path:
    shutil.copytree(src, dst)
    exp = yaml.safe_load((dst / "experiment.yaml").read_text())
    exp.update(name=f"{name}-s{seed}", seeds={**exp["seeds"], "data": seed, "training": seed})
    (dst / "experiment.yaml").write_text(yaml.safe_dump(exp))
    rehash_ledger(dst)
    return dst


def test_scores_record_the_instances_they_scored(runs: dict[str, Path]) -> None:
    a = runs["a"]
    bench = json.loads((a / "benchmark" / "scores.json").read_text())["scored_set"]
    instances = load_instances(runs["benchmark"])
    assert bench == {
        "sha256": instances_digest(instances),
        "n": len(instances),
        "benchmark_path": str(runs["benchmark"]),
    }
    val = json.loads((a / "round_00" / "validation" / "scores.json").read_text())["scored_set"]
    assert val == {"sha256": instances_digest(load_instances(a / "validation_set.jsonl")), "n": val["n"]}
    b = json.loads((runs["b"] / "round_00" / "validation" / "scores.json").read_text())["scored_set"]
    assert b["sha256"] != val["sha256"]  # another validation seed: other boards


def test_compare_refuses_against_across_validation_sets_unless_mixed(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from envengineer.loop.compare import compare_runs

    a = [_copy(runs["a"], tmp_path / f"a-s{s}", "a", s) for s in range(2)]
    b = [_copy(runs["b"], tmp_path / f"b-s{s}", "b", s) for s in range(2)]
    out = tmp_path / "out"
    with pytest.raises(
        ConfigError, match=r"arm 'b' was validated on .*, the reference 'a' on .*--mixed-arms"
    ):
        compare_runs([*a, *b], out=out, against="a")
    compare_runs([*a, *b], out=out, against="a", mixed=True)
    record = json.loads((out / "compare.json").read_text())
    assert "validation" not in record["intervals"]["differences"]["b"]  # other boards: no difference
    assert "benchmark" in record["intervals"]["differences"]["b"]  # the same benchmark: paired
    (note,) = [w for w in record["warnings"] if "validated on" in w]
    assert "left out" in note
    assert record["sets"]["a"]["validation"][0]["sha256"] != record["sets"]["b"]["validation"][0]["sha256"]
    text = (out / "compare.md").read_text()
    assert "## Scored sets" in text and "validation_set.jsonl" not in text  # recorded, not rebuilt
    # without --against the arms' different sets are named, nothing refused
    compare_runs([*a, *b], out=out)
    assert any(
        "validated on different sets" in w for w in json.loads((out / "compare.json").read_text())["warnings"]
    )


def test_runs_from_before_the_field_are_hashed_from_their_files(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    old = _copy(runs["a"], tmp_path / "old", "a", 0)
    recorded = {}
    for rel in ("benchmark/scores.json", "round_01/validation/scores.json"):
        scores = json.loads((old / rel).read_text())
        recorded[rel] = scores.pop("scored_set")["sha256"]
        (old / rel).write_text(json.dumps(scores))
    rehash_ledger(old)
    from envengineer.loop.report_data import load_run
    from envengineer.loop.scored_sets import run_set

    run = load_run(old)
    val, bench = run_set(run, "validation"), run_set(run, "benchmark")
    assert val is not None and val.sha256 == recorded["round_01/validation/scores.json"]
    assert "validation_set.jsonl" in val.source
    assert bench is not None and bench.sha256 == recorded["benchmark/scores.json"]


def test_an_old_benchmark_without_a_version_is_read_from_its_boards_not_guessed() -> None:
    from envengineer.loop.scored_sets import run_set
    from envengineer.mapf.benchmark import load_benchmark

    v1, v2 = load_benchmark("v1"), load_benchmark("v2")
    other = {a.id for a, b in zip(v1, v2, strict=True) if a.board_hash() != b.board_hash()}

    def old_run(ids: list[str]) -> RunRecord:
        scores = {
            "summary": {"n": len(ids), "valid": 0.0, "optimal": 0.0},
            "verdicts": [{"id": i} for i in ids],
        }
        return RunRecord(Path("old"), {"evaluation": {"benchmark_per_cell": 1}}, benchmark=scores)

    same = [i.id for i in v2 if i.id not in other][:40]
    known = run_set(old_run(same), "benchmark")
    assert known is not None and known.sha256 == instances_digest([i for i in v2 if i.id in set(same)])
    assert known.name == "v1 = v2"
    mixed = run_set(old_run([*same, sorted(other)[0]]), "benchmark")
    assert mixed is not None and mixed.sha256 is None and "on other boards" in mixed.source
    assert not hasattr(RunRecord, "benchmark_set")  # no version read from a missing field


# -- resume reads a round's scores through the shape check -------------------------------------------------
def _cut_after_round0_validation(run: Path) -> None:
    """The run as if killed after round 0's validation: later ledger lines and outputs gone."""
    rd = RunDir(run)
    lines = rd.ledger_path.read_text().splitlines(keepends=True)
    keep = []
    for line in lines:
        keep.append(line)
        d = json.loads(line)
        if (d.get("round"), d.get("stage")) == (0, "validation"):
            break
    rd.ledger_path.write_text("".join(keep))
    shutil.rmtree(rd.round_dir(1))
    shutil.rmtree(rd.benchmark_dir)


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("[1, 2]", "a JSON list, not an object"),
        ('{"table": "x"}', "summary is not a mapping"),
        ("{not json", "not JSON"),
    ],
)
def test_resume_refuses_a_round_scores_file_of_the_wrong_shape_naming_it(
    runs: dict[str, Path], tmp_path: Path, content: str, what: str
) -> None:
    run = tmp_path / "r"
    shutil.copytree(runs["a"], run)
    _cut_after_round0_validation(run)
    path = run / "round_00" / "validation" / "scores.json"
    path.write_text(content)
    rehash_ledger(run)  # the ledger vouches for it (a run from before hashes, or a re-signed ledger)
    with pytest.raises(ConfigError) as err:
        run_experiment(None, run, resume=True)
    msg = str(err.value)
    assert str(path) in msg and what in msg and "ledger" not in msg


def test_resume_refuses_a_benchmark_scores_file_that_is_a_list(runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "r"
    shutil.copytree(runs["a"], run)
    path = run / "benchmark" / "scores.json"
    path.write_text("[]")
    rehash_ledger(run)
    with pytest.raises(ConfigError, match=re.escape(f"{path} is not a scores file (a JSON list")):
        run_experiment(None, run, resume=True)
