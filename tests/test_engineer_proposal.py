"""Reading the engineer's answer: JSON, repaired JSON, YAML, rationale, strict checks; fuzzed."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.engineer.prompt import answer_schema, render_config
from envengineer.engineer.proposal import check_answer, parse_answer, proposal_issues
from envengineer.mapf.config import ConfigSpace, RoundConfig, project, round0_config

GOOD = {
    "3": {"data_ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.2},
    "4": {"data_ratio": 0.5, "hole_ratio": 0.2, "wait_ratio": 0.4},
}


def good_json(rationale: str | None = "Holes dominate at 4x4.") -> str:
    body = {"rationale": rationale, "sizes": GOOD} if rationale is not None else {"sizes": GOOD}
    return json.dumps(body)


def assert_good(text: str, source: str | None = None) -> None:
    a = parse_answer(text)
    assert a.proposal is not None, a.errors
    assert {str(k): v for k, v in a.proposal["sizes"].items()} == GOOD
    assert check_answer(a) == []
    if source:
        assert a.source == source


# -- formats ----------------------------------------------------------------------------------------------
def test_bare_json_with_rationale_inside() -> None:
    a = parse_answer(good_json())
    assert a.source == "json" and a.rationale == "Holes dominate at 4x4." and "rationale" not in a.proposal
    assert a.data["rationale"] == "Holes dominate at 4x4."


def test_fenced_json_with_prose_rationale() -> None:
    text = f"Most failures are holes, so I lower hole_ratio.\n\n```json\n{good_json(None)}\n```\n"
    a = parse_answer(text)
    assert a.source == "json" and a.rationale == "Most failures are holes, so I lower hole_ratio."
    assert_good(text)


def test_trailing_commas_comments_python_literals_and_smart_quotes() -> None:
    text = (
        "{\n  // my plan\n  \u201csizes\u201d: {\n"
        '    "3": {"data_ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.2,},  // easy\n'
        '    "4": {"data_ratio": 0.5, "hole_ratio": 0.2, "wait_ratio": 0.4},\n  },\n}'
    )
    assert_good(text, "json-repaired")
    a = parse_answer('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": None, "wait_ratio": False}}}')
    assert a.source == "json-repaired" and a.proposal["sizes"]["3"]["hole_ratio"] is None


def test_yaml_fenced_flow_and_bare_blocks() -> None:
    fenced = (
        "```yaml\nrationale: fewer holes\nsizes:\n  3: {data_ratio: 0.5, hole_ratio: 0.1, wait_ratio: 0.2}\n"
        "  4: {data_ratio: 0.5, hole_ratio: 0.2, wait_ratio: 0.4}\n```"
    )
    assert_good(fenced, "yaml")
    assert parse_answer(fenced).rationale == "fewer holes"
    flow = (
        "{sizes: {3: {data_ratio: 0.5, hole_ratio: 0.1, wait_ratio: 0.2}, "
        "'4': {data_ratio: 0.5, hole_ratio: 0.2, wait_ratio: 0.4}}}"
    )
    assert_good(flow, "yaml")
    bare = (
        "Plan below.\nsizes:\n  3:\n    data_ratio: 0.5\n    hole_ratio: 0.1\n    wait_ratio: 0.2\n"
        "  4:\n    data_ratio: 0.5\n    hole_ratio: 0.2\n    wait_ratio: 0.4\nThat is my answer."
    )
    assert_good(bare, "yaml")
    assert parse_answer(bare).rationale == "Plan below.\n\nThat is my answer."


def test_yaml_is_data_only() -> None:
    for text in (
        "sizes: !!python/object/apply:os.system ['echo hacked']",
        "```yaml\nsizes: !!python/name:os.system\n```",
        "a: &x [1, 2]\nsizes: *x",
    ):
        a = parse_answer(text)
        assert a.proposal is None or check_answer(a)


def test_last_configuration_wins_and_think_blocks_are_ignored() -> None:
    old = json.dumps({"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.0, "wait_ratio": 0.0}}})
    text = f"<think>maybe {old}</think>The current one was {old}; my new one: {good_json(None)} Done."
    assert_good(text)
    # a trailing non-configuration object does not displace the configuration
    assert_good(good_json() + ' and {"note": "x"}')


def test_size_keyed_mapping_without_sizes_wrapper() -> None:
    a = parse_answer(json.dumps(GOOD))
    assert a.proposal == GOOD and check_answer(a) == []


def test_unclosed_object_says_the_answer_was_cut_off() -> None:
    a = parse_answer(good_json()[:-20])
    assert a.proposal is None and "not closed" in a.errors[0]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no json here", "no JSON object found"),
        ("[1, 2, 3]", "no JSON object found"),
        ("```json\n[1, 2]\n```", "got a list"),
        ('{"rationale": "only words"}', 'no "sizes" entry'),
        ('{"note": "x", "plan": 3}', 'no "sizes" entry'),
        ('{"sizes": {}}', "got an empty object"),
        ('{"sizes": [1, 2]}', "got a list"),
    ],
)
def test_answers_without_a_configuration_are_rejected(text: str, fragment: str) -> None:
    errors = check_answer(parse_answer(text), ConfigSpace())
    assert errors and fragment in " ".join(errors), errors


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0, "walls": 3}}}', "walls"),
        ('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.9, "wait_ratio": 0}}}', "in [0, 0.5]"),
        (
            '{"sizes": {"3": {"data_ratio": "lots", "hole_ratio": 0.1, "wait_ratio": 0}}}',
            "not a finite number",
        ),
        ('{"sizes": {"3": {"data_ratio": NaN, "hole_ratio": 0.1, "wait_ratio": 0}}}', "not a finite number"),
        (
            '{"sizes": {"3": {"data_ratio": true, "hole_ratio": 0.1, "wait_ratio": 0}}}',
            "True is not a finite",
        ),
        ('{"sizes": {"12": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0}}}', "not a legal size"),
        ('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0}}, "reward": 2}', "reward"),
        ('{"sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1}}}', "wait_ratio: missing"),
    ],
)
def test_parseable_configurations_are_usable_and_their_issues_named(text: str, fragment: str) -> None:
    a = parse_answer(text)
    assert check_answer(a, ConfigSpace()) == []  # projected, not retried
    issues = proposal_issues(a, ConfigSpace())
    assert issues and fragment in " ".join(issues), issues


def test_unclosed_think_is_linear_not_quadratic() -> None:
    """A 50k-character answer of unclosed <think> tags once took seconds; count the work instead of timing.

    ``_strip_think`` runs ``str.find`` over the text; the work is measured by the characters scanned,
    which must grow linearly with the text (a lazy-regex rescan from every tag grows quadratically).
    """
    from envengineer.engineer import proposal as mod

    def scanned(text: str) -> int:
        calls = {"chars": 0}

        class Counting(str):
            def find(self, sub, start=0, end=None):  # type: ignore[override]
                got = str.find(self, sub, start) if end is None else str.find(self, sub, start, end)
                calls["chars"] += (len(self) if got < 0 else got + len(sub)) - start
                return got

            def translate(self, table):  # type: ignore[override]
                return Counting(str.translate(self, table))

        mod._strip_think(Counting(text))
        return calls["chars"]

    small, large = "<think>" * 1_000, "<think>" * 8_000
    assert scanned(large) <= 8 * scanned(small) + 100
    assert mod._strip_think("a<think>x</think>b<THINK>y</Think>c<think>open") == "abc<think>open"
    text = "<think>" * 7_000 + good_json()
    a = parse_answer(text)
    assert a.proposal is not None and check_answer(a) == []


def test_current_configuration_rendering_parses_back() -> None:
    cfg = round0_config(3)
    a = parse_answer(render_config(cfg))
    assert check_answer(a) == []
    back = project(a.proposal, cfg).config
    for n, s in cfg.sizes.items():
        assert back.sizes[n].hole_ratio == pytest.approx(s.hole_ratio, abs=1e-3)
        assert back.sizes[n].data_ratio == pytest.approx(cfg.normalised_ratios()[n], abs=2e-3)


def test_answer_schema_matches_the_legal_space() -> None:
    space = ConfigSpace(sizes=(3, 4, 5), hole_ratio_max=0.3)
    s = answer_schema(space)
    size = s["properties"]["sizes"]["properties"]["4"]
    assert size["properties"]["hole_ratio"]["maximum"] == 0.3 and size["additionalProperties"] is False
    assert s["required"] == ["rationale", "sizes"] and s["properties"]["sizes"]["required"] == ["3", "4", "5"]
    json.dumps(s)


# -- fuzzing ----------------------------------------------------------------------------------------------
FRAGMENTS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"',
        "'",
        ",",
        ":",
        "\n",
        "```",
        "```json\n",
        "```yaml\n",
        "<think>",
        "</think>",
        "sizes",
        '"sizes"',
        "rationale:",
        '"3"',
        "3x3",
        "data_ratio",
        "hole_ratio",
        "wait_ratio",
        "0.5",
        "-1",
        "1e999",
        "NaN",
        "null",
        "True",
        "&a",
        "*a",
        "!!python/object:os.system",
        "//",
        "/*",
        "*/",
        " ",
        "\\",
    ]
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def _pipeline(text: str) -> None:
    a = parse_answer(text)
    assert isinstance(a.rationale, str) and a.source in ("json", "json-repaired", "yaml", "none")
    errors = check_answer(a)
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    if a.proposal is not None and not errors:
        cfg = project(a.proposal, round0_config(0)).config
        assert isinstance(cfg, RoundConfig)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text_never_raises(text: str) -> None:
    _pipeline(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAGMENTS | st.text(max_size=5), max_size=40))
def test_fuzz_json_like_fragments_never_raise(parts: list[str]) -> None:
    _pipeline("".join(parts))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH, st.text(max_size=30), st.text(max_size=30))
def test_fuzz_any_json_value_in_prose(value: object, before: str, after: str) -> None:
    _pipeline(before + json.dumps(value) + after)
    if isinstance(value, dict) and "{" not in before + after and "}" not in before + after:
        a = parse_answer(before + " " + json.dumps(value) + " " + after)
        if a.source == "json":
            assert a.data == value or json.dumps(a.data) == json.dumps(value)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["3", "4", "5", "6x6"]),
        st.fixed_dictionaries(
            {"data_ratio": st.floats(0, 1), "hole_ratio": st.floats(0, 0.5), "wait_ratio": st.floats(0, 1)}
        ),
        min_size=1,
    ),
    st.text(max_size=40).filter(lambda t: "{" not in t and "}" not in t and "`" not in t),
)
def test_fuzz_legal_proposals_are_accepted(sizes: dict, prose: str) -> None:
    text = prose + "\n" + json.dumps({"rationale": prose, "sizes": sizes})
    a = parse_answer(text)
    assert a.source == "json" and a.proposal == {"sizes": sizes}
    if any(s["data_ratio"] > 0 for s in sizes.values()):
        assert check_answer(a) == []


GOOD_ANSWER = '{"sizes": {"4": {"data_ratio": 1, "hole_ratio": 0.2, "wait_ratio": 0.5}}, "rationale": "r"}'


@pytest.mark.parametrize(
    "answer",
    [
        GOOD_ANSWER + "\n" + "padding " * 10_000,  # the configuration first, then 80,000 characters
        "x" * 60_000 + GOOD_ANSWER + "y" * 60_000,  # in the middle of a long answer
        "z " * 40_000 + GOOD_ANSWER,  # at the end, as before
    ],
    ids=["head", "middle", "tail"],
)
def test_a_configuration_in_a_long_answer_is_found(answer: str) -> None:
    from envengineer.engineer.proposal import MAX_ANSWER_CHARS

    assert len(answer) > MAX_ANSWER_CHARS
    parsed = parse_answer(answer)
    assert check_answer(parsed) == []
    assert parsed.proposal["sizes"]["4"]["hole_ratio"] == 0.2


def test_a_long_answer_without_a_configuration_still_fails_quickly() -> None:
    import time

    t0 = time.perf_counter()
    parsed = parse_answer("{" * 400_000 + " sizes " + "}" * 10)
    assert parsed.proposal is None and parsed.errors
    assert time.perf_counter() - t0 < 20
