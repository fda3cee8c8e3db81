"""The round configuration: bounds, allocation and projection onto the legal space (SPEC §3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from envengineer.errors import ConfigError
from envengineer.mapf.config import (
    DEFAULT_SPACE,
    ConfigSpace,
    RoundConfig,
    largest_remainder,
    project,
    random_config,
    round0_config,
    validate_proposal,
)


def cfg(sizes: dict, **kw) -> RoundConfig:
    return RoundConfig.model_validate({"sizes": sizes, **kw})


def knob(d=1.0, h=0.2, w=0.5) -> dict:
    return {"data_ratio": d, "hole_ratio": h, "wait_ratio": w}


def test_bounds_and_unknown_keys_are_rejected():
    with pytest.raises(ValidationError):
        cfg({3: knob(h=0.6)})
    with pytest.raises(ValidationError):
        cfg({3: knob(w=1.5)})
    with pytest.raises(ValidationError):
        cfg({3: knob(d=-0.1)})
    with pytest.raises(ValidationError):
        cfg({3: {**knob(), "slippery": True}})
    with pytest.raises(ValidationError):
        RoundConfig.model_validate({"sizes": {3: knob()}, "reward": "x"})
    with pytest.raises(ValidationError):
        cfg({3: knob(d=0.0), 4: knob(d=0.0)})
    with pytest.raises(ValidationError):
        cfg({3: knob(h=math.nan)})


def test_size_keys_accept_ints_strings_and_nxn():
    assert set(cfg({"3": knob(), "4x4": knob(), 5: knob()}).sizes) == {3, 4, 5}
    with pytest.raises(ValidationError):
        cfg({"4x5": knob()})


def test_largest_remainder_is_exact():
    assert largest_remainder([1, 1, 1], 10) == [4, 3, 3]
    assert largest_remainder([0.25, 0.75], 50) == [13, 37]  # tie .5/.5 goes to the first part
    assert largest_remainder([0.5, 0.5], 3) == [2, 1]


def test_allocation_counts_are_exact_and_sum_to_num_samples():
    c = cfg({3: knob(d=1, w=0.5), 4: knob(d=1, w=0.0), 5: knob(d=2, w=1.0)}, num_samples=10)
    alloc = c.allocation()
    # quotas 2.5, 2.5, 5 -> 3, 2, 5 (tie to the earlier size); waits 0.5*3 -> 2, 0, all 5
    assert alloc == {3: (3, 2), 4: (2, 0), 5: (5, 5)}
    assert sum(n for n, _ in alloc.values()) == 10


@given(st.lists(st.floats(0, 10), min_size=1, max_size=8), st.integers(0, 5000))
def test_largest_remainder_sums(weights, total):
    if sum(weights) <= 0:
        return
    parts = largest_remainder(weights, total)
    assert sum(parts) == total
    s = sum(weights)
    assert all(abs(p - w / s * total) < 1 for p, w in zip(parts, weights, strict=True))


def test_random_config_is_legal_and_seeded():
    a = random_config(np.random.default_rng(5))
    b = random_config(np.random.default_rng(5))
    assert a == b
    assert set(a.sizes) == set(DEFAULT_SPACE.sizes)
    assert all(0 <= s.hole_ratio <= 0.5 and 0 <= s.wait_ratio <= 1 for s in a.sizes.values())
    assert round0_config(1) == round0_config(1) != round0_config(2)


def test_projection_clips_fills_drops_and_renormalises():
    prev = cfg({n: knob(d=1) for n in range(3, 11)})
    p = project(
        {
            "sizes": {
                "3": {"data_ratio": 3, "hole_ratio": 0.9, "wait_ratio": -2},
                "4x4": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.2},
                "12": knob(),
                "big": knob(),
            }
        },
        prev,
    )
    c = p.config
    assert c.sizes[3].hole_ratio == 0.5 and c.sizes[3].wait_ratio == 0.0
    assert c.sizes[4].hole_ratio == 0.1
    # size 5 is filled from the previous config (its data ratio then renormalised with the others)
    assert (c.sizes[5].hole_ratio, c.sizes[5].wait_ratio) == (
        prev.sizes[5].hole_ratio,
        prev.sizes[5].wait_ratio,
    )
    assert 12 not in c.sizes
    assert math.isclose(sum(s.data_ratio for s in c.sizes.values()), 1.0)
    assert math.isclose(c.sizes[3].data_ratio, 3 / 10)
    text = " ".join(p.changes)
    for needle in ("clipped", "dropped size 12", "'big'", "size 5 missing", "renormalised"):
        assert needle in text
    assert p.raw["sizes"]["3"]["hole_ratio"] == 0.9  # the raw proposal is kept as given


def test_projection_all_zero_nan_negative_strings():
    prev = cfg({3: knob(d=1, h=0.1, w=0.3), 4: knob(d=1, h=0.2, w=0.4)})
    space = ConfigSpace(sizes=(3, 4))
    p = project(
        {
            "3": {"data_ratio": 0, "hole_ratio": "lots", "wait_ratio": float("nan")},
            "4": {"data_ratio": -5, "hole_ratio": None, "wait_ratio": "0.25"},
        },
        prev,
        space,
    )
    c = p.config
    assert c.sizes[3].data_ratio == c.sizes[4].data_ratio == 0.5  # all zero -> uniform
    assert c.sizes[3].hole_ratio == 0.1 and c.sizes[3].wait_ratio == 0.3  # non-numbers -> previous
    assert c.sizes[4].hole_ratio == 0.2 and c.sizes[4].wait_ratio == 0.25  # numeric string accepted
    assert any("uniform" in ch for ch in p.changes)


def test_projection_of_garbage_keeps_previous_and_fixed_fields():
    prev = cfg({3: knob(d=1.0)}, num_agents=2, num_samples=100)
    for garbage in (None, "text", 42, [1, 2], {"sizes": "none"}):
        p = project(garbage, prev, ConfigSpace(sizes=(3,)))
        assert p.config == prev
        assert p.changes
    p = project({"sizes": {3: knob()}, "num_agents": 5, "num_samples": 9}, prev, ConfigSpace(sizes=(3,)))
    assert (p.config.num_agents, p.config.num_samples) == (2, 100)
    assert any("num_agents" in ch for ch in p.changes)


@settings(max_examples=200)
@given(
    st.dictionaries(
        st.one_of(st.integers(-2, 14), st.text(max_size=4)),
        st.one_of(
            st.none(),
            st.floats(allow_nan=True, allow_infinity=True),
            st.text(max_size=3),
            st.dictionaries(
                st.sampled_from(["data_ratio", "hole_ratio", "wait_ratio", "x"]),
                st.one_of(st.floats(), st.text(max_size=3), st.none()),
            ),
        ),
    )
)
def test_projection_always_lands_in_the_legal_space(proposal):
    prev = round0_config(0)
    c = project(proposal, prev).config
    assert set(c.sizes) == set(DEFAULT_SPACE.sizes)
    assert math.isclose(sum(s.data_ratio for s in c.sizes.values()), 1.0)
    assert all(0 <= s.hole_ratio <= 0.5 and 0 <= s.wait_ratio <= 1 for s in c.sizes.values())


def test_validate_proposal_names_the_problems():
    assert validate_proposal({"3": knob()}) == []
    assert validate_proposal({"sizes": {"3": knob()}}) == []
    assert "hole_ratio" in validate_proposal({"3": knob(h=0.9)})[0]
    assert validate_proposal({"3": {**knob(), "extra": 1}})
    assert any("12" in e for e in validate_proposal({"12": knob()}))
    assert validate_proposal("not a dict")


def test_load_reports_a_one_line_error(tmp_path):
    f = tmp_path / "round.yaml"
    f.write_text("sizes:\n  3: {data_ratio: 1, hole_ratio: 0.8, wait_ratio: 0.5}\n")
    with pytest.raises(ConfigError, match="hole_ratio"):
        RoundConfig.load(f)
    c = round0_config(3)
    c.save(tmp_path / "r.yaml")
    assert RoundConfig.load(tmp_path / "r.yaml") == c


# -- proposals of any shape (issue 12 item 2): validate_proposal and project() are total ----------------
def _json_values(max_leaves: int = 25):
    leaves = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=10**300, max_value=10**400)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from([1e308, -1e308, 5e-324, 0.0, -0.0, 0.5, 3, "3", "3x3", "0.1", "NaN", "inf", ""])
        | st.text(max_size=8)
    )
    keys = st.sampled_from(["sizes", "num_agents", "num_samples", "3", "4x4", "10", "12", "data_ratio",
                            "hole_ratio", "wait_ratio", "rationale", ""]) | st.text(max_size=5)  # fmt: skip
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
        max_leaves=max_leaves,
    )


def _size_entries():
    value = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.booleans(),
        st.none(),
        st.text(max_size=4),
        st.lists(st.integers(), max_size=2),
    )
    entry = st.dictionaries(st.sampled_from(["data_ratio", "hole_ratio", "wait_ratio", "walls"]), value)
    return st.fixed_dictionaries(
        {"sizes": st.dictionaries(st.sampled_from(["3", "4", "5x5", "10", "11", "x"]), entry | value)},
        optional={"num_agents": value, "num_samples": value, "reward": value},
    )


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json_values(), _size_entries()))
def test_validate_and_project_are_total_over_any_json_value(proposal) -> None:
    prev = round0_config(0)
    issues = validate_proposal(proposal)
    assert isinstance(issues, list) and all(isinstance(i, str) and len(i) < 300 for i in issues)
    p = project(proposal, prev)
    c = p.config
    assert isinstance(c, RoundConfig) and set(c.sizes) == set(DEFAULT_SPACE.sizes)
    assert math.isclose(sum(s.data_ratio for s in c.sizes.values()), 1.0)
    assert all(0 <= s.hole_ratio <= 0.5 and 0 <= s.wait_ratio <= 1 for s in c.sizes.values())
    assert (c.num_agents, c.num_samples) == (prev.num_agents, prev.num_samples)
    assert all(isinstance(ch, str) and len(ch) < 300 for ch in p.changes)
    if issues == [] and isinstance(proposal, dict):
        assert not any("clipped" in ch or "not a number" in ch for ch in p.changes)


def test_huge_numbers_nan_and_strings_are_clipped_or_kept_and_recorded() -> None:
    prev = round0_config(0, num_samples=100)
    big = 10**400
    proposal = {
        "num_agents": big,
        "num_samples": True,
        "sizes": {
            "3": {"data_ratio": 1e308, "hole_ratio": big, "wait_ratio": -big},
            "4": {"data_ratio": 1e308, "hole_ratio": float("nan"), "wait_ratio": "lots"},
            "5": {"data_ratio": [1, {"x": [2]}], "hole_ratio": {"deep": {"deeper": 1}}, "wait_ratio": True},
            "9" * 400: {"data_ratio": 1},
        },
    }
    issues = validate_proposal(proposal)
    text = "\n".join(issues)
    for fragment in (
        "num_agents: <an integer of about 400 digits> is out of range",
        "num_samples: True is not an integer",
        "sizes.3.data_ratio: 1e+308 is out of range; use a number in [0, 1000]",
        "sizes.3.hole_ratio: <an integer of about 400 digits> is out of range; use a number in [0, 0.5]",
        "sizes.4.hole_ratio: nan is not a finite number",
        "sizes.4.wait_ratio: 'lots' is not a finite number",
        "sizes.5.wait_ratio: True is not a finite number",
        "not a map size",
    ):
        assert fragment in text, (fragment, issues)
    assert all(len(i) < 200 for i in issues)
    p = project(proposal, prev)
    s = p.config.sizes
    assert s[3].data_ratio == s[4].data_ratio == pytest.approx(0.5, abs=1e-3)  # 1000 : 1000 : the small rest
    assert (s[3].hole_ratio, s[3].wait_ratio) == (0.5, 0.0)
    assert s[4].hole_ratio == prev.sizes[4].hole_ratio and s[5].wait_ratio == prev.sizes[5].wait_ratio
    assert (p.config.num_agents, p.config.num_samples) == (prev.num_agents, 100)
    changes = "\n".join(p.changes)
    assert "size 3: data_ratio 1e+308 clipped to 1000.0" in changes
    assert "num_agents is set by the experiment" in changes and "400 digits" in changes
    assert all(len(ch) < 200 for ch in p.changes)


def test_booleans_are_not_counts_or_ratios() -> None:
    with pytest.raises(ValidationError, match="boolean"):
        cfg({3: knob()}, num_samples=True)
    with pytest.raises(ValidationError, match="boolean"):
        cfg({3: knob()}, num_agents=False)
    with pytest.raises(ValidationError, match="boolean"):
        cfg({3: knob(h=True)})
    assert cfg({3: knob()}, num_samples=7).num_samples == 7


def test_round_file_with_boolean_num_samples_is_a_one_line_error(tmp_path) -> None:
    f = tmp_path / "round.yaml"
    f.write_text("num_samples: true\nsizes:\n  3: {data_ratio: 1, hole_ratio: 0.1, wait_ratio: 0.5}\n")
    with pytest.raises(ConfigError, match=r"num_samples: .*boolean") as err:
        RoundConfig.load(f)
    assert "\n" not in str(err.value)
