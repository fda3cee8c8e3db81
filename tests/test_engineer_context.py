"""The engineer's context modules: switches, variants, deterministic rendering and V1-V6 snapshots.

Regenerate the snapshots after an intended change of the prompt with

    ENVENGINEER_UPDATE_SNAPSHOTS=1 pytest tests/test_engineer_context.py

and review the diff of ``tests/snapshots/engineer_context_V*.txt`` before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envengineer.engineer import (
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    V6_FULL,
    VARIANTS,
    ContextSpec,
    EngineerRequest,
    HistoryEntry,
    context_sections,
    context_spec,
    per_size_failures,
    per_size_rates,
    render_context,
)
from envengineer.engineer.prompt import build_messages
from envengineer.errors import ConfigError
from envengineer.mapf.config import ConfigSpace, RoundConfig

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("ENVENGINEER_UPDATE_SNAPSHOTS") == "1"


def make_report(cells: dict[int, dict[int, tuple[int, float, float, dict[str, int]]]]) -> dict:
    """A ScoreReport JSON from ``{agents: {size: (n, valid %, optimal %, failure counts)}}``."""
    table, failures = {}, {}
    total_n = valid = optimal = 0.0
    for agents, sizes in cells.items():
        rows = {str(n): {"n": c[0], "valid": c[1], "optimal": c[2]} for n, c in sizes.items()}
        table[str(agents)] = {
            "sizes": rows,
            "sum": {k: round(sum(r[k] for r in rows.values()) / len(rows), 2) for k in ("valid", "optimal")},
        }
        failures[str(agents)] = {str(n): dict(c[3]) for n, c in sizes.items()}
        for c in sizes.values():
            total_n += c[0]
            valid += c[0] * c[1]
            optimal += c[0] * c[2]
    summary = {
        "n": int(total_n),
        "valid": round(valid / total_n, 2),
        "optimal": round(optimal / total_n, 2),
        "makespan_optimal": round(optimal / total_n, 2),
        "mean_tokens": 210.5,
    }
    return {"summary": summary, "table": table, "failures": failures, "verdicts": [{"id": "x"}]}


REPORT_0 = make_report(
    {
        3: {
            3: (6, 50.0, 33.33, {"out_of_bounds": 1, "hole": 2, "suboptimal": 1}),
            4: (6, 16.67, 16.67, {"hole": 3, "vertex_conflict": 2}),
            5: (6, 0.0, 0.0, {"parse_error": 1, "hole": 4, "goal_not_reached": 1}),
        },
        4: {
            4: (6, 0.0, 0.0, {"hole": 2, "vertex_conflict": 3, "swap_conflict": 1}),
            5: (6, 0.0, 0.0, {"agent_mismatch": 2, "hole": 4}),
        },
    }
)
REPORT_1 = make_report(
    {
        3: {
            3: (6, 83.33, 66.67, {"vertex_conflict": 1, "suboptimal": 1}),
            4: (6, 50.0, 33.33, {"hole": 1, "vertex_conflict": 1, "swap_conflict": 1, "suboptimal": 1}),
            5: (6, 16.67, 16.67, {"hole": 3, "goal_not_reached": 2}),
        },
        4: {
            4: (6, 16.67, 0.0, {"vertex_conflict": 4, "suboptimal": 1}),
            5: (6, 0.0, 0.0, {"hole": 5, "out_of_bounds": 1}),
        },
    }
)
CONFIG_0 = RoundConfig.model_validate(
    {
        "num_samples": 64,
        "sizes": {
            "3": {"data_ratio": 0.012, "hole_ratio": 0.167, "wait_ratio": 0.754},
            "4": {"data_ratio": 0.306, "hole_ratio": 0.309, "wait_ratio": 0.456},
            "5": {"data_ratio": 0.32, "hole_ratio": 0.31, "wait_ratio": 0.843},
            "6": {"data_ratio": 0.362, "hole_ratio": 0.179, "wait_ratio": 0.008},
        },
    }
)
CONFIG_1 = RoundConfig.model_validate(
    {
        "num_samples": 64,
        "sizes": {
            "3": {"data_ratio": 0.3, "hole_ratio": 0.1, "wait_ratio": 0.5},
            "4": {"data_ratio": 0.4, "hole_ratio": 0.2, "wait_ratio": 0.5},
            "5": {"data_ratio": 0.2, "hole_ratio": 0.2, "wait_ratio": 0.25},
            "6": {"data_ratio": 0.1, "hole_ratio": 0.3, "wait_ratio": 0.75},
        },
    }
)
TRAINING = {
    "total_rounds": 3,
    "epochs": 2,
    "algorithm": "GRPO (TRL GRPOTrainer)",
    "objective": "group-relative advantage, clipped policy ratio, no KL term",
    "reward": "graded: 1.0 optimal, 0.5 valid, 0 otherwise",
    "hyperparameters": {"learning_rate": 1e-6, "num_generations": 8, "beta": 0.0, "temperature": 1.0},
}


def make_request(context: ContextSpec | str) -> EngineerRequest:
    space = ConfigSpace(sizes=(3, 4, 5, 6))
    return EngineerRequest(
        round_index=1,
        config=CONFIG_1,
        report=REPORT_1,
        space=space,
        history=[HistoryEntry.from_report(0, CONFIG_0, REPORT_0)],
        previous_rationale=(
            "Most failures are holes on 4x4 and 5x5.\nI move data to 3x3 and 4x4 with fewer holes."
        ),
        training=TRAINING,
        context=context,
    )


def prompt_text(context: ContextSpec | str) -> str:
    return "\n\n".join(f"=== {m['role']} ===\n{m['content']}" for m in build_messages(make_request(context)))


# -- switches and variants --------------------------------------------------------------------------------
def test_variants_follow_the_papers_cumulative_ablation() -> None:
    assert V1.switches() == {
        "F": True,
        "G": False,
        "H": False,
        "H_default": False,
        "S": False,
        "T": "none",
        "L": False,
    }  # L is not a paper module: off in every variant
    assert V2.switches() == {**V1.switches(), "G": True}
    assert V3.switches() == {**V2.switches(), "H": True, "H_default": True}
    assert V4.switches() == {**V3.switches(), "H_default": False}
    assert V5.switches() == {**V4.switches(), "S": True}
    assert V6.switches() == {**V5.switches(), "T": "bookkeeping"}
    assert V6_FULL.switches() == {**V6.switches(), "T": "full"}
    assert ContextSpec() == V6  # the defaults are the final method
    assert [VARIANTS[k] for k in ("V1", "V2", "V3", "V4", "V5", "V6")] == [V1, V2, V3, V4, V5, V6]


def test_context_spec_accepts_names_switches_and_field_names() -> None:
    assert context_spec("V3") is V3
    assert context_spec({"variant": "V6", "T": "full"}) == V6_FULL
    assert context_spec({"F": True, "G": True}) == V2
    assert context_spec({"training_details": "full"}) == V6_FULL
    assert context_spec(V4.switches()) == V4
    assert ContextSpec.from_switches(V5.switches()) == V5
    with pytest.raises(ConfigError, match="unknown context variant"):
        context_spec("V7")
    with pytest.raises(ConfigError, match="unknown context switch"):
        context_spec({"X": True})
    with pytest.raises(ConfigError, match="training_details"):
        context_spec({"T": "verbose"})


def test_request_accepts_a_variant_name() -> None:
    assert make_request("V2").context == V2
    with pytest.raises(ConfigError, match="round_index"):
        EngineerRequest(round_index=-1, config=CONFIG_1, report=REPORT_1)


# -- what each module shows -------------------------------------------------------------------------------
def test_modules_appear_exactly_when_switched_on() -> None:
    codes = {name: [c for c, _ in context_sections(make_request(spec))] for name, spec in VARIANTS.items()}
    assert codes["V1"] == ["F"]
    assert codes["V2"] == ["F", "G"]
    assert codes["V3"] == codes["V4"] == ["F", "G", "H"]
    assert codes["V5"] == ["F", "G", "H", "S"]
    assert codes["V6"] == codes["V6-full"] == ["F", "G", "H", "S", "T"]


def test_history_with_and_without_the_default() -> None:
    with_default = render_context(make_request(V3))
    without = render_context(make_request(V4))
    assert "### Round 0 (the default starting configuration)" in with_default
    assert "Round 0" not in without
    assert "### Round 1 (the round that just finished)" in with_default
    assert "### Round 1 (the round that just finished)" in without


def test_training_details_bookkeeping_versus_full() -> None:
    book = dict(context_sections(make_request(V6)))["T"]
    full = dict(context_sections(make_request(V6_FULL)))["T"]
    assert "Round 1 of 3 has just finished" in book and "the last one" in book and "2 epochs" in book
    assert "GRPO" not in book and "learning_rate" not in book
    assert "GRPO" in full and "learning_rate=1e-06" in full and "Reward:" in full
    # Without T the prompt does not reveal the schedule or the algorithm.
    no_t = prompt_text(V5)
    assert "of 3" not in no_t and "GRPO" not in no_t and "epochs" not in no_t


def test_failure_breakdown_lists_rates_and_categories_per_size() -> None:
    text = dict(context_sections(make_request(V1)))["F"]
    assert "| 3x3 | 6 | 83.3 | 66.7 |" in text
    assert "### 4 agents (mean over sizes: valid 8.3%, optimal 0.0%)" in text
    assert "swap_conflict" in text and "two agents swap cells" in text
    assert "Overall: 30 instances" in text


def test_self_summary_and_empty_inputs() -> None:
    req = make_request(V6)
    empty = EngineerRequest(round_index=0, config=CONFIG_1, report=None, context=V6)
    text = render_context(empty)
    assert "No validation results are available." in text
    assert "None: this is your first proposal" in text
    assert "No earlier rounds to show." in text  # round 0 is the default and V6 leaves it out
    assert "> I move data to 3x3 and 4x4 with fewer holes." in render_context(req)


def test_pooled_rates_and_failures() -> None:
    rates = per_size_rates(REPORT_1)
    assert rates[4] == pytest.approx({"n": 12.0, "valid": (50.0 + 16.67) / 2, "optimal": 33.33 / 2})
    assert rates[3]["n"] == 6.0 and 6 not in rates
    assert per_size_failures(REPORT_1)[4] == {
        "hole": 1,
        "vertex_conflict": 5,
        "swap_conflict": 1,
        "suboptimal": 2,
    }
    assert per_size_rates(None) == {} and per_size_rates({"table": {"3": {"sizes": {"x": {}}}}}) == {}


def test_rendering_is_deterministic_and_ignores_dict_order() -> None:
    a = prompt_text(V6_FULL)
    shuffled = dict(reversed(list(REPORT_1.items())))
    req = make_request(V6_FULL)
    req2 = EngineerRequest(
        **{**req.__dict__, "report": shuffled, "training": dict(reversed(TRAINING.items()))}
    )
    b = "\n\n".join(f"=== {m['role']} ===\n{m['content']}" for m in build_messages(req2))
    assert a == b == prompt_text(V6_FULL)


def test_history_entry_round_trip() -> None:
    entry = HistoryEntry.from_report(0, CONFIG_1, REPORT_0)
    assert entry.is_default and "verdicts" not in entry.report
    assert HistoryEntry.from_dict(entry.to_dict()) == entry
    assert not HistoryEntry.from_report(2, CONFIG_1, None).is_default


# -- snapshots --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prompt_snapshot(variant: str) -> None:
    path = SNAPSHOTS / f"engineer_context_{variant}.txt"
    text = prompt_text(variant)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with ENVENGINEER_UPDATE_SNAPSHOTS=1 to write it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"the engineer prompt for {variant} changed; if intended, regenerate with "
        f"ENVENGINEER_UPDATE_SNAPSHOTS=1 and review the diff of {path.name}"
    )
