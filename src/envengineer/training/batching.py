"""Batches of similar length that stay mixed: less padding without sorting the whole run.

A batch is padded to its longest row, so with answers of one to three agents on boards of 3 to 8 cells a
random batch of 32 carries much padding: its longest row is far longer than most of its rows. Sorting
the whole dataset by length (transformers' ``group_by_length``: megabatches of 50 batches) makes every
batch one kind of board, and in a measured warm-start the loss stayed well above a random order's. The
middle way here: shuffle, cut the rows into groups of ``group_batches`` batches, sort each group by
length and cut it into batches, then shuffle the batches. Each batch still draws from a random sample of
``group_batches * batch_size`` rows.

Measured (docs/models.md, ``bench_warm_start.py --length-groups N``): groups of 4 give 1.4x the steps in
the same minutes but less learned per step; groups of 2 give 1.25x and the best 15-minute warm-start
measured (``free-moves``, two seeds), which ``sft-small`` ships.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def length_grouped_order(
    lengths: Sequence[int], batch_size: int, group_batches: int, rng: np.random.Generator
) -> list[int]:
    """A permutation of ``range(len(lengths))`` whose consecutive ``batch_size`` slices are the batches.

    >>> order = length_grouped_order([5, 1, 4, 2, 3, 6], 2, 3, np.random.default_rng(0))
    >>> sorted(order), sorted(tuple(sorted([5, 1, 4, 2, 3, 6][i] for i in order[j:j + 2])) for j in (0, 2, 4))
    ([0, 1, 2, 3, 4, 5], [(1, 2), (3, 4), (5, 6)])
    """
    if batch_size < 1 or group_batches < 1:
        raise ValueError(f"batch_size and group_batches must be >= 1, got {batch_size} and {group_batches}")
    perm = rng.permutation(len(lengths))
    group = batch_size * group_batches
    batches: list[list[int]] = []
    for start in range(0, len(perm), group):
        rows = sorted(perm[start : start + group].tolist(), key=lambda i: lengths[i])
        batches += [rows[b : b + batch_size] for b in range(0, len(rows), batch_size)]
    # A short group (the dataset's tail) may leave a short batch; it stays last, where the loader expects it.
    full = [b for b in batches if len(b) == batch_size]
    tail = [b for b in batches if len(b) < batch_size]
    return [i for b in [*(full[j] for j in rng.permutation(len(full))), *tail] for i in b]


class LengthGroupedSampler:
    """A ``torch`` sampler over :func:`length_grouped_order`, a new order every epoch (seeded)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, group_batches: int, seed: int) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.group_batches = group_batches
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng((self.seed, self.epoch))
        self.epoch += 1
        return iter(length_grouped_order(self.lengths, self.batch_size, self.group_batches, rng))


def length_grouped_trainer(trainer_cls: type, group_batches: int) -> type:
    """A subclass of the ``transformers`` trainer ``trainer_cls`` (one process) whose training batches come
    from a :class:`LengthGroupedSampler` over its tokenized dataset (what the trainer pads)."""

    class LengthGroupedTrainer(trainer_cls):  # type: ignore[valid-type,misc]
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:  # transformers' hook
            data = self.train_dataset if train_dataset is None else train_dataset
            lengths = [len(ids) for ids in data["input_ids"]]
            return LengthGroupedSampler(
                lengths, self.args.per_device_train_batch_size, group_batches, seed=self.args.seed
            )

    return LengthGroupedTrainer
