"""Bootstrap intervals over an arm's seeds, and the difference of each arm to a reference arm.

Per arm and metric (the benchmark's and the last validation's Sum per agent count, and their mean over
agent counts; valid and optimal %) ``envengineer compare`` gives the mean over the arm's runs (one value
per seed) and a 95 % percentile-bootstrap interval: the seeds are resampled with replacement
:data:`RESAMPLES` times (numpy, seeded with :data:`SEED`, so the same runs give the same interval) and the
2.5th and 97.5th percentiles of the resampled means are the bounds. With ``against`` (``--against ARM``)
each other arm's difference to the reference arm gets the same: both arms' seeds are resampled
independently and the interval is that of the difference of the two resampled means. An arm of one seed
has a mean and no interval (``None``): one run says nothing about the spread.

The paired gains live here too, the one place the project resamples them: :func:`paired_board_gain` (one
run against another on the same boards, board by board: ``envengineer report``'s gain over the starting
model, the benchmarks' tables) and :func:`paired_seed_gain` (several seeds' runs against their starting
points, over seeds and boards: the benchmarks' GRPO transfer and teaching tables).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

RESAMPLES = 10_000
SEED = 0
LEVEL = 95.0
METRICS = ("valid", "optimal")


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """``{"n", "mean", "low", "high"}``: the mean and its 95 % percentile-bootstrap interval.

    >>> bootstrap_mean([10.0, 10.0, 10.0])
    {'n': 3, 'mean': 10.0, 'low': 10.0, 'high': 10.0}
    >>> bootstrap_mean([10.0, 20.0])  # resampled means are 10, 15 or 20
    {'n': 2, 'mean': 15.0, 'low': 10.0, 'high': 20.0}
    """
    import numpy as np

    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "low": None, "high": None}
    data = np.asarray(values, dtype=float)
    if n == 1:
        return {"n": 1, "mean": round(float(data[0]), 2), "low": None, "high": None}
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    return _interval(n, float(data.mean()), means)


def bootstrap_difference(
    values: Sequence[float], reference: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """``mean(values) - mean(reference)`` with its 95 % interval, each side's seeds resampled on their own.

    >>> bootstrap_difference([20.0, 20.0], [10.0, 10.0, 10.0])
    {'n': 2, 'mean': 10.0, 'low': 10.0, 'high': 10.0, 'n_reference': 3}
    """
    import numpy as np

    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    if not len(a) or not len(b):
        return {"n": len(a), "mean": None, "low": None, "high": None, "n_reference": len(b)}
    mean = float(a.mean() - b.mean())
    if len(a) == 1 and len(b) == 1:
        out = {"n": 1, "mean": round(mean, 2), "low": None, "high": None}
    else:
        rng = np.random.default_rng(seed)
        ma = a[rng.integers(0, len(a), size=(resamples, len(a)))].mean(axis=1)
        mb = b[rng.integers(0, len(b), size=(resamples, len(b)))].mean(axis=1)
        out = _interval(len(a), mean, ma - mb)
    return {**out, "n_reference": len(b)}


def paired_board_gain(
    before: Sequence[float], after: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """The mean gain ``after - before`` in points over boards paired by position (flags 0/1 or rates in
    [0, 1]), with its 95 % percentile-bootstrap interval over the boards: :func:`bootstrap_mean` of the
    boards' differences ``100 * (after - before)``.

    >>> paired_board_gain([0, 1, 1, 0], [1, 1, 1, 0])
    {'n': 4, 'mean': 25.0, 'low': 0.0, 'high': 75.0}
    """
    diffs = [100.0 * (a - b) for b, a in zip(before, after, strict=True)]
    return bootstrap_mean(diffs, resamples=resamples, seed=seed)


def paired_seed_gain(
    before: Sequence[Sequence[float]],
    after: Sequence[Sequence[float]],
    *,
    shared_boards: bool,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """The mean gain ``after - before`` in points over seeds and boards, with a 95 % bootstrap interval.

    ``before[s]`` and ``after[s]`` are seed ``s``'s per-board flags (0/1), paired by position. A seed's
    gain is the mean of its boards' differences; the gain is the mean over seeds. Each resample draws the
    seeds with replacement and the boards with replacement: with ``shared_boards`` (every seed scored the
    same boards, the held-out sets) one draw of board indices serves all seeds, so a board's pairing holds
    across them; otherwise (each seed's own training boards) each drawn seed draws its own boards. One
    seed: no interval (``low``/``high`` None).

    >>> g = paired_seed_gain([[0, 0, 1], [0, 0, 1]], [[1, 0, 1], [1, 1, 1]], shared_boards=True)
    >>> g["per_seed"], g["mean"], g["warm_pct"], g["after_pct"]
    ([33.33, 66.67], 50.0, 33.33, 83.33)
    """
    import numpy as np

    diffs = [100 * (np.asarray(a, float) - np.asarray(b, float)) for b, a in zip(before, after, strict=True)]
    per_seed = [float(d.mean()) for d in diffs]
    out = {
        "seeds": len(diffs),
        "boards": [len(d) for d in diffs],
        "warm_pct": round(100 * float(np.mean([np.mean(b) for b in before])), 2),
        "after_pct": round(100 * float(np.mean([np.mean(a) for a in after])), 2),
        "per_seed": [round(g, 2) for g in per_seed],
        "mean": round(float(np.mean(per_seed)), 2),
        "low": None,
        "high": None,
    }
    if len(diffs) > 1:
        rng = np.random.default_rng(seed)
        means = (
            _shared_resamples(diffs, resamples, rng)
            if shared_boards
            else _own_resamples(diffs, resamples, rng)
        )
        low, high = np.percentile(means, [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2])
        out.update(low=round(float(low), 2), high=round(float(high), 2))
    return out


def _shared_resamples(diffs: list[Any], resamples: int, rng: Any) -> Any:
    """Resampled gains: seeds drawn, and one board draw for all of them (as counts per seed and board)."""
    import numpy as np

    d = np.stack(diffs)  # seeds x boards
    seeds, boards = d.shape
    w_seed = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=resamples) / seeds
    w_board = rng.multinomial(boards, np.full(boards, 1 / boards), size=resamples) / boards
    return ((w_seed @ d) * w_board).sum(axis=1)


def _own_resamples(diffs: list[Any], resamples: int, rng: Any) -> Any:
    """Resampled gains: seeds drawn, and each drawn seed's boards drawn from its own (independently)."""
    import numpy as np

    seeds = len(diffs)
    pick = rng.integers(0, seeds, size=(resamples, seeds))
    total = np.zeros(resamples)
    for slot in range(seeds):
        for s, d in enumerate(diffs):
            rows = pick[:, slot] == s
            counts = rng.multinomial(len(d), np.full(len(d), 1 / len(d)), size=int(rows.sum()))
            total[rows] += counts @ d / len(d)
    return total / seeds


def _interval(n: int, mean: float, resampled: Any) -> dict[str, Any]:
    import numpy as np

    low, high = np.percentile(resampled, [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2])
    return {"n": n, "mean": round(mean, 2), "low": round(float(low), 2), "high": round(float(high), 2)}


def seed_values(scores: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per metric label (``"3 agents"``, ..., ``"mean"``) and valid / optimal: one value per run's scores.

    ``mean`` is the unweighted mean of a run's Sums over its agent counts (the comparison table's column);
    a run without a label's agent count adds no value to it.
    """
    out: dict[str, dict[str, list[float]]] = {}
    agents = sorted({a for s in scores for a in s.get("table", {})}, key=int)
    for s in scores:
        table = s.get("table", {})
        for a in agents:
            if a in table:
                for k in METRICS:
                    out.setdefault(f"{a} agents", {m: [] for m in METRICS})[k].append(
                        float(table[a]["sum"][k])
                    )
        if table:
            for k in METRICS:
                mean = sum(float(t["sum"][k]) for t in table.values()) / len(table)
                out.setdefault("mean", {m: [] for m in METRICS})[k].append(mean)
    return out


def arm_intervals(
    arm_scores: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    against: str | None = None,
    unpaired: Collection[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Intervals per arm, and differences to ``against``, from ``{arm: {which: [scores per run]}}``.

    ``which`` is ``benchmark`` or ``validation``. ``unpaired`` names the ``(arm, which)`` scores that
    were taken on other instances than the reference's: they get no difference. The result is what
    ``compare.json`` holds under ``intervals``.
    """
    values = {arm: {w: seed_values(s) for w, s in per.items()} for arm, per in arm_scores.items()}
    out: dict[str, Any] = {
        "level": LEVEL,
        "resamples": RESAMPLES,
        "seed": SEED,
        "arms": {
            arm: {
                w: {label: {k: bootstrap_mean(v[k]) for k in METRICS} for label, v in vals.items()}
                for w, vals in per.items()
            }
            for arm, per in values.items()
        },
        "against": against,
        "differences": {},
    }
    if against is None:
        return out
    ref = values[against]
    for arm, per in values.items():
        if arm == against:
            continue
        out["differences"][arm] = {
            w: {
                label: {k: bootstrap_difference(v[k], ref[w][label][k]) for k in METRICS}
                for label, v in vals.items()
                if label in ref.get(w, {})
            }
            for w, vals in per.items()
            if (arm, w) not in unpaired
        }
    return out


def intervals_markdown(data: Mapping[str, Any]) -> str:
    """The arms' means with their intervals, and the differences to the reference arm, as tables."""
    lines = [
        f"## Means over seeds with {data['level']:.0f} % bootstrap intervals",
        "",
        f"Percentile bootstrap over each arm's runs ({data['resamples']:,} resamples, seed {data['seed']}); "
        "`mean [low, high]`; an arm of one run has no interval.",
        "",
    ]
    lines += _table(data["arms"], "arm")
    if data.get("against"):
        lines += [
            "",
            f"### Difference to `{data['against']}` (arm minus reference, percentage points)",
            "",
            "Each arm's seeds resampled independently; an interval that excludes 0 is a difference these "
            "seeds tell apart from noise.",
            "",
        ]
        lines += _table(data["differences"], "arm")
    return "\n".join(lines).rstrip()


def _table(per_arm: Mapping[str, Any], head: str) -> list[str]:
    rows = [f"| {head} | scores | metric | runs | valid % | optimal % |", "|---|---|---|---|---|---|"]
    for arm, per in per_arm.items():
        for which, labels in per.items():
            for label, cell in labels.items():
                rows.append(
                    f"| `{arm}` | {which} | {label} | {cell['valid']['n']} | {_text(cell['valid'])} | "
                    f"{_text(cell['optimal'])} |"
                )
    return rows


def _text(c: Mapping[str, Any]) -> str:
    if c.get("mean") is None:
        return ""
    if c.get("low") is None:
        return f"{c['mean']:.2f}"
    return f"{c['mean']:.2f} [{c['low']:.2f}, {c['high']:.2f}]"
