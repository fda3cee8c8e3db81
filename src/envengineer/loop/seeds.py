"""Per-purpose seeds of a round, drawn from a tuple (never ``base + r``)."""

from __future__ import annotations

import numpy as np


def round_seed(base: int, purpose: str, r: int) -> int:
    """A 31-bit seed for ``purpose`` in round ``r`` from the tuple ``(base, purpose, r)``, never ``base + r``.

    >>> round_seed(0, "data", 1) != round_seed(0, "data", 0) != round_seed(0, "training", 0)
    True
    """
    code = {
        "data": 1,
        "training": 2,
        "validation": 3,
        "benchmark": 4,
        "engineer": 5,
        "warm_start": 6,
        "start_validation": 7,
    }[purpose]
    return int(np.random.SeedSequence((base, code, r)).generate_state(1)[0] >> 1)
