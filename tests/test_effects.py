"""The E context module (:mod:`envengineer.engineer.effects`): what each round's change did, per size.

Every expected number is computed by hand in the comments from the configurations and reports below.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

from envengineer.engineer import EngineerRequest, HistoryEntry, context_sections, context_spec
from envengineer.engineer.context import V6, ContextSpec
from envengineer.engineer.effects import TITLE, render_effects
from envengineer.engineer.prompt import build_messages, build_user_prompt
from envengineer.loop.context_settings import CONTEXT_VARIANTS, ContextSettings
from envengineer.loop.experiment import load_experiment
from envengineer.loop.rundir import RunDir
from envengineer.loop.stages.config import build_request
from envengineer.loop.state import RoundState
from envengineer.mapf.config import ConfigSpace, RoundConfig

ROOT = Path(__file__).resolve().parents[1]


def report(cells: dict[int, tuple[tuple[int, float], tuple[int, float]]]) -> dict:
    """``{size: ((n, valid %) with 2 agents, (n, valid %) with 3 agents)}`` as a ScoreReport JSON."""
    table: dict = {"2": {"sizes": {}}, "3": {"sizes": {}}}
    for size, per_agents in cells.items():
        for agents, (n, valid) in zip(("2", "3"), per_agents, strict=True):
            table[agents]["sizes"][str(size)] = {"n": n, "valid": valid, "optimal": valid / 2}
    return {"table": table, "failures": {}}


def config(sizes: dict[int, tuple[float, float, float]]) -> RoundConfig:
    """``{size: (data_ratio, hole_ratio, wait_ratio)}`` as a RoundConfig."""
    return RoundConfig.model_validate(
        {
            "sizes": {
                str(n): {"data_ratio": d, "hole_ratio": h, "wait_ratio": w} for n, (d, h, w) in sizes.items()
            }
        }
    )


# Data shares: C0 0.5/0.25/0.25, C1 0.2/0.4/0.4, C2 1:2:1 -> 0.25/0.5/0.25 (normalised).
C0 = config({3: (0.5, 0.0, 0.0), 4: (0.25, 0.1, 0.2), 5: (0.25, 0.2, 0.5)})
C1 = config({3: (0.2, 0.1, 0.0), 4: (0.4, 0.1, 0.3), 5: (0.4, 0.25, 0.5)})
C2 = config({3: (1, 0.1, 0.25), 4: (2, 0.2, 0.3), 5: (1, 0.25, 0.5)})
# Valid % pooled over the two agent counts (4 instances each): the mean of the pair.
R0 = report({3: ((4, 100.0), (4, 50.0)), 4: ((4, 50.0), (4, 0.0)), 5: ((4, 25.0), (4, 0.0))})  # 75/25/12.5
R1 = report({3: ((4, 100.0), (4, 75.0)), 4: ((4, 75.0), (4, 25.0)), 5: ((4, 0.0), (4, 0.0))})  # 87.5/50/0
R2 = report({3: ((4, 100.0), (4, 50.0)), 4: ((4, 100.0), (4, 50.0)), 5: ((4, 25.0), (4, 25.0))})  # 75/75/25
SAMPLED = {"3": {"completions": 64, "valid": 0.75, "optimal": 0.5, "zero_std": 0.25}}
HISTORY = [HistoryEntry.from_report(0, C0, R0), HistoryEntry.from_report(1, C1, R1)]
CURRENT = HistoryEntry.from_report(2, C2, R2)


def request(context: ContextSpec | str | dict) -> EngineerRequest:
    return EngineerRequest(
        round_index=2,
        config=C2,
        report=R2,
        space=ConfigSpace(sizes=(3, 4, 5)),
        history=HISTORY,
        previous_rationale="More data on 4x4.",
        training={"total_rounds": 4, "epochs": 1},
        context=context_spec(context),
        sampled=SAMPLED,
        agents=(2, 3),
    )


HEADER = [
    TITLE,
    "",
    "Per size: how a round changed the knobs from the round before, and how the held-out valid % moved "
    "(points).",
    "",
]
TABLE_HEAD = ["| size | data_ratio | hole_ratio | wait_ratio | valid % |", "|---|---|---|---|---|"]
PAIR_01 = [
    "### Round 0 -> 1",
    "",
    *TABLE_HEAD,
    "| 3x3 | -0.300 | +0.100 | 0 | +12.5 |",  # share 0.5 -> 0.2, holes 0 -> 0.1, valid 75 -> 87.5
    "| 4x4 | +0.150 | 0 | +0.100 | +25.0 |",  # share 0.25 -> 0.4, waits 0.2 -> 0.3, valid 25 -> 50
    "| 5x5 | +0.150 | +0.050 | 0 | -12.5 |",  # share 0.25 -> 0.4, holes 0.2 -> 0.25, valid 12.5 -> 0
    "",
]
PAIR_12 = [
    "### Round 1 -> 2",
    "",
    *TABLE_HEAD,
    "| 3x3 | +0.050 | 0 | +0.250 | -12.5 |",  # share 0.2 -> 0.25, waits 0 -> 0.25, valid 87.5 -> 75
    "| 4x4 | +0.100 | +0.100 | 0 | +25.0 |",  # share 0.4 -> 0.5, holes 0.1 -> 0.2, valid 50 -> 75
    "| 5x5 | -0.150 | 0 | 0 | +25.0 |",  # share 0.4 -> 0.25, valid 0 -> 25
    "",
]


# -- the rendering ----------------------------------------------------------------------------------------
def test_three_rounds_give_two_pairs_and_the_last_rounds_extremes() -> None:
    assert render_effects(HISTORY, CURRENT) == "\n".join(
        [
            *HEADER,
            *PAIR_01,
            *PAIR_12,
            "Last round (1 -> 2): valid % rose most at 4x4 and 5x5 (+25.0) and fell most at 3x3 (-12.5).",
        ]
    )


def test_the_start_validation_is_the_first_point() -> None:
    # Start: 3x3 (100+50)/2 = 75, 4x4 (25+0)/2 = 12.5, 5x5 (50+0)/2 = 25; round 0: 75, 25, 12.5.
    start = report({3: ((4, 100.0), (4, 50.0)), 4: ((4, 25.0), (4, 0.0)), 5: ((4, 50.0), (4, 0.0))})
    assert render_effects([], HISTORY[0], start=start) == "\n".join(
        [
            *HEADER,
            "### Start -> round 0",
            "",
            *TABLE_HEAD,
            "| 3x3 | - | - | - | 0 |",  # the starting model trained on no configuration: no knob change
            "| 4x4 | - | - | - | +12.5 |",
            "| 5x5 | - | - | - | -12.5 |",
            "",
            "Last round (start -> round 0): valid % rose most at 4x4 (+12.5) and fell most at 5x5 (-12.5).",
        ]
    )


def test_an_unvalidated_round_is_skipped() -> None:
    # Round 1 has no report: the pair is round 0 -> 2, knobs from C0 to C2, valid 75/25/12.5 -> 75/75/25.
    history = [HISTORY[0], HistoryEntry.from_report(1, C1, None)]
    text = render_effects(history, CURRENT)
    assert "### Round 0 -> 2" in text and "### Round 0 -> 1" not in text
    assert "| 3x3 | -0.250 | +0.100 | +0.250 | 0 |" in text.splitlines()
    assert text.endswith("Last round (0 -> 2): valid % rose most at 4x4 (+50.0) and fell at no size.")


def test_fewer_than_two_validated_rounds_is_one_line() -> None:
    one_line = TITLE + "\n\nFewer than two validated rounds so far: no change to compare yet."
    assert render_effects([], HISTORY[0]) == one_line
    assert render_effects([HistoryEntry.from_report(0, C0, None)], HISTORY[1]) == one_line
    assert render_effects(HISTORY, HistoryEntry.from_report(2, C2, None)) == "\n".join(
        [
            *HEADER,
            *PAIR_01,
            "Last round (0 -> 1): valid % rose most at 4x4 (+25.0) and fell most at 5x5 (-12.5).",
        ]
    )


def test_the_numbers_agree_with_the_history_table() -> None:
    """H shows round 1's 5x5 at valid 0.0 and round 2's at 25.0; E's change is their difference."""
    prompt = build_user_prompt(request({"variant": "V6", "E": True}))
    assert "| 5x5 | 0.400 | 0.250 | 0.500 | 0.0 | 0.0 | - |" in prompt  # H, round 1
    assert "| 5x5 | 0.250 | 0.250 | 0.500 | 25.0 | 12.5 | - |" in prompt  # H, round 2
    assert "| 5x5 | -0.150 | 0 | 0 | +25.0 |" in prompt  # E, round 1 -> 2


