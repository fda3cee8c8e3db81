"""The ``climb`` rule from any configuration: below the bar a size keeps its knobs, above it no knob drops.

``experiments/cpu/policy-baseline-climb.yaml`` runs the threshold ladder with ``upper: 0.2, lower: 0.0,
keep_data: true``. Round 0's configuration is a random draw (``round0_config(seeds.config)``), so its sizes
sit off the ladder; these tests start there, as the loop does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envengineer.engineer import EngineerRequest, ThresholdCurriculum
from envengineer.loop.experiment import load_experiment
from envengineer.mapf.config import DEFAULT_SPACE, ConfigSpace, RoundConfig, random_config, round0_config

ROOT = Path(__file__).resolve().parents[1]
CLIMB = ThresholdCurriculum.from_options(
    load_experiment(ROOT / "experiments" / "cpu" / "policy-baseline-climb.yaml").engineer.options,
    name="climb",
)
BAR = 100 * CLIMB.upper  # percent valid above which a size climbs


def report(rates: dict[int, float]) -> dict:
    """A validation report with one agent count and the given valid rate (percent) per size."""
    rows = {str(n): {"n": 20, "valid": v, "optimal": v / 2} for n, v in rates.items()}
    return {"table": {"2": {"sizes": rows}}}


def knobs(cfg: RoundConfig) -> dict[int, tuple[float, float]]:
    return {n: (s.hole_ratio, s.wait_ratio) for n, s in cfg.sizes.items()}


def off_ladder(cfg: RoundConfig, engineer: ThresholdCurriculum = CLIMB) -> list[int]:
    return [n for n, k in knobs(cfg).items() if engineer.level_of(k) is None]


def test_the_climb_experiment_is_the_rule_these_tests_check() -> None:
    assert (CLIMB.upper, CLIMB.lower, CLIMB.keep_data, CLIMB.keep_levels) == (0.2, 0.0, True, False)
    # round 0 of every seed tried is off the ladder at every size
    for seed in range(5):
        assert off_ladder(round0_config(seed)) == list(DEFAULT_SPACE.sizes)


def test_climb_from_round0_of_seed_0_by_hand() -> None:
    r0 = round0_config(0)
    assert knobs(r0)[3] == (0.47, 0.386) and knobs(r0)[4] == (0.115, 0.716)
    rates = {n: (50.0 if n % 2 == 0 else 10.0) for n in r0.sizes}  # even sizes above the bar
    new, moves = CLIMB.step_config(r0, report(rates), DEFAULT_SPACE)
    after = knobs(new)
    # odd sizes (10 % valid) keep their own knobs, not the nearest level's
    assert {n: after[n] for n in (3, 5, 7, 9)} == {n: knobs(r0)[n] for n in (3, 5, 7, 9)}
    # 4x4 (0.115, 0.716): the first level at or above in both knobs is (0.4, 0.8), not the nearest (0.3, 0.6)
    assert after[4] == (0.4, 0.8) and moves["4"]["level"] is None and moves["4"]["new_level"] == 4
    assert after[6] == (0.5, 1.0)  # from (0.495, 0.929)
    assert after[10] == (0.4, 0.8)  # from (0.345, 0.437)
    assert moves["3"]["move"] == "stay" and moves["3"]["new_knobs"] == [0.47, 0.386]
    assert {n: s.data_ratio for n, s in new.sizes.items()} == {n: s.data_ratio for n, s in r0.sizes.items()}


@pytest.mark.parametrize("seed", range(12))
def test_sizes_below_the_bar_keep_their_own_hole_and_wait_ratio(seed: int) -> None:
    r0 = round0_config(seed)
    rng = np.random.default_rng(np.random.SeedSequence((seed, 59)))
    rates = {n: float(rng.uniform(0.0, BAR)) for n in r0.sizes}  # every size at or below the bar
    rates[int(rng.choice(list(r0.sizes)))] = BAR  # exactly at the bar is not above it
    new, moves = CLIMB.step_config(r0, report(rates), DEFAULT_SPACE)
    assert knobs(new) == knobs(r0)
    assert {m["move"] for m in moves.values()} == {"stay"}
    assert {n: s.data_ratio for n, s in new.sizes.items()} == {n: s.data_ratio for n, s in r0.sizes.items()}


def _check_round(before: RoundConfig, after: RoundConfig, rates: dict[int, float]) -> None:
    """No knob decreases; below the bar or unvalidated: unchanged; above: harder unless at the top."""
    top = CLIMB.levels[-1]
    for n, (h0, w0) in knobs(before).items():
        h1, w1 = knobs(after)[n]
        assert h1 >= h0 and w1 >= w0, f"{n}x{n} went easier: {(h0, w0)} -> {(h1, w1)}"
        if n not in rates or rates[n] <= BAR:
            assert (h1, w1) == (h0, w0), f"{n}x{n} moved at {rates.get(n)} % valid"
        elif not (h0 >= top[0] and w0 >= top[1]):
            assert (h1, w1) != (h0, w0), f"{n}x{n} did not climb from {(h0, w0)} at {rates[n]} % valid"
        assert after.sizes[n].data_ratio == before.sizes[n].data_ratio  # keep_data: exactly as it was


rate = st.one_of(st.none(), st.floats(0.0, 100.0), st.sampled_from([0.0, BAR, 100.0]))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    space_sizes=st.sampled_from([DEFAULT_SPACE.sizes, (3, 4, 5, 6)]),
    rounds=st.lists(st.lists(rate, min_size=8, max_size=8), min_size=1, max_size=4),
)
def test_no_size_ever_leaves_a_round_easier_than_it_entered(
    seed: int, space_sizes: tuple[int, ...], rounds: list[list[float | None]]
) -> None:
    space = ConfigSpace(sizes=space_sizes)
    cfg = random_config(np.random.default_rng(np.random.SeedSequence((seed, 0xC0F16))), space)
    for draw in rounds:  # several rounds in a row: the rule reads each round's applied configuration
        rates = {n: r for n, r in zip(space.sizes, draw[: len(space.sizes)], strict=True) if r is not None}
        new, _ = CLIMB.step_config(cfg, report(rates), space)
        _check_round(cfg, new, rates)
        cfg = new


@pytest.mark.parametrize("step", [1, 2, 3])
def test_every_start_on_a_grid_climbs_to_the_first_level_above_it(step: int) -> None:
    engineer = ThresholdCurriculum(upper=0.2, lower=0.0, keep_data=True, step=step)
    ladder = engineer.levels
    for h in np.round(np.linspace(0.0, 0.5, 11), 3):
        for w in np.round(np.linspace(0.0, 1.0, 11), 3):
            start = (float(h), float(w))
            new = engineer.moved(start, "up")
            above = [lv for lv in ladder if lv[0] >= h and lv[1] >= w and lv != start]
            # the step-th ladder level at or above the start in both knobs (the top where fewer remain)
            assert new == (above[min(step, len(above)) - 1] if above else start)


def test_the_ladder_moves_down_without_raising_a_knob_and_stays_exactly() -> None:
    # the threshold defaults (upper 0.6, lower 0.2) from round 0: down never adds holes or waits
    thr = ThresholdCurriculum()
    r0 = round0_config(3)
    rates = {n: [5.0, 40.0, 90.0][i % 3] for i, n in enumerate(r0.sizes)}
    new, moves = thr.step_config(r0, report(rates), DEFAULT_SPACE)
    for n, (h0, w0) in knobs(r0).items():
        h1, w1 = knobs(new)[n]
        if rates[n] < 20.0:
            assert h1 <= h0 and w1 <= w0 and (h1, w1) != (h0, w0) and thr.level_of((h1, w1)) is not None
        elif rates[n] > 60.0:
            assert h1 >= h0 and w1 >= w0 and (h1, w1) != (h0, w0)
        else:
            assert (h1, w1) == (h0, w0) and moves[str(n)]["move"] == "stay"


def test_a_clipped_ladder_still_climbs_and_reports_where_it_stands() -> None:
    # holes at most 0.3: levels 3-5 share their hole ratio, so a climb there adds waits only
    space = ConfigSpace(sizes=(3, 4), hole_ratio_max=0.3)
    sizes = {"3": (1, 0.3, 0.6), "4": (1, 0.3, 1.0)}
    cfg = RoundConfig.model_validate(
        {
            "sizes": {
                n: dict(zip(("data_ratio", "hole_ratio", "wait_ratio"), v, strict=True))
                for n, v in sizes.items()
            }
        }
    )
    new, moves = CLIMB.step_config(cfg, report({3: 90.0, 4: 90.0}), space)
    assert knobs(new) == {3: (0.3, 0.8), 4: (0.3, 1.0)}
    assert (moves["3"]["level"], moves["3"]["new_level"]) == (3, 4)
    assert moves["4"]["move"] == "up (at the end of the ladder)"
    d = CLIMB.propose(EngineerRequest(1, cfg, report({3: 90.0, 4: 90.0}), space=space))
    assert "level 3 -> 4" in d.rationale
    r0 = round0_config(0)
    d0 = CLIMB.propose(EngineerRequest(1, r0, report({3: 10.0}), space=DEFAULT_SPACE))
    assert "3x3: valid 10.0%, holes 0.47, waits 0.386 (off the ladder) -> holes 0.47" in d0.rationale
