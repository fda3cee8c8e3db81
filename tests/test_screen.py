"""``engineer.screen``: several proposals per round, the one whose probe boards the current policy finds most
learnable kept.

The loop runs on a CPU in seconds with the fakes of tests/test_loop.py and tests/test_share.py: a random
engineer gives K different candidates; a fake policy whose validity depends only on the board's size makes
the choice checkable by hand; a screen-off run writes what it wrote before the screen existed; a resumed
run does not ask the engineer again.
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

from envengineer.engineer.engineers import LLMEngineer, RandomEngineer, make_engineer
from envengineer.errors import ConfigError
from envengineer.loop import screen_settings
from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.rundir import DamagedRunError, RunDir, read_json, read_jsonl
from envengineer.loop.runner import LoopRunner, run_experiment
from envengineer.loop.stages import screen as screen_module
from envengineer.loop.stages.config import build_request
from envengineer.loop.stages.screen import PROPOSAL, learnability, screen_seed
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import load_instances
from small_sets import write_small_sets
from test_loop import ScriptedChat, greedy, make_experiment, prepare
from test_share import Recorder

pytest.importorskip("envengineer.evaluation")

SCREEN = {"proposals": 3, "boards": 8}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


class Calls:
    """The greedy evaluator (tests/test_loop.py), recording which model answered into which folder."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Path]] = []

    def __call__(self, model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> Any:
        self.seen.append((str(model), Path(out_dir)))
        return greedy(model, instances, out_dir=out_dir, **kw)

    def screened(self) -> list[tuple[str, Path]]:
        return [(m, d) for m, d in self.seen if "screen" in d.parts]


def trained(sets: dict[str, Path], **engineer: Any) -> Experiment:
    """Two rounds trained by the Recorder's stand-in (each checkpoint a real folder), random engineer."""
    return make_experiment(
        sets, policy=None, model="base-model", rounds=2, engineer={"kind": "random", **engineer}
    )


def held_out(sets: dict[str, Path]) -> set[str]:
    return {i.board_hash() for p in sets.values() for i in load_instances(p)}


# -- (1) K different candidates probed by the current checkpoint, the argmax kept --------------------------
def test_random_proposals_are_probed_and_the_most_learnable_kept(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    calls, rec = Calls(), Recorder()
    run = prepare(tmp_path / "run", sets)
    comps = Components(trainer=rec.trainer, evaluator=calls)
    run_experiment(trained(sets, screen=SCREEN), run, components=comps)
    eng = run / "round_01" / "engineer"
    screen = read_json(eng / "screen.json")
    cands = screen["candidates"]
    configs = [json.dumps(c["config"], sort_keys=True) for c in cands]
    assert len(cands) == 3 and len(set(configs)) == 3  # three different random configurations
    scores = [c["score"] for c in cands]
    assert screen["chosen"] == scores.index(max(scores))
    chosen = cands[screen["chosen"]]
    applied = RoundConfig.load(run / "round_01" / "config.applied.yaml")
    assert applied == RoundConfig.model_validate(chosen["config"])
    proj = read_json(run / "round_01" / "projection.json")
    assert proj["screened"] == {"proposals": 3, "chosen": screen["chosen"], "scores": scores}
    assert read_json(eng / "decision.json") == read_json(
        eng / "screen" / f"candidate_{screen['chosen']}" / "decision.json"
    )
    # each candidate's 8 probe boards: answered by round 0's checkpoint, none a held-out board, each score
    # the learnability of what was answered
    ckpt = str(run / "round_00" / "train" / "checkpoint")
    assert sorted(calls.screened()) == sorted((ckpt, eng / "screen" / f"candidate_{i}") for i in range(3))
    for i, cand in enumerate(cands):
        rows = read_jsonl(eng / "screen" / f"candidate_{i}" / "manifest.jsonl")
        assert len(rows) == 8 and not {r["board_hash"] for r in rows} & held_out(sets)
        sizes = {int(s): c for s, c in cand["sizes"].items()}
        assert sum(c["boards"] for c in sizes.values()) == 8
        got = learnability(
            {s: c["boards"] for s, c in sizes.items()}, {s: c["valid"] for s, c in sizes.items()}
        )
        assert cand["score"] == pytest.approx(got, abs=1e-6)
    # the proposals' seeds come from tuples, one per proposal
    assert [c["seed"] for c in cands] == [screen_seed(0, PROPOSAL, 1, i) for i in range(3)]
    # round 0 is the random default: never screened
    assert not (run / "round_00" / "engineer").exists()


def test_a_screen_needs_an_engineer_that_samples(sets: dict[str, Path]) -> None:
    data = make_experiment(sets).model_dump(mode="json")
    for engineer, problem in (
        ({"kind": "fixed", "screen": SCREEN}, r"needs an engineer that samples .* kind 'fixed'"),
        ({"kind": "random", "screen": {"proposals": 1}}, r"engineer\.screen\.proposals"),
        ({"kind": "random", "screen": {"probes": 8}}, r"engineer\.screen\.probes"),
    ):
        with pytest.raises(ConfigError, match=problem):
            Experiment.from_dict({**data, "engineer": engineer})


# -- (2) the score by hand ----------------------------------------------------------------------------------
def test_learnability_prefers_boards_the_policy_gets_half_right() -> None:
    assert learnability({3: 8}, {3: 0.5}) == 0.25
    assert learnability({3: 8}, {3: 0.0}) == learnability({3: 8}, {3: 1.0}) == 0.0
    # shares weight the sizes: 3/4 of the boards at p = 0.5 and 1/4 at p = 1
    assert learnability({3: 6, 5: 2}, {3: 0.5, 5: 1.0}) == pytest.approx(0.75 * 0.25)
    # p = 0.2: 0.16; a size without a rate counts as never valid
    assert learnability({4: 5}, {4: 0.2}) == pytest.approx(0.16)
    assert learnability({4: 5, 6: 5}, {4: 0.5}) == pytest.approx(0.125)
    assert learnability({}, {}) == 0.0
    # the modules' examples hold (the score, the seeds, the kinds a screen accepts)
    for module in (screen_module, screen_settings):
        assert doctest.testmod(module).failed == 0


# -- (3) screen off: nothing changes -----------------------------------------------------------------------
def test_screen_off_writes_what_it_wrote_before(tmp_path: Path, sets: dict[str, Path]) -> None:
    """Without a screen the factory is called as before (a factory without ``seed`` still works), the random
    engineer keeps its seed, no screen file is written and experiment.yaml has no ``screen`` key."""
    asked: list[dict[str, Any]] = []

    def old_factory(experiment: Experiment, *, model: Any, round: int, round0: RoundConfig) -> Any:
        asked.append({"model": model, "round": round})
        return make_engineer("random", seed=experiment.seeds.round0)

    runs = {}
    for name, comps in (("default", Components()), ("old", Components(engineer_factory=old_factory))):
        calls = Calls()
        run = prepare(tmp_path / name, sets)
        run_experiment(
            make_experiment(sets, rounds=2, engineer={"kind": "random"}),
            run,
            components=Components(evaluator=calls, engineer_factory=comps.engineer_factory),
        )
        assert not calls.screened()
        runs[name] = run
    assert asked == [{"model": "scripted:greedy", "round": 1}]
    for rel in (
        "round_01/config.applied.yaml",
        "round_01/projection.json",
        "round_01/engineer/decision.json",
        "experiment.yaml",
    ):
        assert (runs["default"] / rel).read_bytes() == (runs["old"] / rel).read_bytes(), rel
    run = runs["default"]
    assert "screen" not in (run / "experiment.yaml").read_text()
    assert "screened" not in read_json(run / "round_01" / "projection.json")
    assert not (run / "round_01" / "engineer" / "screen").exists()
    assert not (run / "round_01" / "engineer" / "screen.json").exists()
    # the random engineer's configuration is the one it draws from seeds.config, as before the screen
    runner = LoopRunner.resume(run)
    runner.run()
    want = RandomEngineer(seed=0).propose(build_request(runner, 1)).config
    assert RoundConfig.load(run / "round_01" / "config.applied.yaml") == want


# -- (4) resume after the config stage does not ask again --------------------------------------------------
def test_resume_after_the_config_stage_does_not_ask_again(tmp_path: Path, sets: dict[str, Path]) -> None:
    def failing(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> Any:
        if Path(out_dir) == run / "round_01" / "validation":
            raise RuntimeError("stopped after round 1's data")
        return greedy(model, instances, out_dir=out_dir, **kw)

    exp = make_experiment(sets, rounds=2, engineer={"kind": "random", "screen": SCREEN})
    run = prepare(tmp_path / "run", sets)
    with pytest.raises(RuntimeError, match="stopped"):
        run_experiment(exp, run, components=Components(evaluator=failing))
    assert RunDir(run).is_done(1, "config")
    entry = RunDir(run).done()[(1, "config")]
    assert "round_01/engineer/screen.json" in entry.hashes
    assert "round_01/engineer/screen/candidate_2/scores.json" in entry.hashes
    before = {p: p.read_bytes() for p in (run / "round_01").rglob("*") if p.is_file()}

    asked: list[int] = []

    def counting(experiment: Experiment, **kw: Any) -> Any:
        asked.append(kw["round"])
        return make_engineer("random", seed=kw.get("seed") or 0)

    calls = Calls()
    LoopRunner.resume(run, components=Components(evaluator=calls, engineer_factory=counting)).run()
    assert asked == [] and not calls.screened()
    for path, data in before.items():
        assert path.read_bytes() == data, path
    assert RunDir(run).is_done(None, "benchmark")


def test_an_edited_screen_record_is_not_reused(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=2, engineer={"kind": "random", "screen": SCREEN})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run)
    path = run / "round_01" / "engineer" / "screen.json"
    path.write_text(path.read_text().replace('"chosen"', '"chosen" ', 1))
    with pytest.raises(DamagedRunError, match=r"screen\.json"):
        LoopRunner.resume(run).run()


# -- (5) the screen picks the data on sizes the policy gets half right --------------------------------------
def sized(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> Any:
    """A policy whose validity depends on the board's size alone on the probe boards: size 3 every other
    board (p = 0.5), size 4 never (p = 0), size 5 always (p = 1); elsewhere the greedy policy."""
    if "screen" not in Path(out_dir).parts:
        return greedy(model, instances, out_dir=out_dir, **kw)
    seen: dict[int, int] = {}
    rows = []
    for inst in instances:
        k = seen[inst.size] = seen.get(inst.size, 0) + 1
        valid = {3: k % 2 == 0, 4: False}.get(inst.size, True)
        rows.append({"id": inst.id, "size": inst.size, "valid": valid, "optimal": valid})
    return {"summary": {"n": len(rows)}, "verdicts": rows}


def only(shares: dict[int, float]) -> str:
    """An engineer's answer putting the data on ``shares``' sizes, none elsewhere."""
    sizes = {
        str(n): {"data_ratio": shares.get(n, 0.0), "hole_ratio": 0.1, "wait_ratio": 0.5} for n in range(3, 11)
    }
    return json.dumps({"rationale": f"data on {sorted(shares)}", "sizes": sizes})


def test_the_screen_keeps_the_sizes_the_policy_gets_half_right(tmp_path: Path, sets: dict[str, Path]) -> None:
    # by hand: half on 3 (p .5) and half on 5 (p 1): 0.5 x 0.25; all on 3: 0.25; all on 4 (p 0): 0
    chat = ScriptedChat([only({3: 1, 5: 1}), only({3: 1}), only({4: 1})])
    seeds: list[int] = []

    def factory(
        experiment: Experiment, *, model: Any, round: int, round0: RoundConfig, seed: int | None = None
    ) -> Any:
        seeds.append(seed)
        return LLMEngineer(chat, "scripted-fake", max_retries=0)

    exp = make_experiment(sets, rounds=2, engineer={"kind": "self", "screen": SCREEN})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(evaluator=sized, engineer_factory=factory))
    screen = read_json(run / "round_01" / "engineer" / "screen.json")
    assert [c["score"] for c in screen["candidates"]] == [0.125, 0.25, 0.0]
    assert [c["sizes"] for c in screen["candidates"]] == [
        {"3": {"boards": 4, "valid": 0.5}, "5": {"boards": 4, "valid": 1.0}},
        {"3": {"boards": 8, "valid": 0.5}},
        {"4": {"boards": 8, "valid": 0.0}},
    ]
    assert screen["chosen"] == 1
    assert seeds == [screen_seed(0, PROPOSAL, 1, i) for i in range(3)] and len(set(seeds)) == 3
    applied = RoundConfig.load(run / "round_01" / "config.applied.yaml")
    assert {n for n, c in applied.sizes.items() if c.data_ratio > 0} == {3}
    eng = run / "round_01" / "engineer"
    assert (eng / "rationale.txt").read_text().strip() == "data on [3]"  # the chosen proposal's notebook
    assert "data on [3]" in (eng / "responses.json").read_text()
    # round 1's 8 training boards follow the chosen configuration
    assert {r["size"] for r in read_jsonl(run / "round_01" / "dataset" / "manifest.jsonl")} == {3}