# -- the switch -------------------------------------------------------------------------------------------
def test_the_switch_round_trips_and_stays_out_of_every_variant() -> None:
    spec = context_spec({"variant": "V6", "E": True})
    assert spec.effects and spec == V6.model_copy(update={"effects": True})
    assert spec.label == "F+G+H(without default)+S+T(bookkeeping)+E"
    assert spec.switches() == {**V6.switches(), "E": True}
    assert ContextSpec.from_switches(spec.switches()) == spec
    assert ContextSpec.from_switches({"E": True}).label == "E"
    assert "E" not in V6.switches()  # off: the switches (and the run keys made of them) are as before
    assert not any(context_spec(name).effects for name in CONTEXT_VARIANTS)
    settings = ContextSettings.model_validate({"variant": "V6", "L": True, "E": True})
    assert settings.switches() == {**CONTEXT_VARIANTS["V6"], "L": True, "E": True}
    assert ContextSettings.model_validate("V6").switches() == CONTEXT_VARIANTS["V6"]


def test_the_section_appears_only_with_the_switch() -> None:
    codes = [c for c, _ in context_sections(request({"variant": "V6", "L": True, "E": True}))]
    assert codes == ["F", "L", "G", "H", "E", "S", "T"]
    assert "E" not in [c for c, _ in context_sections(request("V6"))]
    assert TITLE in build_user_prompt(request({"variant": "V6", "E": True}))
    for name in ("V1", "V2", "V3", "V4", "V5", "V6", "V6-full"):
        assert TITLE not in build_user_prompt(request(name)), name
    assert TITLE not in build_user_prompt(request({"variant": "V6", "L": True}))


