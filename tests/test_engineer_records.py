"""The engineer's records are strict JSON whatever the model answers (NaN, surrogates, huge numbers)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.engineer import EngineerRequest, LLMEngineer
from envengineer.engineer.decision import jsonable
from envengineer.mapf.config import ConfigSpace, round0_config
from test_engineers import FakeCompletion, FakeParams

SPACE = ConfigSpace(sizes=(3, 4, 5, 6))
GOOD = '"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2}'
HEX = "0x" + "F" * 5000  # a YAML int of about 6,000 decimal digits: str() refuses it


class _Backend:
    """The same answer to every request."""

    name = "hostile"

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, conversations: Sequence[Any], params: Any) -> list[FakeCompletion]:
        return [FakeCompletion(self.text) for _ in conversations]


HOSTILE = {
    "nan": '{"rationale": "x", "sizes": {"3": {"data_ratio": NaN, "hole_ratio": 0.1, "wait_ratio": 0.2}}}',
    "infinity": '{"rationale": "x", "sizes": {"3": {"data_ratio": Infinity, "hole_ratio": -Infinity, '
    '"wait_ratio": 1e999}}}',
    "nan rationale": '{"rationale": [NaN, {"a": Infinity}], "sizes": {' + GOOD + "}}",
    "escaped surrogate in the rationale": '{"rationale": "x\\ud800y", "sizes": {' + GOOD + "}}",
    "raw surrogate in the answer": '{"rationale": "x\ud800y", "sizes": {' + GOOD + "}}",
    "surrogate in a key": '{"sizes": {"3\\udc00": {"data_ratio": 1, "hole_ratio": 0, "wait_ratio": 0}, '
    + GOOD
    + "}}",
    "surrogate as a value": '{"sizes": {"3": {"data_ratio": "\\ud800", "hole_ratio": 0.1, "wait_ratio": 0}}}',
    "yaml nan and inf": "rationale: x\nsizes:\n  3: {data_ratio: .nan, hole_ratio: .inf, wait_ratio: 0.2}\n",
    "yaml float key": "sizes:\n  .nan: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0}\n"
    "  3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.2}\n",
    "yaml date, binary and set": "rationale: !!set {a, b}\nsizes:\n  3: {data_ratio: 2020-01-01, "
    "hole_ratio: !!binary aGVsbG8=, wait_ratio: 0.2}\n",
    "yaml hex value": f"rationale: x\nsizes:\n  3: {{data_ratio: {HEX}, hole_ratio: 0.1, wait_ratio: 0.2}}\n",
    "yaml hex key": f"sizes:\n  {HEX}: {{data_ratio: 1, hole_ratio: 0, wait_ratio: 0}}\n"
    "  3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.2}\n",
    "yaml hex rationale": f"rationale: {HEX}\nsizes:\n  3: {{data_ratio: 1, hole_ratio: 0, wait_ratio: 0}}\n",
    "yaml binary int": "sizes:\n  3: {data_ratio: 0b" + "1" * 20000 + ", hole_ratio: 0.1, wait_ratio: 0.2}\n",
    "huge decimal int": '{"sizes": {"3": {"data_ratio": '
    + "9" * 5000
    + ', "hole_ratio": 0, "wait_ratio": 0}}}',
    "deep nesting": "sizes:\n  3: {data_ratio: 1, hole_ratio: 0, wait_ratio: 0, x: "
    + "[" * 3000
    + "]" * 3000
    + "}\n",
    "control characters": '{"rationale": "\\u0000\\u001f\\u2028", "sizes": {' + GOOD + "}}",
}


def _refuse(constant: str) -> Any:
    raise ValueError(f"not strict JSON: {constant}")


def strict_round_trip(record: Any) -> Any:
    """The record as a UTF-8 file holds it, read back by a strict parser (no NaN, no Infinity)."""
    text = json.dumps(record, allow_nan=False, ensure_ascii=False)
    return json.loads(text.encode("utf-8").decode("utf-8"), parse_constant=_refuse)


def decide(answer: str) -> Any:
    request = EngineerRequest(round_index=0, config=round0_config(0), report=None, space=SPACE)
    return LLMEngineer(_Backend(answer), "self", FakeParams(), max_retries=1).propose(request)


@pytest.mark.parametrize("answer", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_decision_record_of_a_hostile_answer_is_strict_json(answer: str) -> None:
    decision = decide(answer)
    record = strict_round_trip(decision.to_dict())
    assert record["responses"] and all("\ud800" not in r and "\udc00" not in r for r in record["responses"])
    for attempt in record["attempts"]:
        assert strict_round_trip(attempt) == attempt
    assert record["config"] == decision.config.model_dump(mode="json")


def test_what_is_kept_of_hostile_values() -> None:
    """Surrogates become U+FFFD, non-finite floats their names, an unprintable int its hex string."""
    out = jsonable({"a\ud800": [float("inf"), float("-inf"), float("nan")], "n": 16**5000, "ok": 7})
    assert out == {"a\ufffd": ["inf", "-inf", "nan"], "n": hex(16**5000), "ok": 7}
    record = strict_round_trip(decide(HOSTILE["yaml hex rationale"]).to_dict())
    assert not record["fell_back"]  # the rest of the answer is still read


_TEXT = st.lists(st.sampled_from(["\ud800", "\udfff", "\x00", "\u2028"]) | st.characters(), max_size=30).map(
    "".join
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rationale=_TEXT, value=st.floats() | st.integers() | st.text(max_size=8))
def test_any_rationale_and_knob_value_give_a_strict_record(rationale: str, value: Any) -> None:
    answer = json.dumps({"rationale": rationale, "sizes": {"3": {"data_ratio": value, "hole_ratio": 0.1}}})
    strict_round_trip(decide(answer).to_dict())
