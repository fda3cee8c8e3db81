"""How ``teach`` stops and what it refuses: a loop round stops on steps whatever the clock says, the
command's wall-clock limit holds inside a roll-in, a diverged run writes nothing, and the model names
``sft`` accepts are accepted. Each test runs a tiny policy for a few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from envengineer.errors import ConfigError
from envengineer.mapf.generator import generate_cell
from envengineer.mapf.instance import Instance

pytest.importorskip("transformers")

from envengineer.models.small_policy import init_policy
from envengineer.training import teach as teach_module
from envengineer.training.teach import TeachSettings, teach, teach_round
from test_policy_folder import SOLVED


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_policy(tmp_path_factory.mktemp("policy") / "p", size="tiny", seed=0)


@pytest.fixture(scope="module")
def boards() -> list[Instance]:
    return generate_cell(num_agents=2, size=3, count=16, wait_count=8, seed=7, split="train", id_prefix="t")


def test_a_loop_round_stops_on_steps_whatever_the_clock(policy, boards, tmp_path, monkeypatch):
    """A crowded machine (a clock that runs 30 s a reading) changes neither the steps nor the stop: the
    round's minutes become 0.1 x 30 = 3 steps once, and exactly 3 are taken."""
    now = [0.0]

    def slow_clock() -> float:
        now[0] += 30.0
        return now[0]

    monkeypatch.setattr(teach_module, "time", SimpleNamespace(perf_counter=slow_clock))
    cfg = TeachSettings(
        minutes=0.1, max_steps=150, rollout_batch=2, steps_per_rollout=1, batch_size=2, max_new_tokens=16
    )
    result = teach_round(str(policy), boards, out_dir=tmp_path / "r", settings=cfg, seed=3)
    assert result.steps == 3 and result.metrics["planned_steps"] == 3
    assert result.metrics["stopped"] == "max_steps" and result.metrics["settings"]["minutes"] is None
    # the schedule's length is the planned count: it decays to 0 at the last step, on any machine
    assert result.metrics["settings"]["max_steps"] == 3


def test_the_command_s_limit_holds_inside_a_roll_in(policy, boards, tmp_path):
    """16 answers of 640 tokens take several seconds on 2 cores; a limit of 0.06 s stops the generation
    itself, not the first check after it, and the cut-off answers are not trained on (a limit this far
    below one roll-in's time holds however fast or loaded the machine is)."""
    cfg = TeachSettings(minutes=0.001, max_steps=5, rollout_batch=16, steps_per_rollout=1, batch_size=2)
    metrics = teach(str(policy), boards, out_dir=tmp_path / "t", settings=cfg)
    assert metrics["seconds"] < 2.0, metrics["history"]
    assert metrics["stopped"] == "minutes" and metrics["steps"] == 0


def test_a_loss_that_is_not_finite_stops_the_run_and_writes_nothing(policy, boards, tmp_path):
    cfg = TeachSettings(
        learning_rate=1e12, max_steps=4, rollout_batch=2, steps_per_rollout=2, batch_size=2, max_new_tokens=16
    )
    with pytest.raises(ConfigError, match=r"training diverged, nothing was written; lower the learning rate"):
        teach(str(policy), boards, out_dir=tmp_path / "t", settings=cfg)
    assert not (tmp_path / "t" / "metrics.json").exists()


def test_teach_resolves_the_names_sft_resolves(boards, tmp_path, monkeypatch):
    """``policy:trainee`` is the packaged trainee's folder for teach as for sft and eval, not a hub id."""
    from envengineer.models.trainee import trainee_path

    seen = []

    def setup(model, cfg):
        seen.append(model)
        raise RuntimeError("stop here")

    monkeypatch.setattr(teach_module, "_setup", setup)
    with pytest.raises(RuntimeError, match="stop here"):
        teach("policy:trainee", boards, out_dir=tmp_path / "t")
    assert seen == [str(trainee_path())]


@pytest.mark.parametrize(
    ("value", "says"), [("inf", "--temperature"), ("-1", "--temperature"), ("nan", "--temperature")]
)
def test_bad_settings_are_one_line(value, says, capsys):
    from envengineer.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["teach", "--model", "m", "--instances", "x.jsonl", "--temperature", value, "--out", "o"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {says}: must be a finite number >= 0" in err
    errors = [x for x in err.splitlines() if "error" in x]
    assert errors == [err.strip().splitlines()[-1]] and "validation error" not in err  # usage + one line


def test_settings_given_through_the_api_are_one_line_too():
    """What the parser cannot see (a setting out of the learner's range) names the option in one line."""
    from argparse import Namespace

    from envengineer.cli.teach import settings_of

    args = Namespace(minutes=None, max_steps=None, temperature=float("inf"), learning_rate=None, seed=0)
    with pytest.raises(ConfigError) as exc:
        settings_of(args)
    assert str(exc.value).startswith("--temperature inf: ") and "\n" not in str(exc.value)


def test_teach_checks_its_output_folder_and_model_before_any_work(tmp_path, capsys, monkeypatch):
    """``--out`` naming a file and a model folder that does not exist fail at once, one line each."""
    import time

    from envengineer.cli import main

    monkeypatch.chdir(tmp_path)
    Path("one.jsonl").write_text(json.dumps(dict(SOLVED)) + "\n")
    Path("afile").write_text("")
    t0 = time.perf_counter()
    assert main(["teach", "--model", "x", "--instances", "one.jsonl", "--out", "afile"]) == 2
    assert "--out afile: is a file, not a folder" in capsys.readouterr().err
    assert main(["teach", "--model", "missing_folder", "--instances", "one.jsonl", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert "missing_folder: no such folder" in err and "huggingface.co" not in err, err
    assert time.perf_counter() - t0 < 20  # no roll-in, no hub lookup
