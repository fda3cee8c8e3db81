"""Batches of similar length (``training.batching``): a permutation, batches drawn from one group each,
less padding than a random order, a new seeded order every epoch."""

from __future__ import annotations

import numpy as np
import pytest

from envengineer.training.batching import LengthGroupedSampler, length_grouped_order


def _batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i : i + size] for i in range(0, len(order), size)]


def test_hand_checked_order() -> None:
    # Two groups of two batches of two: the rows 0..7 shuffled, each half sorted by length and cut in two.
    lengths = [8, 1, 7, 2, 6, 3, 5, 4]
    rng = np.random.default_rng(3)
    perm = np.random.default_rng(3).permutation(8).tolist()
    order = length_grouped_order(lengths, batch_size=2, group_batches=2, rng=rng)
    expected = set()
    for half in (perm[:4], perm[4:]):
        rows = sorted(half, key=lambda i: lengths[i])
        expected |= {frozenset(rows[:2]), frozenset(rows[2:])}
    assert {frozenset(b) for b in _batches(order, 2)} == expected
    assert sorted(order) == list(range(8))


@pytest.mark.parametrize(("rows", "batch", "groups"), [(100, 8, 4), (97, 8, 4), (5, 8, 2), (64, 1, 3)])
def test_a_permutation_whose_batches_come_from_one_group(rows: int, batch: int, groups: int) -> None:
    lengths = np.random.default_rng(1).integers(1, 300, rows).tolist()
    order = length_grouped_order(lengths, batch, groups, np.random.default_rng(7))
    assert sorted(order) == list(range(rows))
    batches = _batches(order, batch)
    assert all(len(b) == batch for b in batches[:-1])  # only the last batch may be short
    perm = np.random.default_rng(7).permutation(rows).tolist()
    group_of = {i: pos // (batch * groups) for pos, i in enumerate(perm)}
    assert all(len({group_of[i] for i in b}) == 1 for b in batches)


def test_less_padding_than_a_random_order_and_batches_shuffled() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.choice([20, 60, 200], size=3200).tolist()

    def padded(order: list[int]) -> int:
        return sum(len(b) * max(lengths[i] for i in b) for b in _batches(order, 32))

    grouped = length_grouped_order(lengths, 32, 4, np.random.default_rng(1))
    assert padded(grouped) < 0.8 * padded(rng.permutation(3200).tolist())
    longest = [max(lengths[i] for i in b) for b in _batches(grouped, 32)]
    # Not sorted group by group: a group's batches are spread over the run.
    assert longest[:4] != sorted(longest[:4]) or longest[4:8] != sorted(longest[4:8])


def test_one_batch_a_group_is_a_random_order() -> None:
    lengths = list(range(40, 0, -1))
    order = length_grouped_order(lengths, 4, 1, np.random.default_rng(5))
    perm = np.random.default_rng(5).permutation(40).tolist()
    assert {frozenset(b) for b in _batches(order, 4)} == {frozenset(b) for b in _batches(perm, 4)}


def test_sampler_is_seeded_and_new_each_epoch() -> None:
    lengths = list(range(64))
    a, b = LengthGroupedSampler(lengths, 4, 2, seed=3), LengthGroupedSampler(lengths, 4, 2, seed=3)
    first, second = list(a), list(a)
    assert len(a) == 64 and sorted(first) == sorted(second) == lengths
    assert first != second
    assert [list(b), list(b)] == [first, second]
    assert list(LengthGroupedSampler(lengths, 4, 2, seed=4)) != first


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="group_batches"):
        length_grouped_order([1, 2], 2, 0, np.random.default_rng(0))
