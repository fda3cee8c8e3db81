"""The round loop end to end on a CPU in seconds: scripted policies, the real generator, evaluation and
engineers, and a scripted fake engineer model that answers with bad JSON, then unknown keys, then
out-of-range values, then a good configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envengineer.errors import ConfigError
from envengineer.loop.components import Components
from envengineer.loop.experiment import EngineerSettings, Experiment
from envengineer.loop.plan import plan
from envengineer.loop.rundir import ROUND_STAGES, RunDir, read_json, read_jsonl
from envengineer.loop.runner import LoopRunner, run_experiment
from envengineer.loop.seeds import round_seed
from envengineer.loop.sets import select_benchmark
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import load_instances
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")
pytest.importorskip("envengineer.mapf.prompt")


# -- small fixed sets, built once ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A validation set and a stand-in benchmark of the real shape, small (3 agents, sizes 3..5)."""
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


def make_experiment(sets: dict[str, Path], **over: Any) -> Experiment:
    data: dict[str, Any] = {
        "name": "t-loop",
        "policy": "scripted:greedy",
        "rounds": 3,
        "samples_per_round": 8,
        "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
        "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
        "engineer": {"kind": "fixed"},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return Experiment.model_validate(data)


def prepare(run_dir: Path, sets: dict[str, Path]) -> Path:
    """Seed the run directory with the cached validation set (the runner reuses validation_set.jsonl)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    return run_dir


# -- a scripted engineer model ----------------------------------------------------------------------------
GOOD_1 = {
    "rationale": "Too many conflicts at 4x4: more 4x4 with waits, fewer holes.",
    "sizes": {
        "3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.3},
        "4": {"data_ratio": 3, "hole_ratio": 0.2, "wait_ratio": 0.6},
        "5": {"data_ratio": 0, "hole_ratio": 0.8, "wait_ratio": 0.5},  # out of range: clipped, not retried
    },
}
GOOD_2 = {
    "rationale": "Keep 4x4, add 5x5.",
    "sizes": {
        "4": {"data_ratio": 1, "hole_ratio": 0.2, "wait_ratio": 0.5},
        "5": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.5},
    },
}
SCRIPT = [
    'Here is my plan: {"sizes": {"3": {"data_ratio": 0.5,, "hole_ratio": }',  # bad JSON
    json.dumps({"rationale": "x", "reward": "harder"}),  # no configuration
    json.dumps({"rationale": "y", "sizes": "harder ones"}),  # no per-size object
    "Reasoning first.\n```json\n" + json.dumps(GOOD_1) + "\n```",
    json.dumps(GOOD_2),
]


class ScriptedChat:
    """A chat backend that answers every request with the next scripted text and records the requests."""

    name = "scripted-engineer"

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.requests: list[list[dict[str, str]]] = []

    def generate(self, conversations: Any, params: Any) -> list[Any]:
        from envengineer.models import Completion

        out = []
        for conv in conversations:
            self.requests.append(list(conv))
            out.append(Completion(self.answers.pop(0) if self.answers else "no idea"))
        return out


def scripted_factory(chat: ScriptedChat, retries: int = 3) -> Any:
    from envengineer.engineer.engineers import LLMEngineer

    def factory(experiment: Experiment, *, model: str | None, round: int, round0: RoundConfig) -> Any:
        return LLMEngineer(chat, "scripted-fake", max_retries=retries)

    return factory


def greedy(model: Any, instances: Any, *, out_dir: Path, experiment: Any, seed: int, progress: bool) -> Any:
    """An evaluator that ignores the model: the greedy policy answers through the real evaluation."""
    from envengineer.evaluation import evaluate
    from envengineer.models import load_backend

    backend = load_backend("scripted", "greedy", instances=instances)
    return evaluate(backend, instances, out_dir=out_dir, progress=False)


# -- tests ------------------------------------------------------------------------------------------------
def test_loop_end_to_end_with_scripted_engineer(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, engineer={"kind": "self", "context": "V6"})
    chat = ScriptedChat(SCRIPT)
    run = prepare(tmp_path / "run", sets)
    summary = run_experiment(exp, run, components=Components(engineer_factory=scripted_factory(chat)))
    rd = RunDir(run)

    # every stage recorded exactly once, in order, then the benchmark
    keys = [(e.round, e.stage) for e in rd.entries()]
    assert keys == [(r, s) for r in range(3) for s in ROUND_STAGES] + [(None, "benchmark")]
    assert summary["n"] == len(load_instances(sets["benchmark"]))

    # round 1: three rejected answers, then the good one; every error recorded, nothing silent
    assert len(chat.requests) == 5
    proj1 = read_json(run / "round_01" / "projection.json")
    assert proj1["attempts"] == 4 and not proj1["fell_back"]
    errors = " ".join(proj1["errors"])
    assert "attempt 1" in errors and "attempt 2" in errors and "attempt 3" in errors
    assert 'no "sizes" entry' in errors and '"sizes" must be an object' in errors
    assert "size 5: hole_ratio 0.8 clipped to 0.5" in proj1["changes"]
    assert any("sizes.5.hole_ratio: 0.8 is out of range" in i for i in proj1["issues"])
    assert read_json(run / "round_01" / "proposal.raw.json")["sizes"]["4"]["hole_ratio"] == 0.2
    applied = RoundConfig.load(run / "round_01" / "config.applied.yaml")
    assert applied.sizes[4].hole_ratio == pytest.approx(0.2) and applied.sizes[4].wait_ratio == pytest.approx(
        0.6
    )
    assert applied.num_samples == 8 and applied.num_agents == 2
    assert any("filled from the previous" in c for c in proj1["changes"])  # sizes 5..10 came from round 0
    eng = run / "round_01" / "engineer"
    assert len(read_json(eng / "attempts.json")) == 4
    assert len(read_json(eng / "responses.json")) == 4
    assert (eng / "rationale.txt").read_text().strip() == GOOD_1["rationale"]
    assert "## user" in (eng / "prompt.md").read_text()

    # retries show the model its errors; round 2's prompt carries round 1's rationale (S) and history (H)
    assert "not closed" in chat.requests[1][-1]["content"]
    assert 'no "sizes" entry' in chat.requests[2][-1]["content"]
    assert '"sizes" must be an object' in chat.requests[3][-1]["content"]
    round2_prompt = "\n".join(m["content"] for m in chat.requests[4])
    assert GOOD_1["rationale"] in round2_prompt
    assert read_json(run / "round_02" / "projection.json")["attempts"] == 1
    assert RoundConfig.load(run / "round_02" / "config.applied.yaml").sizes[5].hole_ratio == pytest.approx(
        0.1
    )

    # round 0 is the random default; each round's data follow its configuration and avoid held-out boards
    assert read_json(run / "round_00" / "projection.json")["source"] == "round0"
    held_out = {i.board_hash() for i in load_instances(sets["benchmark"])}
    held_out |= {i.board_hash() for i in load_instances(sets["validation"])}
    for r in range(3):
        rows = read_jsonl(run / f"round_{r:02d}" / "dataset" / "manifest.jsonl")
        assert len(rows) == 8 and not {row["board_hash"] for row in rows} & held_out
        cfg = RoundConfig.load(run / f"round_{r:02d}" / "config.applied.yaml")
        per_size = {n: c for n, (c, _) in cfg.allocation().items() if c}
        got: dict[int, int] = {}
        for row in rows:
            got[row["size"]] = got.get(row["size"], 0) + 1
        assert got == per_size
        assert read_json(run / f"round_{r:02d}" / "train" / "metrics.json")["skipped"]
        val = read_jsonl(run / f"round_{r:02d}" / "validation" / "responses.jsonl")
        assert len({v["id"] for v in val}) == len(val) == len(load_instances(sets["validation"]))
    assert (run / "benchmark" / "table.md").read_text().startswith("### t-loop")
    assert read_json(run / "benchmark" / "scores.json")["summary"] == summary


def test_fixed_engineer_reproduces_round0(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=3, engineer={"kind": "fixed"})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run)
    configs = [RoundConfig.load(run / f"round_{r:02d}" / "config.applied.yaml") for r in range(3)]
    assert configs[0] == configs[1] == configs[2]
    assert all(read_json(run / f"round_{r:02d}" / "projection.json")["changes"] == [] for r in (1, 2))
    # same configuration, different data seed per round: the rounds are not copies of each other
    ids = [
        [row["board_hash"] for row in read_jsonl(run / f"round_{r:02d}" / "dataset" / "manifest.jsonl")]
        for r in range(3)
    ]
    assert ids[0] != ids[1]


def test_start_validation_is_the_learning_curves_first_point(tmp_path: Path, sets: dict[str, Path]) -> None:
    from envengineer.loop.report import load_run, write_report

    exp = make_experiment(sets, rounds=1, validation={"start": True})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run)
    done = RunDir(run).done()
    assert (None, "start_validation") in done
    start = read_json(run / "start" / "validation" / "scores.json")
    assert start["summary"]["n"] == len(load_instances(run / "validation_set.jsonl"))
    assert load_run(run).start_validation == start
    report = write_report(run).read_text(encoding="utf-8")
    assert "| start (model before round 0) |" in report
    # resume does not repeat it
    entries = len(read_jsonl(run / "ledger.jsonl"))
    run_experiment(None, run, resume=True)
    assert len(read_jsonl(run / "ledger.jsonl")) == entries


def test_random_and_threshold_engineers_run(tmp_path: Path, sets: dict[str, Path]) -> None:
    for kind in ("random", "threshold"):
        exp = make_experiment(sets, name=f"t-{kind}", rounds=2, engineer={"kind": kind})
        run = prepare(tmp_path / kind, sets)
        run_experiment(exp, run)
        assert RunDir(run).is_done(None, "benchmark")
        assert read_json(run / "round_01" / "projection.json")["source"] == f"engineer:{kind}"
    c0 = RoundConfig.load(tmp_path / "random" / "round_00" / "config.applied.yaml")
    c1 = RoundConfig.load(tmp_path / "random" / "round_01" / "config.applied.yaml")
    assert c0 != c1


def test_engineer_that_never_succeeds_keeps_previous_config(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=2, engineer={"kind": "self"})
    chat = ScriptedChat(["not a configuration"] * 10)
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(engineer_factory=scripted_factory(chat, retries=1)))
    proj = read_json(run / "round_01" / "projection.json")
    assert proj["fell_back"] and proj["attempts"] == 2 and proj["fallback_reason"]
    assert RoundConfig.load(run / "round_01" / "config.applied.yaml") == RoundConfig.load(
        run / "round_00" / "config.applied.yaml"
    )


def test_rounds_zero_is_evaluation_only(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=0)
    run = prepare(tmp_path / "run", sets)
    summary = run_experiment(exp, run)
    assert [(e.round, e.stage) for e in RunDir(run).entries()] == [(None, "benchmark")]
    assert summary["valid"] >= 0


def test_training_chain_and_warm_start(tmp_path: Path, sets: dict[str, Path]) -> None:
    """Each round trains from the previous round's checkpoint; the warm-start's checkpoint feeds round 0."""
    calls: list[tuple[str, str | None, int]] = []

    def trainer(
        model: Any, instances: Any, *, out_dir: Path, preset: str, epochs: float, seed: int, max_steps: Any
    ) -> dict[str, Any]:
        calls.append(("train", model, len(instances)))
        return {
            "checkpoint": str(out_dir / "checkpoint"),
            "steps": 3,
            "seconds": 0.1,
            "metrics": {"log_history": [{"reward": 0.1 * len(calls), "step": 1}]},
        }

    def warm(
        model: Any, instances: Any, *, out_dir: Path, preset: str, seed: int, max_steps: Any
    ) -> dict[str, Any]:
        calls.append(("warm", model, len(instances)))
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 5, "seconds": 0.1}

    seen: list[Any] = []

    def evaluator(
        model: Any, instances: Any, *, out_dir: Path, experiment: Any, seed: int, progress: bool
    ) -> Any:
        from envengineer.evaluation import evaluate
        from envengineer.models import load_backend

        seen.append(model)
        return evaluate(
            load_backend("scripted", "greedy", instances=instances),
            instances,
            out_dir=out_dir,
            progress=False,
        )

    exp = make_experiment(
        sets, policy=None, model="base-model", rounds=2, warm_start={"enabled": True, "samples": 6}
    )
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(trainer=trainer, evaluator=evaluator, warm_starter=warm))
    assert calls == [
        ("warm", "base-model", 6),
        ("train", str(run / "warm_start" / "checkpoint"), 8),
        ("train", str(run / "round_00" / "train" / "checkpoint"), 8),
    ]
    assert seen == [
        str(run / "round_00" / "train" / "checkpoint"),
        str(run / "round_01" / "train" / "checkpoint"),
        str(run / "round_01" / "train" / "checkpoint"),
    ]
    assert read_json(run / "round_01" / "train" / "metrics.json")["model_in"] == str(
        run / "round_00" / "train" / "checkpoint"
    )
    assert RunDir(run).entries()[0].stage == "warm_start"


def test_request_carries_history_and_training_details(tmp_path: Path, sets: dict[str, Path]) -> None:
    requests: list[Any] = []

    class Recorder:
        name = "recorder"

        def propose(self, request: Any) -> Any:
            from envengineer.engineer.engineers import FixedEngineer

            requests.append(request)
            return FixedEngineer(request.config).propose(request)

    exp = make_experiment(
        sets, rounds=3, engineer={"kind": "self", "context": {"variant": "V6", "T": "full"}}
    )
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(engineer_factory=lambda *a, **k: Recorder()))
    assert [r.round_index for r in requests] == [0, 1]
    last = requests[-1]
    assert [h.round_index for h in last.history] == [0] and last.history[0].is_default
    assert last.report["summary"]["n"] == len(load_instances(sets["validation"]))
    assert "verdicts" not in last.report
    assert last.training["total_rounds"] == 3 and last.training["num_samples"] == 8
    assert last.context.training_details == "full"


def test_refuses_to_overwrite_and_resume_needs_a_run(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=1)
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run)
    with pytest.raises(ConfigError, match="--resume"):
        run_experiment(exp, run)
    with pytest.raises(ConfigError, match="holds no run"):
        run_experiment(None, tmp_path / "empty", resume=True)
    # resuming a finished run does nothing and changes nothing
    before = (run / "ledger.jsonl").read_text()
    run_experiment(None, run, resume=True)
    assert (run / "ledger.jsonl").read_text() == before
    with pytest.raises(ConfigError, match="differs"):
        run_experiment(make_experiment(sets, rounds=2), run, resume=True)


def test_plan_counts() -> None:
    exp = Experiment.model_validate(
        {
            "name": "p",
            "rounds": 3,
            "samples_per_round": 4000,
            "epochs_per_round": 2,
            "validation": {"per_cell": 4},
        }
    )
    p = plan(exp)
    assert p["validation_instances"] == 21 * 3 * 4
    assert p["benchmark_instances"] == 3150
    assert p["eval_responses"] == 3 * 252 + 3150
    assert p["training_instances"] == 12000
    assert p["engineer_calls"] == 2
    # validation.start answers the set once more, before round 0; a stratified benchmark part is smaller
    started = exp.model_copy(
        update={
            "validation": exp.validation.model_copy(update={"start": True}),
            "evaluation": exp.evaluation.model_copy(update={"benchmark_per_cell": 10}),
        }
    )
    assert plan(started)["eval_responses"] == 4 * 252 + 630


def test_cpu_time_estimate() -> None:
    from envengineer.loop.demo import demo_experiment
    from envengineer.loop.plan import CPU_RATES

    r = CPU_RATES
    demo = plan(demo_experiment(smollm2=True))
    # 3 rounds x 2 GRPO steps, 3 x 8 validation + 21 benchmark answers, 2 engineer answers, 3 rounds
    want = 6 * r["grpo_step"] + 45 * r["eval_answer"] + 2 * r["engineer_answer"] + 3 * r["round_overhead"]
    assert demo["cpu_seconds"] == pytest.approx(want)
    fixed = plan(
        demo_experiment(smollm2=True).model_copy(update={"engineer": EngineerSettings(kind="fixed")})
    )
    assert fixed["cpu_seconds"] == pytest.approx(want - 2 * r["engineer_answer"])
    assert plan(Experiment.model_validate({"name": "m", "model": "/models/qwen3-4b"}))["cpu_seconds"] is None
    gpu = Experiment.model_validate({"name": "g", "training": {"preset": "gpu"}})
    assert plan(gpu)["cpu_seconds"] is None
    assert plan(Experiment.model_validate({"name": "s", "policy": "scripted:greedy"}))["cpu_seconds"] == 0


def test_cpu_time_estimate_of_the_small_policy_demo() -> None:
    from envengineer.loop.demo import demo_experiment
    from envengineer.loop.plan import SMALL_POLICY_CPU_RATES

    r = SMALL_POLICY_CPU_RATES
    p = plan(demo_experiment())
    # 3 x 150 SFT steps of the rounds (the packaged trainee needs no warm-start), (1 + 3) x 288 validation
    # answers (the start's too) + 3 x 128 probe answers + 630 benchmark answers, 2 engineer answers
    want = (
        450 * r["sft_step"]
        + (4 * 288 + 3 * 128 + 630) * r["eval_answer"]
        + 2 * r["engineer_answer"]
        + 3 * r["round_overhead"]
    )
    assert p["cpu_seconds"] == pytest.approx(want)
    other = demo_experiment().model_copy(update={"model": "policy:small"})
    assert plan(other)["cpu_seconds"] is None  # no rate was measured for it


def test_select_benchmark_and_seeds() -> None:
    from envengineer.mapf.instance import Instance

    g = ("...", "...", "...")
    insts = [
        Instance(f"i{k}", g, ((0, 0), (0, 2)), ((0, 2), (0, 0)), meta={"subset": s})
        for k, s in enumerate(["a", "a", "b", "a", "b"])
    ]
    assert [i.meta["subset"] for i in select_benchmark(insts, 1)] == ["a", "b"]  # one per cell, drawn
    assert len(select_benchmark(insts, None)) == 5
    seeds = {round_seed(0, p, r) for p in ("data", "training") for r in range(5)}
    assert len(seeds) == 10


def test_cli_run_dry_run_and_plumbing(
    tmp_path: Path, sets: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    from envengineer.cli import main

    exp_file = tmp_path / "exp.yaml"
    exp_file.write_text(make_experiment(sets, rounds=1).to_yaml())
    assert main(["run", str(exp_file), "--dry-run", "--set", "rounds=2"]) == 0
    out = capsys.readouterr().out
    assert "rounds:      2" in out and "validation" in out
    run = prepare(tmp_path / "run", sets)
    assert main(["run", str(exp_file), "--out", str(run), "--no-progress", "--no-report"]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["run", str(exp_file), "--out", str(run)]) == 2  # refuses to overwrite: one-line error
    assert "--resume" in capsys.readouterr().err
    assert main(["run", "--schema"]) == 0
    assert '"samples_per_round"' in capsys.readouterr().out


def test_runner_rebuilds_state_from_disk(tmp_path: Path, sets: dict[str, Path]) -> None:
    exp = make_experiment(sets, rounds=2, engineer={"kind": "random"})
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run)
    runner = LoopRunner.resume(run)
    runner.run()
    assert [s.config for s in runner.rounds] == [
        RoundConfig.load(run / f"round_{r:02d}" / "config.applied.yaml") for r in range(2)
    ]
    assert runner.rounds[1].validation == read_json(run / "round_01" / "validation" / "scores.json")


@pytest.mark.slow
def test_loop_with_real_training_evaluation_and_self_engineer(tmp_path: Path, sets: dict[str, Path]) -> None:
    """The default components end to end: TRL GRPO on a tiny in-memory model, HF evaluation, the model as
    its own engineer (its answers are noise, so it falls back; what matters is that everything is wired)."""
    pytest.importorskip("trl")
    try:
        from test_training import build_tiny_model, write_tiny_grpo_preset
    except ImportError:
        pytest.skip("tests/test_training.py (the tiny model) is not importable")
    from envengineer.mapf.config import ConfigSpace

    model = build_tiny_model(tmp_path / "tiny")
    preset = write_tiny_grpo_preset(tmp_path / "grpo-tiny.yaml")
    exp = make_experiment(
        sets, policy=None, model=str(model), rounds=2, samples_per_round=2,
        training={"preset": str(preset), "max_steps": 1},
        evaluation={"max_new_tokens": 8, "batch_size": 9, "benchmark_per_cell": 1},
        engineer={"kind": "self", "max_new_tokens": 24, "retries": 0},
    )  # fmt: skip
    run = prepare(tmp_path / "run", sets)
    run_experiment(exp, run, components=Components(space=ConfigSpace(sizes=(3, 4))))
    rd = RunDir(run)
    assert rd.is_done(None, "benchmark")
    m0 = read_json(run / "round_00" / "train" / "metrics.json")
    m1 = read_json(run / "round_01" / "train" / "metrics.json")
    assert m0["steps"] == 1 and Path(m0["checkpoint"]).is_dir()
    assert m1["model_in"] == m0["checkpoint"]
    assert m0["metrics"]["log_history"]
    proj = read_json(run / "round_01" / "projection.json")
    assert proj["attempts"] == 1 and (run / "round_01" / "engineer" / "prompt.json").exists()
    assert read_json(run / "round_01" / "engineer" / "decision.json")["engineer"] == "self"
    rows = read_jsonl(run / "benchmark" / "responses.jsonl")
    assert rows and all(row.get("completion_tokens") for row in rows)


def test_demo_dry_run(capsys: pytest.CaptureFixture) -> None:
    from envengineer.cli import main

    assert main(["demo", "--smollm2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cpu-demo-smollm2" in out and "self, 2 proposal(s)" in out and "21 benchmark instances" in out
    assert "about 10 min on 2 idle CPU cores" in out
    assert main(["demo", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "policy:trainee" in out and "base, 2 proposal(s)" in out and "630 benchmark instances" in out


def test_warm_start_is_trained_once_and_reused(
    tmp_path: Path, sets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []

    def warm(model: Any, instances: Any, *, out_dir: Path, preset: str, seed: int, max_steps: Any) -> Any:
        calls.append(str(out_dir))
        ckpt = out_dir / "checkpoint"
        ckpt.mkdir(parents=True)
        (ckpt / "weights.bin").write_text("sft")
        return {"checkpoint": str(ckpt), "steps": 2, "seconds": 0.1}

    models: list[Any] = []

    def trainer(model: Any, instances: Any, **kw: Any) -> Any:
        models.append(model)
        return {"checkpoint": str(kw["out_dir"] / "checkpoint"), "steps": 1}

    exp = make_experiment(
        sets, policy=None, model="m", rounds=1, warm_start={"enabled": True, "samples": 4, "cache": True}
    )
    for name in ("a", "b"):
        run = prepare(tmp_path / name, sets)
        run_experiment(exp, run, components=Components(warm_starter=warm, trainer=trainer, evaluator=greedy))
    assert len(calls) == 1
    cached = read_json(tmp_path / "b" / "warm_start" / "metrics.json")
    assert cached["cached_from"].startswith(str(tmp_path / "cache"))
    assert models[1] == cached["checkpoint"] and (Path(cached["checkpoint"]) / "weights.bin").exists()
    # different settings: a different cache entry
    other = make_experiment(
        sets, policy=None, model="m", rounds=1, warm_start={"enabled": True, "samples": 5, "cache": True}
    )
    run_experiment(
        other,
        prepare(tmp_path / "c", sets),
        components=Components(warm_starter=warm, trainer=trainer, evaluator=greedy),
    )
    assert len(calls) == 2
