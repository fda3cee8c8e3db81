"""The learnability baseline, the trust region on proposals and the L context module (sampled success)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envengineer.engineer.context import ContextSpec, render_learnability
from envengineer.engineer.curriculum import LearnabilityCurriculum, ThresholdCurriculum
from envengineer.engineer.decision import EngineerRequest
from envengineer.engineer.engineers import make_engineer
from envengineer.engineer.prompt import context_sections
from envengineer.engineer.trust_region import TrustRegion, apply_trust_region
from envengineer.errors import ConfigError
from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.plan import preflight
from envengineer.loop.rundir import read_json
from envengineer.loop.runner import run_experiment
from envengineer.mapf.config import RoundConfig
from small_sets import write_small_sets

pytest.importorskip("envengineer.evaluation")


def _config(**sizes: tuple[float, float, float]) -> RoundConfig:
    return RoundConfig.model_validate(
        {
            "sizes": {
                n[1:]: {"data_ratio": d, "hole_ratio": h, "wait_ratio": w} for n, (d, h, w) in sizes.items()
            },
            "num_agents": 2,
            "num_samples": 100,
        }
    )


# -- learnability -----------------------------------------------------------------------------------------
def test_learnability_moves_the_ladder_by_sampled_success_and_weights_data_by_p_one_minus_p() -> None:
    cfg = _config(s3=(1, 0.1, 0.2), s4=(1, 0.1, 0.2), s5=(1, 0.1, 0.2))
    sampled = {
        "3": {"completions": 64, "valid": 0.95, "optimal": 0.9, "zero_std": 0.9},  # too easy: up
        "4": {"completions": 64, "valid": 0.5, "optimal": 0.4, "zero_std": 0.1},  # the frontier: stay
        "5": {"completions": 64, "valid": 0.05, "optimal": 0.0, "zero_std": 0.95},  # too hard: down
    }
    engineer = LearnabilityCurriculum(momentum=0.0, floor=0.0)
    d = engineer.propose(EngineerRequest(0, cfg, None, sampled=sampled))
    # ladder levels (0.0, 0.0) (0.1, 0.2) (0.2, 0.4): 3x3 one level up, 4x4 stays, 5x5 one level down
    assert (d.config.sizes[3].hole_ratio, d.config.sizes[3].wait_ratio) == (0.2, 0.4)
    assert (d.config.sizes[4].hole_ratio, d.config.sizes[4].wait_ratio) == (0.1, 0.2)
    assert (d.config.sizes[5].hole_ratio, d.config.sizes[5].wait_ratio) == (0.0, 0.0)
    # data weights 4 p (1 - p): 0.19, 1.0, 0.19 -> normalised 0.137, 0.725, 0.137
    ratios = d.config.normalised_ratios()
    assert ratios[4] == pytest.approx(1.0 / 1.38, abs=2e-3)
    assert ratios[3] == pytest.approx(ratios[5], abs=2e-3) == pytest.approx(0.19 / 1.38, abs=2e-3)
    assert d.engineer == "learnability" and d.details["baseline"] == "learnability"
    assert d.details["sizes"]["3"]["rate"] == 0.95


def test_learnability_reads_validation_where_a_size_was_not_sampled_and_skips_damaged_entries() -> None:
    cfg = _config(s3=(1, 0.1, 0.2), s4=(0, 0.1, 0.2))
    report = {"table": {"2": {"sizes": {"3": {"n": 10, "valid": 10.0, "optimal": 10.0},
                                        "4": {"n": 10, "valid": 90.0, "optimal": 80.0}}}}}  # fmt: skip
    sampled = {"3": {"completions": 64, "valid": 0.5, "optimal": 0.5}, "4": {"valid": "?"}, "x": {}}
    rates = LearnabilityCurriculum().rates_of(EngineerRequest(0, cfg, report, sampled=sampled))
    assert rates[3]["valid"] == 50.0  # sampled wins
    assert rates[4]["valid"] == 90.0  # damaged sampled entry: the validation rate
    # the threshold ladder ignores the sampled figures and reads validation only
    assert ThresholdCurriculum().rates_of(EngineerRequest(0, cfg, report, sampled=sampled)) is None


def test_learnability_is_built_from_experiment_settings_and_checked_in_preflight() -> None:
    assert make_engineer("learnability", upper=0.7).upper == 0.7
    with pytest.raises(ConfigError, match="unknown learnability option"):
        make_engineer("learnability", uper=0.7)
    exp = Experiment.model_validate(
        {
            "name": "t",
            "policy": "scripted:greedy",
            "engineer": {"kind": "learnability", "options": {"upper": 2}},
        }
    )
    with pytest.raises(ConfigError, match=r"engineer\.options"):
        preflight(exp)


# -- trust region -----------------------------------------------------------------------------------------
def test_trust_region_bounds_every_knob_and_keeps_the_data_direction() -> None:
    prev = _config(s3=(0.25, 0.1, 0.5), s4=(0.25, 0.1, 0.5), s5=(0.5, 0.3, 0.5))
    prop = _config(s3=(0.0, 0.5, 1.0), s4=(0.0, 0.0, 0.0), s5=(1.0, 0.3, 0.6))
    cfg, changes = apply_trust_region(prev, prop, TrustRegion(data_ratio=0.1, hole_ratio=0.1, wait_ratio=0.2))
    r = cfg.normalised_ratios()
    # the largest proposed move is 5x5: +0.5; a common step of 0.1 / 0.5 = 0.2 moves every size a fifth
    assert [round(r[n], 4) for n in (3, 4, 5)] == [0.2, 0.2, 0.6]
    assert sum(r.values()) == pytest.approx(1.0)
    assert (cfg.sizes[3].hole_ratio, cfg.sizes[3].wait_ratio) == (0.2, 0.7)
    assert (cfg.sizes[4].hole_ratio, cfg.sizes[4].wait_ratio) == (0.0, 0.3)
    assert (cfg.sizes[5].hole_ratio, cfg.sizes[5].wait_ratio) == (0.3, 0.6)  # within bounds: as proposed
    knobs = {(c["size"], c["knob"]) for c in changes}
    assert knobs == {(3, "data_ratio"), (4, "data_ratio"), (5, "data_ratio"), (3, "hole_ratio"),
                     (3, "wait_ratio"), (4, "wait_ratio")}  # fmt: skip
    same, none = apply_trust_region(prev, prev, TrustRegion())
    assert none == [] and same.normalised_ratios() == prev.normalised_ratios()


def test_trust_region_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TrustRegion(hole_ratio=0.0)


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_small_sets(tmp_path_factory.mktemp("sets"), 11)


def _experiment(sets: dict[str, Path], **engineer: Any) -> Experiment:
    return Experiment.model_validate(
        {
            "name": "t-trust",
            "policy": "scripted:greedy",
            "rounds": 2,
            "samples_per_round": 8,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
            "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
            "engineer": engineer,
        }
    )


def test_the_loop_applies_and_records_the_trust_region(tmp_path: Path, sets: dict[str, Path]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    exp = _experiment(
        sets, kind="random", trust_region={"data_ratio": 0.05, "hole_ratio": 0.05, "wait_ratio": 0.05}
    )
    run_experiment(exp, run)
    c0 = RoundConfig.load(run / "round_00" / "config.applied.yaml")
    c1 = RoundConfig.load(run / "round_01" / "config.applied.yaml")
    projection = read_json(run / "round_01" / "projection.json")
    assert projection["trust_region"]["changes"], "a random proposal moves further than 0.05"
    assert projection["config"] == c1.model_dump(mode="json")
    r0, r1 = c0.normalised_ratios(), c1.normalised_ratios()
    for n in c1.sizes:
        assert abs(r1[n] - r0[n]) <= 0.05 + 1e-3
        assert abs(c1.sizes[n].hole_ratio - c0.sizes[n].hole_ratio) <= 0.05 + 1e-9
        assert abs(c1.sizes[n].wait_ratio - c0.sizes[n].wait_ratio) <= 0.05 + 1e-9
    assert "trust_region" not in read_json(run / "round_00" / "projection.json")


def test_the_loop_hands_the_rounds_sampled_stats_to_the_engineer(
    tmp_path: Path, sets: dict[str, Path]
) -> None:
    requests: list[Any] = []
    sampled = {"3": {"completions": 8, "valid": 0.5, "optimal": 0.25, "groups": 1, "zero_std": 0.0}}

    def trainer(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> dict[str, Any]:
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 1, "metrics": {"sampled": sampled}}

    class Recorder:
        name = "recorder"

        def propose(self, request: Any) -> Any:
            requests.append(request)
            return LearnabilityCurriculum().propose(request)

    def evaluator(model: Any, instances: Any, *, out_dir: Path, **kw: Any) -> Any:
        from envengineer.evaluation import evaluate
        from envengineer.models import load_backend

        return evaluate(load_backend("scripted", "greedy", instances=instances), instances, out_dir=out_dir)

    exp = _experiment(sets, kind="learnability").model_copy(update={"policy": None, "model": "m"})
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    comps = Components(trainer=trainer, evaluator=evaluator, engineer_factory=lambda *a, **k: Recorder())
    run_experiment(exp, run, components=comps)
    assert requests and requests[0].sampled == sampled


# -- the L context module ---------------------------------------------------------------------------------
def test_the_l_module_is_off_in_the_papers_variants_and_renders_the_sampled_table() -> None:
    from envengineer.loop.context_settings import ContextSettings

    assert ContextSettings.model_validate("V6").switches()["L"] is False
    spec = ContextSpec.from_switches(ContextSettings.model_validate({"variant": "V6", "L": True}).switches())
    assert spec.learnability and spec.label.endswith("+L")
    sampled = {"4": {"completions": 64, "valid": 0.5, "optimal": 0.25, "zero_std": 0.125}}
    text = render_learnability(sampled)
    assert "| 4x4 | 64 | 50.0 | 25.0 | 12.5 |" in text
    assert "No training samples" in render_learnability(None)
    cfg = _config(s4=(1, 0.1, 0.2))
    on = [code for code, _ in context_sections(EngineerRequest(0, cfg, None, context=spec, sampled=sampled))]
    off = [code for code, _ in context_sections(EngineerRequest(0, cfg, None, context="V6", sampled=sampled))]
    assert on[:2] == ["F", "L"] and "L" not in off
