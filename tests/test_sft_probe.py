"""``training.probe``: before an SFT round trains, the checkpoint it starts from answers some of the round's
boards, and the round records per size what it got right as ``metrics.json["metrics"]["sampled"]``, the
signal a GRPO round's own samples give the learnability curriculum, the L module and the report."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from envengineer.engineer.curriculum import LearnabilityCurriculum
from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import read_json, read_jsonl
from envengineer.loop.runner import run_experiment
from envengineer.mapf.config import ConfigSpace, RoundConfig
from envengineer.mapf.instance import Instance
from envengineer.mapf.scoring import ScoreReport
from envengineer.mapf.validator import Verdict
from small_sets import dotted_experiment, small_overrides, write_small_sets

SPACE = ConfigSpace(sizes=(3, 4, 5))
#: Every round's boards: four of each size 3, 4 and 5 (the fake generator's configuration).
BOARDS = RoundConfig.model_validate(
    {
        "num_agents": 2,
        "num_samples": 12,
        "sizes": {str(n): {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.0} for n in (3, 4, 5)},
    }
)

OPTIMAL = Verdict(True, True, True, None, 4, 2, None, None, 8, 2)
SUBOPTIMAL = Verdict(True, False, False, "suboptimal", 5, 3, None, None, 8, 2)
CONFLICT = Verdict(False, False, False, "vertex_conflict", None, None, 0, 1, 5, 1, "A0 meets A1")
UNREAD = Verdict(False, False, False, "parse_error", None, None, None, None, 0, 0, "no plan")
#: What the fake policy answers to the i-th board of each size (in the round's order of its boards).
PROBE_ANSWERS = {
    3: [OPTIMAL, OPTIMAL, SUBOPTIMAL, OPTIMAL],
    4: [SUBOPTIMAL, UNREAD, OPTIMAL, OPTIMAL],
    5: [CONFLICT, CONFLICT, OPTIMAL, OPTIMAL],
}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 43)


def experiment(sets: dict[str, Path], **over: Any) -> Experiment:
    data: dict[str, Any] = {"name": "t-probe", "model": "policy:tiny", "engineer": {"kind": "learnability"}}
    settings = {
        **small_overrides(sets),
        "rounds": 2,
        "samples_per_round": 12,
        "training.learner": "sft",
        "training.preset": "sft-small",
        "training.probe": 7,
        **over,
    }
    return dotted_experiment(data, settings)


def generator(config: RoundConfig, seed: int, **kw: Any) -> list[Instance]:
    from envengineer.mapf.generator import generate_round

    return generate_round(BOARDS, seed, **kw)


class Policy:
    """The fake evaluator: the probe's answers from :data:`PROBE_ANSWERS`, nothing readable elsewhere
    (so validation alone would move no size up the ladder)."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.calls: list[dict[str, Any]] = []

    def __call__(self, model: Any, instances: Any, *, out_dir: Path, experiment: Any, seed: int, **kw: Any):
        self.calls.append({"model": model, "out_dir": Path(out_dir), "ids": [i.id for i in instances]})
        if Path(out_dir).name != "probe":
            return ScoreReport(tuple(instances), {i.id: UNREAD for i in instances})
        round_dir = Path(out_dir).parent.parent
        order: dict[int, list[str]] = {}
        for row in read_jsonl(round_dir / "dataset" / "manifest.jsonl"):
            order.setdefault(row["size"], []).append(row["id"])
        verdicts = {i.id: PROBE_ANSWERS[i.size][order[i.size].index(i.id)] for i in instances}
        return ScoreReport(tuple(instances), verdicts)

    def probes(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["out_dir"].name == "probe"]


