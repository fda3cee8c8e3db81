"""What computed a run's stages (``fingerprint.json``): ``--share-from`` and ``--resume`` compare it with
today's, refuse a difference with the fields named, or let it through with ``--allow-fingerprint-change``
and record it; a refused share leaves no half-made run behind."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError
from envengineer.loop import fingerprint as fpm
from envengineer.loop.rundir import DamagedRunError, RunDir, read_json
from envengineer.loop.runner import run_experiment
from envengineer.training.presets import packaged_presets
from small_sets import write_small_sets
from test_loop import prepare
from test_share import Recorder, arm

pytest.importorskip("envengineer.evaluation")


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


def _edit(run: Path, presets: dict[str, str] | None = None, **fields: Any) -> None:
    """Make the run's recorded fingerprint say other ``fields`` and ``presets`` (a run made by other code)."""
    path = run / fpm.FINGERPRINT
    data = json.loads(path.read_text())
    for event in data["events"]:
        event["fingerprint"].update(fields)
        event["fingerprint"]["presets"].update(presets or {})
    path.write_text(json.dumps(data))


def _source(tmp_path: Path, sets: dict[str, Path], **over: Any) -> Path:
    source = prepare(tmp_path / "fixed", sets)
    run_experiment(arm(sets, "fixed", **over), source, components=Recorder().components())
    return source


