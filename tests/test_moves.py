"""``engineer.answer: moves``: per-size moves on the difficulty ladder instead of free numbers.

Every number below is worked out by hand from the ladder (``DEFAULT_LEVELS``: (0, 0), (0.1, 0.2),
(0.2, 0.4), (0.3, 0.6), (0.4, 0.8), (0.5, 1.0)) and the data rule (a share times 1.5 for ``more``, divided
by 1.5 for ``less``, then all shares renormalised). The moves API is imported inside each test, so that
each test fails on its own where the feature is missing.
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.engineer.context import HistoryEntry
from envengineer.engineer.decision import EngineerRequest
from envengineer.engineer.prompt import answer_schema, build_messages, build_retry_messages
from envengineer.engineer.proposal import repeats_one_setting
from envengineer.mapf.config import ConfigSpace, RoundConfig, project
from test_engineers import FakeParams
from test_engineers import ScriptedBackend as Chat

SPACE = ConfigSpace(sizes=(3, 4, 5, 6))
#: 3x3 on level 1, 4x4 off the ladder (between levels 2 and 3), 5x5 on level 2, 6x6 off the ladder (holes
#: above level 4's, waits below level 2's: between levels 1 and 5).
CONFIG = RoundConfig.model_validate(
    {
        "num_samples": 64,
        "sizes": {
            "3": {"data_ratio": 0.3, "hole_ratio": 0.1, "wait_ratio": 0.2},
            "4": {"data_ratio": 0.4, "hole_ratio": 0.25, "wait_ratio": 0.5},
            "5": {"data_ratio": 0.2, "hole_ratio": 0.2, "wait_ratio": 0.4},
            "6": {"data_ratio": 0.1, "hole_ratio": 0.47, "wait_ratio": 0.386},
        },
    }
)
REPORT = {
    "summary": {"n": 24, "valid": 37.5, "optimal": 29.17, "makespan_optimal": 29.17, "mean_tokens": 210.5},
    "table": {
        "3": {
            "sizes": {
                "3": {"n": 6, "valid": 83.33, "optimal": 66.67},
                "4": {"n": 6, "valid": 50.0, "optimal": 33.33},
                "5": {"n": 6, "valid": 16.67, "optimal": 16.67},
                "6": {"n": 6, "valid": 0.0, "optimal": 0.0},
            },
            "sum": {"valid": 37.5, "optimal": 29.17},
        }
    },
    "failures": {
        "3": {
            "3": {"vertex_conflict": 1},
            "4": {"hole": 2, "swap_conflict": 1},
            "5": {"hole": 3, "goal_not_reached": 2},
            "6": {"hole": 6},
        }
    },
}
TRAINING = {"total_rounds": 3, "epochs": 2, "num_samples": 64, "num_agents": 2}
REQUEST = EngineerRequest(
    round_index=1,
    config=CONFIG,
    report=REPORT,
    space=SPACE,
    history=[HistoryEntry.from_report(0, CONFIG, REPORT)],
    previous_rationale="Holes on 5x5 and 6x6.",
    training=TRAINING,
    context="V6",
)
#: sha256 of the numbers-mode prompts of REQUEST (V6: compact and json schema, a retry, the answer schema),
#: taken before the moves answer existed. The moves answer must leave every byte of them as it was.
NUMBERS_DIGEST = "5194b1f2ab608191a46585ce6d7491f937bf4cb0c4779e0fe1435b284657bf9d"


def numbers_digest(**answer: str) -> str:
    first = build_messages(REQUEST, **answer)
    parts = {
        "compact": first,
        "json": build_messages(REQUEST, schema="json", **answer),
        "retry": build_retry_messages(first, "nope", ["no JSON object found in the answer"], SPACE, **answer),
        "schema": answer_schema(SPACE),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def moves_answer(moves: dict[str, Any], rationale: str = "3x3 is easy; 6x6 fails on holes.") -> str:
    return json.dumps({"rationale": rationale, "moves": moves})


def mv(difficulty: str, data: str) -> dict[str, str]:
    return {"difficulty": difficulty, "data": data}


def sizes_of(proposal: dict[str, Any]) -> dict[int, tuple[float, float, float]]:
    return {int(n): (s["data_ratio"], s["hole_ratio"], s["wait_ratio"]) for n, s in proposal["sizes"].items()}


def assert_sizes(got: dict[int, tuple[float, ...]], expected: dict[int, tuple[float, ...]]) -> None:
    """Per size, (data, hole, wait) equal to ``expected`` up to float rounding."""
    assert set(got) == set(expected)
    for n, values in expected.items():
        assert got[n] == pytest.approx(values), n


# -- the numbers answer is unchanged ----------------------------------------------------------------------
def test_numbers_prompt_is_byte_identical() -> None:
    assert numbers_digest() == NUMBERS_DIGEST
    assert numbers_digest(answer="numbers") == NUMBERS_DIGEST


def test_numbers_is_the_default_setting_and_is_not_written_to_experiment_files() -> None:
    from envengineer.loop.experiment import EngineerSettings

    assert EngineerSettings().answer == "numbers"
    assert "answer" not in EngineerSettings().model_dump()  # old runs' experiment.yaml stay as they were
    assert EngineerSettings(answer="moves").model_dump()["answer"] == "moves"
    with pytest.raises(ValueError, match="answer"):
        EngineerSettings(kind="threshold", answer="moves")  # a rule writes no answer


# -- the mapping, worked out by hand ----------------------------------------------------------------------
def test_mapping_on_and_off_the_ladder() -> None:
    from envengineer.engineer.moves import SizeMove, apply_moves

    moves = {3: SizeMove("harder", "more"), 4: SizeMove("easier", "less"), 6: SizeMove("harder", "same")}
    proposal, records = apply_moves(moves, CONFIG, SPACE)  # 5x5 missing: same, same
    # data: 0.3 x 1.5 = 0.45, 0.4 / 1.5 = 4/15, 0.2, 0.1; in sixtieths 27 + 16 + 12 + 6 = 61
    assert_sizes(
        sizes_of(proposal),
        {
            3: (27 / 61, 0.2, 0.4),  # level 1 -> 2
            4: (16 / 61, 0.2, 0.4),  # off (0.25, 0.5): the last level with both <= is level 2
            5: (12 / 61, 0.2, 0.4),  # same: its own ratios
            6: (6 / 61, 0.5, 1.0),  # off (0.47, 0.386): the first level with both >= is level 5
        },
    )
    assert records["3"] == {
        "difficulty": "harder",
        "data": "more",
        "given": True,
        "level": 1,
        "new_level": 2,
        "knobs": [0.1, 0.2],
        "new_knobs": [0.2, 0.4],
        "share": 0.3,
        "new_share": round(27 / 61, 4),
    }
    assert records["5"]["given"] is False and records["6"]["level"] is None
    assert records["6"]["new_level"] == 5


def test_mapping_the_other_way_and_same_keeps_off_ladder_ratios_exactly() -> None:
    from envengineer.engineer.moves import SizeMove, apply_moves

    moves = {
        3: SizeMove("easier", "same"),
        4: SizeMove("harder", "same"),
        5: SizeMove("harder", "same"),
        6: SizeMove("easier", "same"),
    }
    got = sizes_of(apply_moves(moves, CONFIG, SPACE)[0])
    assert_sizes(
        got,
        {
            3: (0.3, 0.0, 0.0),  # level 1 -> 0
            4: (0.4, 0.3, 0.6),  # off (0.25, 0.5): the first level with both >= is level 3
            5: (0.2, 0.3, 0.6),  # level 2 -> 3
            6: (0.1, 0.1, 0.2),  # off (0.47, 0.386): the last with both <= is level 1 (level 2 waits 0.4)
        },
    )
    same = sizes_of(apply_moves({}, CONFIG, SPACE)[0])
    assert same[6] == (pytest.approx(0.1), 0.47, 0.386) and same[4][1:] == (0.25, 0.5)  # exactly its own


def test_mapping_at_the_ends_and_in_a_clipped_space() -> None:
    from envengineer.engineer.moves import SizeMove, apply_moves

    cfg = RoundConfig.model_validate(
        {
            "sizes": {
                "3": {"data_ratio": 1, "hole_ratio": 0.0, "wait_ratio": 0.0},
                "4": {"data_ratio": 1, "hole_ratio": 0.5, "wait_ratio": 1.0},
            }
        }
    )
    space = ConfigSpace(sizes=(3, 4))
    got = sizes_of(apply_moves({3: SizeMove("easier", "less"), 4: SizeMove("harder", "more")}, cfg, space)[0])
    # the bottom stays at the bottom, the top at the top; data 0.5 / 1.5 = 1/3 and 0.5 x 1.5 = 3/4 -> 4 : 9
    assert_sizes(got, {3: (4 / 13, 0.0, 0.0), 4: (9 / 13, 0.5, 1.0)})
    # holes at most 0.3: the ladder reads (0, 0), (0.1, 0.2), (0.2, 0.4), (0.3, 0.6), (0.3, 0.8), (0.3, 1)
    clipped = ConfigSpace(sizes=(3, 4), hole_ratio_max=0.3)
    cfg2 = RoundConfig.model_validate(
        {
            "sizes": {
                "3": {"data_ratio": 1, "hole_ratio": 0.3, "wait_ratio": 0.6},
                "4": {"data_ratio": 1, "hole_ratio": 0.3, "wait_ratio": 0.9},
            }
        }
    )
    got2 = sizes_of(apply_moves({3: SizeMove("harder"), 4: SizeMove("harder")}, cfg2, clipped)[0])
    assert_sizes(got2, {3: (0.5, 0.3, 0.8), 4: (0.5, 0.3, 1.0)})


def test_mapping_reuses_the_curriculums_ladder_move() -> None:
    from envengineer.engineer.curriculum import ThresholdCurriculum
    from envengineer.engineer.moves import SizeMove, apply_moves

    rule = ThresholdCurriculum()
    for knobs in [(0.1, 0.2), (0.25, 0.5), (0.47, 0.386), (0.115, 0.716), (0.0, 0.0), (0.5, 1.0)]:
        cfg = RoundConfig.model_validate(
            {"sizes": {"3": {"data_ratio": 1, "hole_ratio": knobs[0], "wait_ratio": knobs[1]}}}
        )
        for word, direction in (("harder", "up"), ("easier", "down")):
            got = sizes_of(apply_moves({3: SizeMove(word)}, cfg, ConfigSpace(sizes=(3,)))[0])[3][1:]
            assert got == rule.moved(knobs, direction), (knobs, word)


# -- the parser -------------------------------------------------------------------------------------------
GOOD = {
    "3": mv("harder", "more"),
    "4": mv("same", "same"),
    "5": mv("easier", "less"),
    "6": mv("same", "less"),
}


@pytest.mark.parametrize(
    "text",
    [
        moves_answer(GOOD),
        "Here is my plan.\n```json\n" + moves_answer(GOOD) + "\n```\nDone.",
        moves_answer(GOOD).replace("}}}", "},}}"),  # a trailing comma: repaired JSON
        # the current configuration quoted first, the moves after: the moves win
        '{"sizes": {"3": {"data_ratio": 0.3, "hole_ratio": 0.1, "wait_ratio": 0.2}}}\n' + moves_answer(GOOD),
        "rationale: 3x3 is easy\nmoves:\n  3: {difficulty: harder, data: more}\n  '4x4': {difficulty: same, "
        "data: same}\n  5: {difficulty: Easier, data: LESS}\n  6: {difficulty: same, data: less}\n",
        json.dumps(
            {
                "3": mv("harder", "more"),
                "4": mv("same", "same"),
                "5": mv("easier", "less"),
                "6": mv("same", "less"),
            }
        ),  # no "moves" wrapper: size keys alone
    ],
)
def test_parser_reads_good_answers(text: str) -> None:
    from envengineer.engineer.moves import SizeMove, check_moves, parse_moves, read_moves

    parsed = parse_moves(text)
    assert check_moves(parsed) == []
    moves, issues = read_moves(parsed.proposal, SPACE)
    assert issues == []
    assert moves == {
        3: SizeMove("harder", "more"),
        4: SizeMove("same", "same"),
        5: SizeMove("easier", "less"),
        6: SizeMove("same", "less"),
    }


def test_parser_on_partial_answers_missing_is_same_unknown_is_an_issue() -> None:
    from envengineer.engineer.moves import SizeMove, check_moves, parse_moves, read_moves

    text = moves_answer(
        {
            "3": {"difficulty": "hardest", "data": "more"},
            "6x6": {"difficulty": "harder"},
            "12": mv("harder", "more"),
            "5": {"difficulty": "easier", "data": 2, "holes": "more"},
            "x": "bigger",
        }
    )
    parsed = parse_moves(text)
    assert check_moves(parsed) == [] and parsed.rationale == "3x3 is easy; 6x6 fails on holes."
    moves, issues = read_moves(parsed.proposal, SPACE)
    assert moves == {
        3: SizeMove("same", "more"),  # "hardest" is no move: same
        4: SizeMove("same", "same"),  # missing: same
        5: SizeMove("easier", "same"),  # 2 is no data move: same
        6: SizeMove("harder", "same"),  # data missing: same
    }
    assert issues == [
        "moves.3.difficulty: 'hardest' is not a move; use harder, same or easier (kept same)",
        "moves.12: size 12 is not a legal size; use one of [3, 4, 5, 6]",
        "moves.5.data: 2 is not a move; use more, same or less (kept same)",
        "moves.5.holes: unknown key; use difficulty and data",
        "moves.'x': not a map size; write 6 or '6x6'",
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("no idea", "no JSON object found in the answer"),
        ('{"rationale": "cut', "the JSON object is not closed"),
        ('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}}}', 'no "moves" entry'),
        ('{"moves": "harder everywhere"}', '"moves" must be an object keyed by map size'),
        ('{"moves": {}}', '"moves" must be an object keyed by map size'),
        ("[1, 2, 3]", "no JSON object found"),
        (None, "no JSON object found"),
    ],
)
def test_parser_rejects_answers_without_moves(text: Any, error: str) -> None:
    from envengineer.engineer.moves import check_moves, parse_moves

    errors = check_moves(parse_moves(text))
    assert errors and error in errors[0], errors


def test_parser_survives_hostile_answers() -> None:
    from envengineer.engineer.moves import apply_moves, check_moves, parse_moves, read_moves

    hostile = [
        moves_answer({"3": {"difficulty": {"$gt": 1}, "data": ["more"] * 1000}, "4": None, str(10**400): 1}),
        "<think>" * 5000 + moves_answer(GOOD),
        "x" * 200_000 + moves_answer(GOOD),
        "moves: &a [*a, *a]\n",  # a YAML alias: refused
        '{"moves": {"3": {"difficulty": "harder\ud800", "data": NaN}}}',
        "\x00{" * 1000,
    ]
    for text in hostile:
        parsed = parse_moves(text)
        if not check_moves(parsed):
            moves, _ = read_moves(parsed.proposal, SPACE)
            project(apply_moves(moves, CONFIG, SPACE)[0], CONFIG, SPACE)
    assert read_moves(parse_moves(hostile[2]).proposal, SPACE)[0][3].difficulty == "harder"


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=True)
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from(["harder", "easier", "same", "more", "less", "Harder "]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["3", "4", "6x6", "12", "moves", "difficulty", "data", "x"])
            | st.text(max_size=4),
            children,
            max_size=4,
        )
    ),
    max_leaves=16,
)


def _pipeline(text: Any) -> None:
    from envengineer.engineer.moves import apply_moves, check_moves, parse_moves, read_moves

    parsed = parse_moves(text)
    errors = check_moves(parsed)
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    if not errors:
        moves, issues = read_moves(parsed.proposal, SPACE)
        assert set(moves) == set(SPACE.sizes) and all(isinstance(i, str) for i in issues)
        proposal, _ = apply_moves(moves, CONFIG, SPACE)
        assert isinstance(project(proposal, CONFIG, SPACE).config, RoundConfig)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_fuzz_parser_never_raises_on_text(text: str) -> None:
    _pipeline(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH, st.text(max_size=20), st.booleans())
def test_fuzz_parser_never_raises_on_moves_like_objects(value: Any, prose: str, wrap: bool) -> None:
    _pipeline(prose + json.dumps({"rationale": prose, "moves": value} if wrap else value))


# -- the engineer and its records -------------------------------------------------------------------------
def test_prompt_asks_for_moves() -> None:
    user = build_messages(REQUEST, answer="moves")[1]["content"]
    answer = user[user.index("## Your answer") :]
    assert '"moves": {"3": {"difficulty": "harder", "data": "more"}, ..., "6": {' in answer
    assert "(0, 0), (0.1, 0.2), (0.2, 0.4), (0.3, 0.6), (0.4, 0.8), (0.5, 1)" in answer
    for line in ("- harder: one level up", "- easier: one level down", "- more: the size's share times 1.5",
                 "- less: the size's share divided by 1.5"):  # fmt: skip
        assert line in answer
    assert (
        "Levels now: 3x3 level 1, 4x4 between levels 2 and 3, 5x5 level 2, 6x6 between levels 1 and 5."
        in answer
    )
    assert "data_ratio, hole_ratio and wait_ratio as numbers" not in answer
    # everything before the answer section is the numbers prompt's
    numbers = build_messages(REQUEST)[1]["content"]
    assert user[: user.index("## Your answer")] == numbers[: numbers.index("## Your answer")]


def test_engineer_maps_moves_projects_and_records_them() -> None:
    from envengineer.engineer.engineers import LLMEngineer

    written = {"3": mv("harder", "more"), "4": mv("easier", "less"), "6": mv("harder", "same")}
    chat = Chat(["no JSON here", moves_answer(written)])
    decision = LLMEngineer(chat, "fake", FakeParams(), answer="moves").propose(REQUEST)
    assert not decision.fell_back and len(decision.attempts) == 2
    got = {n: (s.data_ratio, s.hole_ratio, s.wait_ratio) for n, s in decision.config.sizes.items()}
    assert_sizes(
        got, {3: (27 / 61, 0.2, 0.4), 4: (16 / 61, 0.2, 0.4), 5: (12 / 61, 0.2, 0.4), 6: (6 / 61, 0.5, 1.0)}
    )
    assert decision.changes == ()  # a moves proposal is legal: projection changes nothing
    assert decision.raw_proposal["moves"] == written  # the raw moves, as written
    assert_sizes(sizes_of(decision.raw_proposal), got)  # and the numbers they mapped to
    details = decision.to_dict()["details"]
    assert details["answer"] == "moves" and details["moves"]["5"]["given"] is False
    assert details["moves"]["4"]["new_knobs"] == [0.2, 0.4]
    # constrained decoding gets the moves schema; the retry asks for moves again
    schema = chat.calls[0][1].json_schema
    assert schema["required"] == ["rationale", "moves"]
    assert schema["properties"]["moves"]["properties"]["3"]["properties"]["difficulty"]["enum"] == [
        "harder", "same", "easier"]  # fmt: skip
    retry = chat.calls[1][0][0][-1]["content"]
    assert '"moves": {"3": {"difficulty": "harder", "data": "more"}' in retry


def test_engineer_records_issues_and_the_trust_region_bounds_a_moves_proposal() -> None:
    from envengineer.engineer.engineers import LLMEngineer
    from envengineer.engineer.trust_region import TrustRegion, apply_trust_region

    chat = Chat([moves_answer({"6": {"difficulty": "much harder", "data": "more"}})])
    decision = LLMEngineer(chat, "fake", FakeParams(), answer="moves").propose(REQUEST)
    assert decision.details["issues"] == [
        "moves.6.difficulty: 'much harder' is not a move; use harder, same or easier (kept same)"
    ]
    assert decision.config.sizes[6].hole_ratio == 0.47  # kept same
    # "harder" on 6x6 jumps (0.47, 0.386) -> (0.5, 1.0); a trust region pulls waits back to 0.386 + 0.25
    decision = LLMEngineer(
        Chat([moves_answer({"6": mv("harder", "same")})]), "f", FakeParams(), answer="moves"
    )
    cfg = decision.propose(REQUEST).config
    bounded, changes = apply_trust_region(CONFIG, cfg, TrustRegion())
    assert bounded.sizes[6].wait_ratio == pytest.approx(0.636) and bounded.sizes[6].hole_ratio == 0.5
    assert [c["knob"] for c in changes] == ["wait_ratio"]


def test_numbers_engineer_records_are_unchanged() -> None:
    from envengineer.engineer.engineers import LLMEngineer

    answer = json.dumps(
        {"rationale": "r", "sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}}}
    )
    decision = LLMEngineer(Chat([answer]), "fake", FakeParams(), answer="numbers").propose(REQUEST)
    assert set(decision.details) == {"accepted_attempt", "constrained", "schema", "issues"}
    assert decision.raw_proposal == {"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}}}


# -- degenerate proposals ---------------------------------------------------------------------------------
def test_identical_moves_for_every_size_repeat_one_setting() -> None:
    from envengineer.loop.proposals import proposal_counts

    same = {
        "moves": {
            "3": mv("harder", "more"),
            "4": mv("Harder", "more "),
            "5": {"difficulty": "harder", "data": "more"},
        }
    }
    # the numbers they map to differ per size, the moves do not: degenerate
    same["sizes"] = {"3": {"data_ratio": 0.5, "hole_ratio": 0.2, "wait_ratio": 0.4},
                     "4": {"data_ratio": 0.3, "hole_ratio": 0.3, "wait_ratio": 0.6}}  # fmt: skip
    differ = {"moves": {"3": mv("harder", "more"), "4": mv("same", "more")}}
    missing_data = {"moves": {"3": {"difficulty": "easier"}, "4": mv("easier", "same")}}  # data missing: same
    assert repeats_one_setting(same) is True
    assert repeats_one_setting(differ) is False
    assert repeats_one_setting(missing_data) is True
    assert repeats_one_setting({"moves": {"3": mv("harder", "more")}}) is None  # one size only
    assert repeats_one_setting({"moves": "harder"}) is None

    def run(*raws: Any) -> Any:
        rounds = [SimpleNamespace(index=0, projection={"source": "round0", "raw": {}})]
        rounds += [
            SimpleNamespace(index=i + 1, projection={"source": "engineer:base", "raw": raw})
            for i, raw in enumerate(raws)
        ]
        return SimpleNamespace(rounds=rounds)

    assert proposal_counts([run(same, differ, missing_data)]) == {"proposals": 3, "repeating": 2}


# -- the loop ---------------------------------------------------------------------------------------------
def test_the_loop_runs_a_moves_engineer_bounds_and_records_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """engineer.answer: moves, through the default engineer factory (its backend a script), a scripted
    policy and a trust region: the round's projection holds the raw moves, the degenerate flag and the
    trust region's pull-back; the applied configuration is the moves' mapped one, bounded."""
    pytest.importorskip("envengineer.evaluation")
    from envengineer.loop import components
    from envengineer.loop.components import Components
    from envengineer.loop.experiment import Experiment
    from envengineer.loop.rundir import read_json
    from envengineer.loop.runner import run_experiment
    from small_sets import write_small_sets

    sets = write_small_sets(tmp_path / "sets", 11)
    up = mv("harder", "more")
    chat = Chat([moves_answer({"3": up, "4": up, "5": up}), moves_answer({"3": mv("easier", "less")})])
    monkeypatch.setattr(components, "shared_backend", lambda kind, model, **kw: chat)
    monkeypatch.setattr(components, "_resolve_model", lambda model: model)
    exp = Experiment.model_validate(
        {
            "name": "t-moves",
            "policy": "scripted:greedy",
            "rounds": 3,
            "samples_per_round": 8,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 5},
            "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
            "engineer": {
                "kind": "base",
                "model": "fake-engineer",
                "answer": "moves",
                "trust_region": {"data_ratio": 0.2, "hole_ratio": 0.1, "wait_ratio": 0.25},
            },
        }
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    run_experiment(exp, run, components=Components(engineer_factory=components._default_engineer_factory))
    assert "moves" in chat.calls[0][0][0][1]["content"]  # the moves prompt
    one, two = (read_json(run / f"round_0{r}" / "projection.json") for r in (1, 2))
    assert one["raw"]["moves"] == {"3": up, "4": up, "5": up} and one["repeats_one_setting"] is True
    assert two["raw"]["moves"] == {"3": mv("easier", "less")} and two["repeats_one_setting"] is None
    c0, c1 = (RoundConfig.load(run / f"round_0{r}" / "config.applied.yaml") for r in (0, 1))
    for n, s in c1.sizes.items():  # harder everywhere, within the trust region around round 0
        before = c0.sizes[n]
        assert before.hole_ratio <= s.hole_ratio <= before.hole_ratio + 0.1 + 1e-9
        assert before.wait_ratio <= s.wait_ratio <= before.wait_ratio + 0.25 + 1e-9
    assert one["config"] == c1.model_dump(mode="json")
    decision = read_json(run / "round_01" / "engineer" / "decision.json")
    moves = decision["details"]["moves"]  # every size of the loop's space (3..10), those left out same
    assert decision["details"]["answer"] == "moves" and set(moves) == {str(n) for n in range(3, 11)}
    assert [n for n, m in moves.items() if m["given"]] == ["3", "4", "5"]
    assert all(m["difficulty"] == "same" for n, m in moves.items() if not m["given"])
    assert "answer: moves" in (run / "experiment.yaml").read_text()