def sft_trainer(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
    return {"checkpoint": str(out_dir / "checkpoint"), "steps": 3, "seconds": 0.1, "metrics": {"loss": 1.0}}


def must_not_run(*a: Any, **k: Any) -> Any:
    raise AssertionError("the wrong learner ran")


def start(tmp_path: Path, sets: dict[str, Path]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    return run


def components(policy: Policy, **over: Any) -> Components:
    parts: dict[str, Any] = {
        "trainer": must_not_run,
        "teacher": must_not_run,
        "sft_trainer": sft_trainer,
        "evaluator": policy,
        "generator": generator,
        "space": SPACE,
        **over,
    }
    return Components(**parts)


# (a) -------------------------------------------------------------------------------------------------------
def test_an_sft_round_records_what_its_probe_got_right_per_size(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    run = start(tmp_path, sets)
    policy = Policy(run)
    run_experiment(experiment(sets, rounds=1), run, components=components(policy))
    (call,) = policy.probes()
    manifest = read_jsonl(run / "round_00" / "dataset" / "manifest.jsonl")
    size_of = {row["id"]: row["size"] for row in manifest}
    # 7 boards round-robin over the sizes: 3, 4, 5, 3, 4, 5, 3 -- each size's first ones in the data's order
    assert [size_of[i] for i in call["ids"]] == [3, 4, 5, 3, 4, 5, 3]
    for size, n in ((3, 3), (4, 2), (5, 2)):
        firsts = [row["id"] for row in manifest if row["size"] == size][:n]
        assert [i for i in call["ids"] if size_of[i] == size] == firsts
    assert call["model"] == "policy:tiny" and call["out_dir"] == run / "round_00" / "train" / "probe"
    record = read_json(run / "round_00" / "train" / "metrics.json")
    # by hand: 3x3 optimal, optimal, suboptimal; 4x4 suboptimal, unreadable; 5x5 two conflicts (format ok);
    # graded reward: optimal 1.0, valid 0.6, well-formed 0.1, else 0
    assert record["metrics"] == {
        "loss": 1.0,
        "sampled": {
            "3": {"completions": 3, "valid": 1.0, "optimal": 0.6667, "reward": 0.8667, "zero_std": None},
            "4": {"completions": 2, "valid": 0.5, "optimal": 0.0, "reward": 0.3, "zero_std": None},
            "5": {"completions": 2, "valid": 0.0, "optimal": 0.0, "reward": 0.1, "zero_std": None},
        },
    }
    assert record["steps"] == 3 and record["checkpoint"] == str(run / "round_00" / "train" / "checkpoint")
    scores = read_json(run / "round_00" / "train" / "probe" / "scores.json")
    assert Counter(v["size"] for v in scores["verdicts"]) == {3: 3, 4: 2, 5: 2}


def test_a_probe_larger_than_the_round_answers_every_board_once(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    run = start(tmp_path, sets)
    policy = Policy(run)
    run_experiment(experiment(sets, rounds=1, **{"training.probe": 500}), run, components=components(policy))
    (call,) = policy.probes()
    manifest = read_jsonl(run / "round_00" / "dataset" / "manifest.jsonl")
    assert sorted(call["ids"]) == sorted(row["id"] for row in manifest) and len(call["ids"]) == 12
    sampled = read_json(run / "round_00" / "train" / "metrics.json")["metrics"]["sampled"]
    assert {k: v["completions"] for k, v in sampled.items()} == {"3": 4, "4": 4, "5": 4}
    assert (sampled["5"]["valid"], sampled["5"]["optimal"]) == (0.5, 0.5)


# (b) -------------------------------------------------------------------------------------------------------
def test_the_learnability_engineer_reads_the_probe_in_the_next_round(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    from envengineer.loop.stages.config import sampled_stats

    seen: list[Any] = []

    class Recorder:
        name = "recorder"

        def propose(self, request: Any) -> Any:
            decision = LearnabilityCurriculum(momentum=0.0).propose(request)
            seen.append((request, decision))
            return decision

    run = start(tmp_path, sets)
    policy = Policy(run)
    comps = components(policy, engineer_factory=lambda *a, **k: Recorder())
    run_experiment(experiment(sets, **{"training.probe": 6}), run, components=comps)
    assert [c["out_dir"].parent.parent.name for c in policy.probes()] == ["round_00", "round_01"]
    assert policy.probes()[1]["model"] == str(run / "round_00" / "train" / "checkpoint")
    (request, decision), *_ = seen
    # 6 boards: two of each size; 3x3 all valid, 4x4 half, 5x5 none (validation: nothing readable)
    want = {"3": (2, 1.0), "4": (2, 0.5), "5": (2, 0.0)}
    assert {k: (v["completions"], v["valid"]) for k, v in request.sampled.items()} == want
    assert request.sampled == sampled_stats(_loop(run), 0)
    moves = decision.details["sizes"]
    assert moves["3"]["rate"] == 1.0 and moves["3"]["move"].startswith("up")
    assert moves["4"]["rate"] == 0.5 and moves["4"]["move"] == "stay"
    assert moves["5"]["rate"] == 0.0 and moves["5"]["move"].startswith("down")
    ratios = decision.config.normalised_ratios()
    assert ratios[4] > ratios[3] and ratios[4] > ratios[5]  # p (1 - p): the probe's frontier is 4x4


def _loop(run: Path) -> Any:
    from types import SimpleNamespace

    from envengineer.loop.rundir import RunDir

    return SimpleNamespace(rd=RunDir(run))


# (c) -------------------------------------------------------------------------------------------------------
def test_probe_zero_records_nothing_sampled_and_asks_no_probe(tmp_path: Path, sets: dict[str, Path]) -> None:
    from envengineer.loop.stages.config import sampled_stats

    seen: list[Any] = []

    class Recorder:
        name = "recorder"

        def propose(self, request: Any) -> Any:
            seen.append(request)
            return LearnabilityCurriculum(momentum=0.0).propose(request)

    run = start(tmp_path, sets)
    policy = Policy(run)
    comps = components(policy, engineer_factory=lambda *a, **k: Recorder())
    run_experiment(experiment(sets, **{"training.probe": 0}), run, components=comps)
    assert policy.calls and not policy.probes()
    assert not any("train" in c["out_dir"].parts for c in policy.calls)
    for r in (0, 1):
        assert "sampled" not in read_json(run / f"round_{r:02d}" / "train" / "metrics.json")["metrics"]
        assert not (run / f"round_{r:02d}" / "train" / "probe").exists()
    assert sampled_stats(_loop(run), 0) is None and seen[0].sampled is None


# (d) -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("learner", ["grpo", "teach"])
def test_grpo_and_teach_rounds_never_probe(tmp_path: Path, sets: dict[str, Path], learner: str) -> None:
    own = {"4": {"completions": 16, "valid": 0.25, "optimal": 0.125, "groups": 2, "zero_std": 0.5}}

    def trainer(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 1, "metrics": {"sampled": own}}

    run = start(tmp_path, sets)
    policy = Policy(run)
    preset = {"grpo": "grpo-small", "teach": "cpu"}[learner]
    exp = experiment(sets, rounds=1, **{"training.learner": learner, "training.preset": preset})
    assert exp.training.probe == 7
    comps = components(
        policy,
        sft_trainer=must_not_run,
        trainer=trainer if learner == "grpo" else must_not_run,
        teacher=trainer if learner == "teach" else must_not_run,
    )
    run_experiment(exp, run, components=comps)
    assert policy.calls and not policy.probes()
    assert not (run / "round_00" / "train" / "probe").exists()
    assert read_json(run / "round_00" / "train" / "metrics.json")["metrics"]["sampled"] == own


# resume ----------------------------------------------------------------------------------------------------
def test_a_resumed_run_redoes_no_finished_probe_and_reprobes_an_unfinished_round(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    from envengineer.errors import EnvEngineerError

    failures = [RuntimeError("killed mid-training")]

    def flaky(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
        if failures and "round_01" in str(out_dir):
            raise failures.pop()
        return sft_trainer(model, instances, out_dir=out_dir, **kw)

    run = start(tmp_path, sets)
    policy = Policy(run)
    with pytest.raises((RuntimeError, EnvEngineerError)):
        run_experiment(experiment(sets), run, components=components(policy, sft_trainer=flaky))
    assert [c["out_dir"].parent.parent.name for c in policy.probes()] == ["round_00", "round_01"]
    first = read_json(run / "round_00" / "train" / "metrics.json")
    assert not (run / "round_01" / "train" / "metrics.json").exists()

    again = Policy(run)
    run_experiment(None, run, resume=True, components=components(again, sft_trainer=flaky))
    assert [c["out_dir"].parent.parent.name for c in again.probes()] == ["round_01"]
    assert again.probes()[0]["ids"] == policy.probes()[1]["ids"]
    assert read_json(run / "round_00" / "train" / "metrics.json") == first
    assert (
        read_json(run / "round_01" / "train" / "metrics.json")["metrics"]["sampled"]["3"]["completions"] == 3
    )