def test_a_run_records_what_computes_it(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = _source(tmp_path, sets)
    record = read_json(source / fpm.FINGERPRINT)
    (start,) = record["events"]
    fp = start["fingerprint"]
    assert start["event"] == "start" and start["ledger_lines"] == 0
    assert fp["package_version"] == __import__("envengineer").__version__
    assert set(fp["presets"]) == {"training.preset", "warm_start.preset"}
    assert all(v.startswith("sha256:") for v in fp["presets"].values())
    assert fp["benchmark"] == {"path": str(sets["benchmark"]), "sha256": fpm.file_digest(sets["benchmark"])}
    assert fp["validation_set"] == fpm.file_digest(sets["validation"])  # prepared before the start


def test_git_commit_is_the_checkouts_head() -> None:
    root = Path(fpm.__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert fpm.git_commit() == head
    assert fpm._sha("ref: refs/heads/main") is None and fpm._sha("A" * 40) is None


def test_share_from_other_code_is_refused_with_the_fields_named(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    source = _source(tmp_path, sets)
    _edit(source, package_version="0.0.1")
    target = prepare(tmp_path / "random", sets)
    with pytest.raises(
        ConfigError, match=r"differs .* in package_version \(0\.0\.1 -> .*--allow-fingerprint"
    ):
        run_experiment(arm(sets, "random"), target, components=Recorder().components(), share_from=source)
    assert sorted(p.name for p in target.iterdir()) == ["validation_set.jsonl"]  # nothing written

    run_experiment(
        arm(sets, "random"),
        target,
        components=Recorder().components(),
        share_from=source,
        allow_fingerprint_change=True,
    )
    events = read_json(target / fpm.FINGERPRINT)["events"]
    assert [e["event"] for e in events] == ["start", "share", "continue"]
    assert (
        events[1]["changed"] == ["package_version"] and events[1]["fingerprint"]["package_version"] == "0.0.1"
    )
    record = fpm.read_record(RunDir(target))
    assert fpm.governing(record, 0)["package_version"] == "0.0.1"  # the copied lines: the source's code
    assert fpm.governing(record, events[2]["ledger_lines"]) == events[0]["fingerprint"]  # then today's
    # an arm that shares from this one meets the source's code in the copied stages
    with pytest.raises(ConfigError, match="package_version"):
        run_experiment(arm(sets, "random"), tmp_path / "third", share_from=target)


def test_an_edited_preset_file_is_another_fingerprint(tmp_path: Path, sets: dict[str, Path]) -> None:
    preset = tmp_path / "my-grpo.yaml"
    shutil.copy(packaged_presets()["grpo-cpu"], preset)
    source = _source(tmp_path, sets, training={"preset": str(preset)})
    text = preset.read_text()
    preset.write_text(
        text.replace("learning_rate: 5.0e-5", "learning_rate: 1.0e-4", 1)
    )  # same name, other rate
    assert preset.read_text() != text
    with pytest.raises(ConfigError, match=r"presets\.training\.preset"):
        run_experiment(
            arm(sets, "random", training={"preset": str(preset)}), tmp_path / "b", share_from=source
        )


def test_other_validation_boards_are_not_shared(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = _source(tmp_path, sets)
    target = tmp_path / "random"
    target.mkdir()
    lines = sets["validation"].read_text().splitlines(keepends=True)
    (target / "validation_set.jsonl").write_text("".join(lines[:-1]))  # one board fewer
    with pytest.raises(ConfigError, match=r"in validation_set \("):
        run_experiment(arm(sets, "random"), target, share_from=source)


def test_a_source_from_before_fingerprints_is_unknown(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = _source(tmp_path, sets)
    (source / fpm.FINGERPRINT).unlink()
    with pytest.raises(ConfigError, match=r"unknown \(no fingerprint\.json"):
        run_experiment(arm(sets, "random"), tmp_path / "b", share_from=source)
    assert not (tmp_path / "b").exists()
    target = prepare(tmp_path / "c", sets)
    run_experiment(
        arm(sets, "random"), target, components=Recorder().components(), share_from=source,
        allow_fingerprint_change=True,
    )  # fmt: skip
    events = read_json(target / fpm.FINGERPRINT)["events"]
    assert events[1]["event"] == "share" and events[1]["fingerprint"] is None
    assert fpm.governing(fpm.read_record(RunDir(target)), 0) is None


class Stops(Recorder):
    """Trains round 0, then stops the run (a kill) at round 1's training."""

    def trainer(self, model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
        if "round_01" in str(out_dir):
            raise KeyboardInterrupt
        return super().trainer(model, instances, out_dir=out_dir, **kw)


def _stopped(tmp_path: Path, sets: dict[str, Path]) -> Path:
    run = prepare(tmp_path / "run", sets)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(arm(sets, "fixed"), run, components=Stops().components())
    return run


def test_resume_under_other_code_is_refused_or_recorded(tmp_path: Path, sets: dict[str, Path]) -> None:
    run = _stopped(tmp_path, sets)
    _edit(run, package_version="0.0.1", presets={"training.preset": "sha256:0"})
    with pytest.raises(
        ConfigError, match=r"changed since they ran: package_version .*presets\.training\.preset"
    ):
        run_experiment(None, run, resume=True, components=Recorder().components())
    lines = len(RunDir(run).entries())
    run_experiment(None, run, resume=True, components=Recorder().components(), allow_fingerprint_change=True)
    events = read_json(run / fpm.FINGERPRINT)["events"]
    assert events[-1]["event"] == "resume" and events[-1]["allowed"] is True
    assert events[-1]["changed"] == ["package_version", "presets.training.preset"]
    assert events[-1]["ledger_lines"] == lines
    run_experiment(None, run, resume=True, components=Recorder().components())  # finished: nothing compared


def test_resume_of_a_run_from_before_fingerprints_warns_and_records(
    tmp_path: Path, sets: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    run = _stopped(tmp_path, sets)
    (run / fpm.FINGERPRINT).unlink()
    lines = len(RunDir(run).entries())
    with caplog.at_level("WARNING", logger="envengineer.loop.fingerprint"):
        run_experiment(None, run, resume=True, components=Recorder().components())
    assert "a run from before fingerprints" in caplog.text
    (event,) = read_json(run / fpm.FINGERPRINT)["events"]
    assert event["unknown_before"] is True and event["ledger_lines"] == lines
    assert fpm.governing(fpm.read_record(RunDir(run)), lines - 1) is None


def test_a_damaged_fingerprint_file_is_refused(tmp_path: Path, sets: dict[str, Path]) -> None:
    run = _stopped(tmp_path, sets)
    (run / fpm.FINGERPRINT).write_text('{"events": "x"}')
    with pytest.raises(DamagedRunError, match="not a fingerprint record"):
        run_experiment(None, run, resume=True, components=Recorder().components())


# -- a refused share leaves nothing behind -------------------------------------------------------------
def test_a_refused_share_leaves_no_half_made_run(tmp_path: Path, sets: dict[str, Path]) -> None:
    source = _source(tmp_path, sets)
    scores = source / "round_00" / "validation" / "scores.json"
    good = scores.read_bytes()
    scores.write_bytes(good.replace(b'"valid"', b'"valid" ', 1))
    target = tmp_path / "random"
    with pytest.raises(DamagedRunError, match=r"scores\.json changed"):
        run_experiment(arm(sets, "random"), target, components=Recorder().components(), share_from=source)
    assert not target.exists()
    scores.write_bytes(good)  # restored: the same command now runs ("already holds a run" before)
    run_experiment(arm(sets, "random"), target, components=Recorder().components(), share_from=source)
    assert RunDir(target).is_done(1, "validation")


def test_a_copy_that_fails_is_removed_again(
    tmp_path: Path, sets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from envengineer.loop import share

    source = _source(tmp_path, sets)
    target = prepare(tmp_path / "random", sets)

    def broken(*args: Any) -> None:
        raise DamagedRunError("the copy differs")

    monkeypatch.setattr(share, "_record", broken)
    with pytest.raises(DamagedRunError, match="the copy differs"):
        run_experiment(arm(sets, "random"), target, components=Recorder().components(), share_from=source)
    assert sorted(p.name for p in target.iterdir()) == ["validation_set.jsonl"]  # as it was


def test_dry_run_checks_the_share_source(
    tmp_path: Path, sets: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    from envengineer.cli import main

    exp_file = tmp_path / "exp.yaml"
    exp_file.write_text(arm(sets, "random").to_yaml())
    out = str(tmp_path / "out")
    assert (
        main(["run", str(exp_file), "--out", out, "--share-from", str(tmp_path / "nope"), "--dry-run"]) == 2
    )
    assert "no run there" in capsys.readouterr().err
    assert main(["run", str(exp_file), "--out", out, "--dry-run", "--allow-fingerprint-change"]) == 2
    assert "--allow-fingerprint-change applies to one run" in capsys.readouterr().err
