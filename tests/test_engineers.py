"""The engineers with a scripted fake model: retries, fallback, records; and the non-LLM baselines."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from envengineer.engineer import (
    V6,
    EngineerRequest,
    FixedEngineer,
    HistoryEntry,
    LLMEngineer,
    RandomEngineer,
    ThresholdCurriculum,
    answer_schema,
    make_engineer,
)
from envengineer.errors import ConfigError
from envengineer.mapf.config import ConfigSpace, RoundConfig, project, random_config, round0_config

SPACE = ConfigSpace(sizes=(3, 4, 5, 6))


@dataclass(frozen=True)
class FakeParams:
    """Stands in for ``envengineer.models.SamplingParams`` (same fields)."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    json_schema: dict | None = None


@dataclass(frozen=True)
class FakeCompletion:
    """Stands in for ``envengineer.models.Completion``."""

    text: str
    completion_tokens: int | None = None
    error: str | None = None


class ScriptedBackend:
    """Answers from a script, one item per request; an Exception item is raised."""

    name = "scripted-engineer"

    def __init__(self, script: Sequence[str | FakeCompletion | Exception]) -> None:
        self.script = list(script)
        self.calls: list[tuple[list[list[dict[str, str]]], Any]] = []

    def generate(self, conversations: Sequence[list[dict[str, str]]], params: Any) -> list[FakeCompletion]:
        self.calls.append(([list(c) for c in conversations], params))
        out = []
        for _ in conversations:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            out.append(item if isinstance(item, FakeCompletion) else FakeCompletion(item, len(item) // 4))
        return out


def knobs(d: float, h: float, w: float) -> dict[str, float]:
    return {"data_ratio": d, "hole_ratio": h, "wait_ratio": w}


BAD_JSON = 'My plan: {"sizes": {"3": {"data_ratio": 0.5, "hole_ratio": [0.1, "wait_ratio": 0.2}}}'
UNKNOWN_KEYS = json.dumps(
    {"rationale": "add walls", "sizes": {"3": {**knobs(0.5, 0.1, 0.2), "walls": 3}}, "learning_rate": 0.1}
)
OUT_OF_RANGE = json.dumps({"rationale": "max it out", "sizes": {"3": knobs(0.5, 0.9, 1.5)}})
GOOD_SIZES = {
    "3": knobs(0.2, 0.1, 0.2),
    "4": knobs(0.4, 0.2, 0.4),
    "5": knobs(0.3, 0.2, 0.5),
    "6": knobs(0.1, 0, 0),
}
GOOD = (
    "Frontier is 4x4.\n```json\n" + json.dumps({"rationale": "More 4x4 data.", "sizes": GOOD_SIZES}) + "\n```"
)
NO_SIZES = json.dumps({"rationale": "only words", "plan": "harder"})
SIZES_NOT_AN_OBJECT = json.dumps({"rationale": "bigger", "sizes": "larger maps please"})
SCRIPT = [BAD_JSON, NO_SIZES, SIZES_NOT_AN_OBJECT, GOOD]


def report(rates: dict[int, float], n: int = 10) -> dict[str, Any]:
    rows = {str(s): {"n": n, "valid": v, "optimal": v / 2} for s, v in rates.items()}
    return {
        "summary": {"n": n * len(rates), "valid": 0.0, "optimal": 0.0},
        "table": {"3": {"sizes": rows, "sum": {"valid": 0.0, "optimal": 0.0}}},
        "failures": {
            "3": {str(s): {"hole": round(n * (100 - v) / 100)} for s, v in rates.items() if v < 100}
        },
    }


PREVIOUS = RoundConfig.model_validate(
    {"num_samples": 32, "sizes": {str(n): knobs(0.25, 0.1, 0.2) for n in SPACE.sizes}}
)


def request(round_index: int = 1, config: RoundConfig = PREVIOUS, rates: dict[int, float] | None = None):
    return EngineerRequest(
        round_index=round_index,
        config=config,
        report=report(rates or {3: 90.0, 4: 40.0, 5: 5.0}),
        space=SPACE,
        history=[HistoryEntry.from_report(0, round0_config(0, SPACE, num_samples=32), report({3: 50.0}))],
        previous_rationale="Keep 3x3 easy.",
        training={"total_rounds": 3, "epochs": 2},
        context=V6,
    )


# -- the LLM engineer -------------------------------------------------------------------------------------
def test_unparseable_answers_retry_then_good_is_applied_with_every_attempt_recorded() -> None:
    backend = ScriptedBackend(SCRIPT)
    req = request()
    d = LLMEngineer(backend, "self", FakeParams(seed=5), max_retries=3).propose(req)
    assert not d.fell_back and d.fallback_reason is None
    assert [a.accepted for a in d.attempts] == [False, False, False, True]
    assert "could not be parsed" in d.attempts[0].errors[0]
    assert 'no "sizes" entry' in d.attempts[1].errors[0]
    assert '"sizes" must be an object' in d.attempts[2].errors[0] and "a string" in d.attempts[2].errors[0]
    assert d.rationale == "More 4x4 data."
    assert d.raw_proposal == {"sizes": GOOD_SIZES}
    assert d.config == project({"sizes": GOOD_SIZES}, PREVIOUS, SPACE).config
    assert d.config.sizes[4].data_ratio == pytest.approx(0.4) and d.config.num_samples == 32
    assert d.responses == SCRIPT and len(d.errors) == 3
    # each retry shows the failed answer and its errors; the first prompt carries the context
    convo = backend.calls[1][0][0]
    assert convo[:2] == d.prompt and convo[2] == {"role": "assistant", "content": BAD_JSON}
    assert convo[3]["role"] == "user" and d.attempts[0].errors[0] in convo[3]["content"]
    assert "## Validation results" in d.prompt[1]["content"] and "## Your rationale" in d.prompt[1]["content"]
    assert backend.calls[3][0][0][2]["content"] == SIZES_NOT_AN_OBJECT  # only the last failed exchange kept
    assert len(backend.calls[3][0][0]) == 4


def test_out_of_range_but_parseable_proposals_are_clipped_and_recorded_not_retried() -> None:
    """SPEC §3: values are clipped to their bounds and the change recorded; no retry, no fallback."""
    every_size_too_many_holes = json.dumps(
        {"rationale": "walls everywhere", "sizes": {str(n): knobs(1, 0.6, 0.5) for n in SPACE.sizes}}
    )
    for answer, clipped in (
        (
            every_size_too_many_holes,
            ["size 3: hole_ratio 0.6 clipped to 0.5", "size 6: hole_ratio 0.6 clipped"],
        ),
        (OUT_OF_RANGE, ["size 3: hole_ratio 0.9 clipped to 0.5", "size 3: wait_ratio 1.5 clipped to 1.0"]),
        (
            UNKNOWN_KEYS,
            ["size 3: dropped unknown key 'walls'", "dropped unknown top-level key 'learning_rate'"],
        ),
    ):
        backend = ScriptedBackend([answer])
        d = LLMEngineer(backend, "openai:x", FakeParams(), max_retries=2).propose(request())
        assert len(backend.calls) == 1 and not d.fell_back and d.attempts[0].accepted
        assert d.attempts[0].errors == ()
        assert d.attempts[0].issues and d.to_dict()["details"]["issues"] == list(d.attempts[0].issues)
        for change in clipped:
            assert any(c.startswith(change) for c in d.changes), (change, d.changes)
        assert d.raw_proposal == {k: v for k, v in json.loads(answer).items() if k != "rationale"}
        assert d.config == project(d.raw_proposal, PREVIOUS, SPACE).config
        assert all(s.hole_ratio <= 0.5 and s.wait_ratio <= 1 for s in d.config.sizes.values())
        rec = d.to_dict()
        assert rec["attempts"][0]["issues"] and rec["changes"] == list(d.changes)
    assert d.rationale == "add walls"


def test_too_few_retries_fall_back_to_the_previous_configuration_and_say_why() -> None:
    d = LLMEngineer(ScriptedBackend(SCRIPT), "self", FakeParams(), max_retries=2).propose(request())
    assert d.fell_back and d.config == PREVIOUS and d.rationale is None
    assert len(d.attempts) == 3 and not any(a.accepted for a in d.attempts)
    assert "3 attempt(s)" in d.fallback_reason and '"sizes" must be an object' in d.fallback_reason
    assert d.raw_proposal == {"sizes": "larger maps please"}
    rec = d.to_dict()
    assert rec["fell_back"] is True and rec["config"] == PREVIOUS.model_dump(mode="json")
    json.dumps(rec, allow_nan=False)


def test_backend_errors_are_failed_attempts_then_fallback() -> None:
    backend = ScriptedBackend(
        [
            FakeCompletion("", error="HTTP 503"),
            RuntimeError("CUDA out of memory"),
            FakeCompletion("partial", error="timeout"),
        ]
    )
    d = LLMEngineer(backend, "openai:x", FakeParams(), max_retries=2).propose(request())
    assert d.fell_back and d.config == PREVIOUS
    assert [a.backend_error for a in d.attempts] == [
        "HTTP 503",
        "RuntimeError: CUDA out of memory",
        "timeout",
    ]
    assert all(e.startswith("attempt") and "backend error" in e for e in d.errors)
    first = backend.calls[0][0][0]
    assert all(call[0][0] == first for call in backend.calls)  # the same prompt is sent again


def test_backend_error_then_good_answer() -> None:
    d = LLMEngineer(ScriptedBackend([FakeCompletion("", error="429"), GOOD]), "self", FakeParams()).propose(
        request()
    )
    assert not d.fell_back and len(d.attempts) == 2 and d.attempts[1].accepted


def test_constrained_decoding_schema_and_per_attempt_seeds() -> None:
    backend = ScriptedBackend([BAD_JSON, GOOD])
    LLMEngineer(backend, "self", FakeParams(seed=3)).propose(request())
    p0, p1 = backend.calls[0][1], backend.calls[1][1]
    assert p0.json_schema == answer_schema(SPACE) == p1.json_schema
    assert p0.seed != p1.seed
    backend2 = ScriptedBackend([BAD_JSON, GOOD])
    LLMEngineer(backend2, "self", FakeParams(seed=3)).propose(request())
    assert [c[1] for c in backend2.calls] == [p0, p1]  # replayable
    backend3 = ScriptedBackend([GOOD])
    LLMEngineer(backend3, "openai", FakeParams(), constrained=False).propose(request())
    assert backend3.calls[0][1].json_schema is None


def test_projection_changes_are_recorded() -> None:
    answer = json.dumps({"rationale": "only 3x3", "sizes": {"3": knobs(2.0, 0.1, 0.2)}})
    d = LLMEngineer(ScriptedBackend([answer]), "self", FakeParams()).propose(request())
    assert not d.fell_back
    assert any("size 4 missing" in c for c in d.changes) and any("renormalised" in c for c in d.changes)
    assert (d.config.sizes[4].hole_ratio, d.config.sizes[4].wait_ratio) == (0.1, 0.2)


def test_decision_to_dict_is_json_even_for_yaml_oddities() -> None:
    answer = "rationale: 2024-01-01\nsizes:\n  3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.2}\n"
    d = LLMEngineer(ScriptedBackend([answer]), "self", FakeParams()).propose(request())
    rec = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert rec["raw_proposal"] == {"sizes": {"3": knobs(1, 0.1, 0.2)}}
    assert rec["rationale"] == "2024-01-01" and rec["next_round"] == 2
    assert rec["context"]["label"] == V6.label and rec["prompt"][0]["role"] == "system"
    assert rec["attempts"][0]["source"] == "yaml" and rec["attempts"][0]["accepted"] is True


def test_llm_engineer_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="max_retries"):
        LLMEngineer(ScriptedBackend([]), "self", FakeParams(), max_retries=-1)


# -- baselines --------------------------------------------------------------------------------------------
def test_fixed_engineer_reproduces_round0_every_round() -> None:
    r0 = round0_config(11, SPACE, num_samples=32)
    eng = FixedEngineer(r0)
    config = r0
    for r in range(4):
        d = eng.propose(request(r, config))
        assert d.config == r0 and d.config.model_dump() == r0.model_dump() and not d.changes
        config = d.config
    json.dumps(d.to_dict(), allow_nan=False)


def test_random_engineer_is_deterministic_per_seed_and_round() -> None:
    a, b = RandomEngineer(7), RandomEngineer(7)
    c1, c2 = a.propose(request(1)).config, b.propose(request(1)).config
    assert c1 == c2
    assert a.propose(request(2)).config != c1
    assert RandomEngineer(8).propose(request(1)).config != c1
    expected = random_config(np.random.default_rng(np.random.SeedSequence((7, 1))), SPACE, num_samples=32)
    assert c1 == expected and c1.num_samples == 32 and set(c1.sizes) == set(SPACE.sizes)


def test_threshold_curriculum_moves_in_the_right_direction() -> None:
    start = RoundConfig.model_validate(
        {"num_samples": 32, "sizes": {str(n): knobs(0.25, 0.2, 0.4) for n in SPACE.sizes}}
    )
    cur = ThresholdCurriculum()
    d = cur.propose(request(1, start, {3: 90.0, 4: 40.0, 5: 5.0}))  # 6x6 not validated
    moves = d.details["sizes"]
    assert [moves[k]["move"] for k in ("3", "4", "5", "6")] == ["up", "stay", "down", "stay (not validated)"]
    s = d.config.sizes
    assert (s[3].hole_ratio, s[3].wait_ratio) == (0.3, 0.6)
    assert (s[4].hole_ratio, s[4].wait_ratio) == (0.2, 0.4) == (s[6].hole_ratio, s[6].wait_ratio)
    assert (s[5].hole_ratio, s[5].wait_ratio) == (0.1, 0.2)
    ratios = d.config.normalised_ratios()
    assert ratios[4] > 0.25 > ratios[3] and ratios[4] > ratios[5]  # data moves toward the frontier
    assert d.rationale and "level 2 -> 3" in d.rationale
    json.dumps(d.to_dict(), allow_nan=False)
    # stateless: the next decision starts from the applied configuration
    d2 = cur.propose(request(2, d.config, {3: 95.0, 4: 40.0, 5: 1.0}))
    assert d2.details["sizes"]["3"]["new_level"] == 4 and d2.details["sizes"]["5"]["new_level"] == 0
    d3 = cur.propose(request(3, d2.config, {3: 100.0, 4: 40.0, 5: 0.0}))
    assert d3.details["sizes"]["5"]["move"] == "down (at the end of the ladder)"


def test_threshold_failures_weighting_sends_data_where_the_policy_fails() -> None:
    start = RoundConfig.model_validate(
        {"num_samples": 32, "sizes": {str(n): knobs(0.25, 0.2, 0.4) for n in SPACE.sizes}}
    )
    cur = ThresholdCurriculum(weighting="failures", momentum=0.0)
    d = cur.propose(request(1, start, {3: 90.0, 4: 40.0, 5: 5.0}))  # 6x6 not validated: p = 0.5
    # by hand: floor + (1 - p) = 0.15, 0.65, 1.0, 0.55 over their sum 2.35
    assert {n: s.data_ratio for n, s in d.config.sizes.items()} == {3: 0.064, 4: 0.277, 5: 0.426, 6: 0.234}
    assert [d.details["sizes"][k]["weight"] for k in ("3", "4", "5", "6")] == [0.15, 0.65, 1.0, 0.55]
    assert d.details["weighting"] == "failures"
    # the ladder moves as with the frontier weights; only the data differs
    frontier = ThresholdCurriculum(momentum=0.0).propose(request(1, start, {3: 90.0, 4: 40.0, 5: 5.0}))
    assert {n: (s.hole_ratio, s.wait_ratio) for n, s in d.config.sizes.items()} == {
        n: (s.hole_ratio, s.wait_ratio) for n, s in frontier.config.sizes.items()
    }
    assert frontier.config.sizes[5].data_ratio < frontier.config.sizes[4].data_ratio  # 4p(1-p): 0.24 < 1.01
    with pytest.raises(ConfigError, match="weighting"):
        ThresholdCurriculum(weighting="loss")  # type: ignore[arg-type]


def test_threshold_keep_levels_moves_the_data_only() -> None:
    # every size at its own off-ladder hole and wait ratio, as a random round-0 configuration leaves them
    start = RoundConfig.model_validate(
        {
            "num_samples": 32,
            "sizes": {
                "3": knobs(0.4, 0.47, 0.39),
                "4": knobs(0.1, 0.12, 0.72),
                "5": knobs(0.3, 0.26, 0.6),
                "6": knobs(0.2, 0.05, 0.93),
            },
        }
    )
    rates = {3: 90.0, 4: 40.0, 5: 5.0}
    kept = ThresholdCurriculum(weighting="failures", keep_levels=True, momentum=0.0)
    d = kept.propose(request(1, start, rates))
    # the knobs stay exactly as they were, 3x3 above `upper` and 5x5 below `lower` included
    assert {n: (s.hole_ratio, s.wait_ratio) for n, s in d.config.sizes.items()} == {
        3: (0.47, 0.39),
        4: (0.12, 0.72),
        5: (0.26, 0.6),
        6: (0.05, 0.93),
    }
    assert {m["move"] for m in d.details["sizes"].values()} == {"kept"} and d.details["keep_levels"] is True
    # the data is the failures weighting's, by hand as above: 0.15, 0.65, 1.0, 0.55 over 2.35
    assert {n: s.data_ratio for n, s in d.config.sizes.items()} == {3: 0.064, 4: 0.277, 5: 0.426, 6: 0.234}
    # without the option the ladder moves the same sizes: 3x3 up to (0.5, 1.0), 5x5 down to (0.2, 0.4)
    moved = ThresholdCurriculum(weighting="failures", momentum=0.0).propose(request(1, start, rates))
    assert moved.config.sizes[3].hole_ratio != 0.47 and moved.config.sizes[5].wait_ratio != 0.6
    assert ThresholdCurriculum.from_options({"keep_levels": True}).keep_levels is True
    with pytest.raises(ConfigError, match="keep_levels"):
        ThresholdCurriculum(keep_levels="yes")  # type: ignore[arg-type]


def test_threshold_keep_data_moves_the_levels_only() -> None:
    # off the ladder, as a random round-0 configuration leaves every size (4x4 on a level, for contrast)
    start = RoundConfig.model_validate(
        {
            "num_samples": 32,
            "sizes": {
                "3": knobs(0.308, 0.47, 0.386),
                "4": knobs(0.015, 0.2, 0.4),
                "5": knobs(0.5, 0.261, 0.598),
                "6": knobs(0.177, 0.189, 0.55),
            },
        }
    )
    # a ladder that only climbs: above 20 % a size moves one level up, nothing moves down
    cur = ThresholdCurriculum(upper=0.2, lower=0.0, keep_data=True, momentum=0.0)
    d = cur.propose(request(1, start, {3: 90.0, 4: 40.0, 5: 5.0}))
    # by hand: 3x3 (90 %) goes to the first level at or above (0.47, 0.386) in both knobs, (0.5, 1.0), not
    # the nearest level's successor (0.4, 0.8), which has fewer holes; 4x4 (40 %) from level 2 (0.2, 0.4)
    # to 3 (0.3, 0.6); 5x5 (5 %) and 6x6 (not validated) keep their own knobs, not the nearest level's
    # (0.3, 0.6) and (0.2, 0.4); every data ratio is the one it had
    assert {n: (s.hole_ratio, s.wait_ratio) for n, s in d.config.sizes.items()} == {
        3: (0.5, 1.0),
        4: (0.3, 0.6),
        5: (0.261, 0.598),
        6: (0.189, 0.55),
    }
    assert {n: s.data_ratio for n, s in d.config.sizes.items()} == {3: 0.308, 4: 0.015, 5: 0.5, 6: 0.177}
    assert d.details["keep_data"] is True
    with pytest.raises(ConfigError, match="fixed"):
        ThresholdCurriculum(keep_levels=True, keep_data=True)


def test_threshold_options_are_checked() -> None:
    assert ThresholdCurriculum.from_options({"upper": 0.8, "levels": [[0, 0], [0.2, 0.5]]}).levels == (
        (0.0, 0.0),
        (0.2, 0.5),
    )
    with pytest.raises(ConfigError, match="unknown threshold option"):
        ThresholdCurriculum.from_options({"uper": 0.8})
    with pytest.raises(ConfigError, match="lower < upper"):
        ThresholdCurriculum(upper=0.1, lower=0.5)
    with pytest.raises(ConfigError, match="non-decreasing"):
        ThresholdCurriculum(levels=((0.2, 0.2), (0.1, 0.3)))


# -- building engineers -----------------------------------------------------------------------------------
def test_make_engineer_builds_each_kind() -> None:
    r0 = round0_config(0, SPACE)
    assert isinstance(make_engineer("fixed", config=r0), FixedEngineer)
    assert make_engineer("random", seed=3).seed == 3
    thr = make_engineer("threshold", upper=0.7, step=2)
    assert isinstance(thr, ThresholdCurriculum) and thr.upper == 0.7 and thr.step == 2
    me = make_engineer("self", backend=ScriptedBackend([]), params=FakeParams())
    assert isinstance(me, LLMEngineer) and me.name == "self" and me.constrained
    oa = make_engineer(
        "openai", model="kimi", backend=ScriptedBackend([]), params=FakeParams(), max_retries=1
    )
    assert oa.name == "openai:kimi" and not oa.constrained and oa.max_retries == 1
    with pytest.raises(ConfigError, match="needs config"):
        make_engineer("fixed")
    with pytest.raises(ConfigError, match="takes no options"):
        make_engineer("random", upper=0.5)
    with pytest.raises(ConfigError, match="unknown engineer kind"):
        make_engineer("oracle")  # type: ignore[arg-type]


def test_engineer_layer_does_not_import_torch() -> None:
    code = (
        "import sys, envengineer.engineer; "
        "bad = [m for m in ('torch', 'transformers', 'envengineer.models') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
