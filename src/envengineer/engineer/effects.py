"""The E context module: what each earlier round's change did to each size's held-out valid rate.

The history (H) shows every round's configuration and results side by side; reading an effect off it means
subtracting numbers across two tables, which a small engineer model does not do. E does the subtraction:
for each pair of consecutive validated rounds ``a -> b`` (and, when the starting model was validated, the
start before the first round), one row per size with the change of the knobs from ``a``'s configuration to
``b``'s (data share, hole ratio, wait ratio) and the change of that size's held-out valid rate from ``a``'s
validation to ``b``'s, in percentage points; then one line naming the sizes whose rate rose and fell most
in the last pair. Rates are :func:`~envengineer.engineer.context.per_size_rates` (pooled over agent counts)
and data shares :meth:`RoundConfig.normalised_ratios`, as in H, so the numbers agree with its tables.

Like every module the rendering is a pure function of its inputs (fixed precision, sizes in order).

>>> from envengineer.mapf.config import RoundConfig
>>> cfg = lambda d, h: RoundConfig.model_validate({"sizes": {
...     "3": {"data_ratio": d, "hole_ratio": h, "wait_ratio": 0},
...     "4": {"data_ratio": 1 - d, "hole_ratio": 0.2, "wait_ratio": 0.5}}})
>>> rep = lambda v3, v4: {"table": {"2": {"sizes": {"3": {"n": 4, "valid": v3}, "4": {"n": 4, "valid": v4}}}}}
>>> before = HistoryEntry(0, cfg(0.5, 0.1), rep(50.0, 25.0))
>>> print(render_effects([before], HistoryEntry(1, cfg(0.75, 0.2), rep(75.0, 0.0))))
## What each round's change did
<BLANKLINE>
Per size: how a round changed the knobs from the round before, and how the held-out valid % moved (points).
<BLANKLINE>
### Round 0 -> 1
<BLANKLINE>
| size | data_ratio | hole_ratio | wait_ratio | valid % |
|---|---|---|---|---|
| 3x3 | +0.250 | +0.100 | 0 | +25.0 |
| 4x4 | -0.250 | 0 | 0 | -25.0 |
<BLANKLINE>
Last round (0 -> 1): valid % rose most at 3x3 (+25.0) and fell most at 4x4 (-25.0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from envengineer.engineer.context import HistoryEntry, per_size_rates

TITLE = "## What each round's change did"


def _signed(value: float | None, digits: int) -> str:
    """``+0.250``, ``-12.5``; ``0`` where the value rounds to zero; ``-`` where there is none."""
    if value is None:
        return "-"
    text = f"{value:+.{digits}f}"
    return "0" if float(text) == 0 else text


def _validated(entries: Sequence[HistoryEntry]) -> list[tuple[HistoryEntry, dict[int, dict[str, float]]]]:
    """The entries with per-size validation rates, by round, each with its rates."""
    out = []
    for e in sorted(entries, key=lambda e: e.round_index):
        rates = per_size_rates(e.report)
        if rates:
            out.append((e, rates))
    return out


def _rows(
    before: HistoryEntry | None,
    before_rates: Mapping[int, Mapping[str, float]],
    after: HistoryEntry,
    after_rates: Mapping[int, Mapping[str, float]],
) -> tuple[list[str], dict[int, float]]:
    """The table rows of one pair (``before`` None: the starting model, which has no configuration) and
    the valid-rate change per size where both rounds have a rate."""
    sizes = sorted(set(after.config.sizes) | set(before.config.sizes if before else ()))
    sizes = sorted(set(sizes) | set(before_rates) | set(after_rates))
    share_a = before.config.normalised_ratios() if before else {}
    share_b = after.config.normalised_ratios()
    rows, moved = [], {}
    for n in sizes:
        a = before.config.sizes.get(n) if before else None
        b = after.config.sizes.get(n)
        data = (
            share_b.get(n, 0.0) - share_a.get(n, 0.0) if before and (n in share_a or n in share_b) else None
        )
        hole = b.hole_ratio - a.hole_ratio if a is not None and b is not None else None
        wait = b.wait_ratio - a.wait_ratio if a is not None and b is not None else None
        va, vb = before_rates.get(n, {}).get("valid"), after_rates.get(n, {}).get("valid")
        valid = vb - va if va is not None and vb is not None else None
        if valid is not None:
            moved[n] = round(valid, 1)
        cells = [_signed(data, 3), _signed(hole, 3), _signed(wait, 3), _signed(valid, 1)]
        rows.append(f"| {n}x{n} | " + " | ".join(cells) + " |")
    return rows, moved


def _extremes(label: str, moved: Mapping[int, float]) -> str:
    """The last line: the sizes whose valid rate rose most and fell most over the last pair."""
    if not moved:
        return f"Last round ({label}): no size has a valid % in both."
    parts = []
    for word, best, sign in (("rose", max(moved.values()), 1), ("fell", min(moved.values()), -1)):
        if best * sign > 0:
            at = " and ".join(f"{n}x{n}" for n, v in sorted(moved.items()) if v == best)
            parts.append(f"{word} most at {at} ({_signed(best, 1)})")
        else:
            parts.append(f"{word} at no size")
    return f"Last round ({label}): valid % " + " and ".join(parts) + "."


def render_effects(
    history: Sequence[HistoryEntry], current: HistoryEntry, *, start: Mapping[str, Any] | None = None
) -> str:
    """E: per pair of consecutive validated rounds, the knob changes and the valid-rate change per size.

    ``history`` and ``current`` as for :func:`~envengineer.engineer.context.render_history` (every round,
    the round-0 default included: its change is a change like any other); ``start``: the starting model's
    validation ScoreReport JSON, the first point when given.
    """
    entries = _validated([e for e in history if e.round_index < current.round_index] + [current])
    points: list[tuple[HistoryEntry | None, dict[int, dict[str, float]]]] = list(entries)
    start_rates = per_size_rates(start)
    if start_rates:
        points.insert(0, (None, start_rates))
    lines = [TITLE, ""]
    if len(points) < 2:
        lines.append("Fewer than two validated rounds so far: no change to compare yet.")
        return "\n".join(lines)
    lines += [
        "Per size: how a round changed the knobs from the round before, and how the held-out valid % moved "
        "(points).",
        "",
    ]
    label, moved = "", {}
    for (a, a_rates), (b, b_rates) in pairwise(points):
        if b is None:  # never: only the first point is the start
            continue
        label = f"start -> round {b.round_index}" if a is None else f"{a.round_index} -> {b.round_index}"
        rows, moved = _rows(a, a_rates, b, b_rates)
        lines += [
            f"### Start -> round {b.round_index}" if a is None else f"### Round {label}",
            "",
            "| size | data_ratio | hole_ratio | wait_ratio | valid % |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    lines.append(_extremes(label, moved))
    return "\n".join(lines)