#: sha256 of ``json.dumps(build_messages(request(...)), sort_keys=True)``, computed from the code before the
#: E module existed: adding it must leave the method's prompts byte for byte as they were.
BEFORE_E = {
    "V6": "3457619dc2bf32caf1623f74109b4f495c67b36ea4de2ebf8657e4b549aef3e5",
    "V6+L": "c4ba25e2b56cdff2e0824165cde5f89b21a383e83d6ca8942bf17973d351ee39",
}


def test_the_methods_prompts_are_unchanged() -> None:
    for name, context in (("V6", "V6"), ("V6+L", {"variant": "V6", "L": True})):
        text = json.dumps(build_messages(request(context)), sort_keys=True)
        assert hashlib.sha256(text.encode()).hexdigest() == BEFORE_E[name], name


# -- the loop and the experiment file ---------------------------------------------------------------------
def _scores(valid3: float) -> dict:
    cell = {"n": 4, "valid": valid3, "optimal": 0.0}
    return {
        "summary": {"n": 4, "valid": valid3, "optimal": 0.0},
        "table": {"2": {"sizes": {"3": cell}, "sum": cell}},
        "failures": {},
    }


def test_the_loop_passes_the_start_validation_only_with_the_switch(tmp_path: Path) -> None:
    exp = load_experiment(ROOT / "experiments" / "cpu" / "policy-main-llm-effects.yaml")
    start = tmp_path / "start" / "validation" / "scores.json"
    start.parent.mkdir(parents=True)
    start.write_text(json.dumps({**_scores(50.0), "verdicts": [{"id": "x"}]}), encoding="utf-8")
    loop = SimpleNamespace(
        exp=exp,
        rd=RunDir(tmp_path),
        space=ConfigSpace(sizes=(3,)),
        rounds=[RoundState(0, config=config({3: (1, 0.1, 0.5)}), validation=_scores(75.0), source="round0")],
    )
    with_e = build_request(loop, 1)
    assert with_e.start_report == _scores(50.0)  # verdicts dropped
    assert "| 3x3 | - | - | - | +25.0 |" in build_user_prompt(with_e)
    loop.exp = exp.model_copy(
        update={"engineer": exp.engineer.model_copy(update={"context": ContextSettings.model_validate("V6")})}
    )
    assert build_request(loop, 1).start_report is None


def test_the_effects_experiment_is_the_llm_arm_with_e() -> None:
    arm = load_experiment(ROOT / "experiments" / "cpu" / "policy-main-llm.yaml")
    exp = load_experiment(ROOT / "experiments" / "cpu" / "policy-main-llm-effects.yaml")
    assert exp.engineer.context.switches() == {**arm.engineer.context.switches(), "E": True}
    engineer = exp.engineer.model_copy(update={"context": arm.engineer.context})
    assert (
        exp.model_copy(update={"name": arm.name, "description": arm.description, "engineer": engineer}) == arm
    )
