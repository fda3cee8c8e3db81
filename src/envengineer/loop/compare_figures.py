"""The figures of ``envengineer compare``: the arms' benchmark sums and validation curves, each run's
data allocation across map sizes per round (the paper's Fig. 7), and each arm's learning curve over its
seeds (mean and interval)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.loop.report import RunRecord, _plt, _save, allocation


def compare_figure(agents: list[str], rows: list[dict[str, Any]], path: Path) -> Path:
    """Per run: benchmark sums by agent count (light valid, dark optimal) and the validation curve."""
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11.0, 4.0))
    width = 0.8 / max(len(rows), 1)
    cmap = plt.get_cmap("tab10")
    for i, row in enumerate(rows):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(agents))]
        valid = [row["sums"].get(a, {}).get("valid", 0.0) for a in agents]
        optimal = [row["sums"].get(a, {}).get("optimal", 0.0) for a in agents]
        ax.bar(xs, valid, width=width * 0.95, color=cmap(i % 10), alpha=0.45)
        ax.bar(xs, optimal, width=width * 0.95, color=cmap(i % 10), label=row["name"])
        curve = row["validation_curve"]
        if curve:
            ax2.plot(
                [c[0] for c in curve],
                [c[1] for c in curve],
                marker="o",
                color=cmap(i % 10),
                label=row["name"],
            )
    ax.set_xticks(range(len(agents)), [f"{a} agents" for a in agents])
    ax.set_ylabel("benchmark Sum (%): light = valid, dark = optimal")
    ax.legend(fontsize=8)
    ax2.set_xlabel("round")
    ax2.set_ylabel("validation valid (%)")
    ax2.grid(alpha=0.3)
    if any(r["validation_curve"] for r in rows):
        ax2.legend(fontsize=8)
    fig.suptitle("comparison of runs")
    return _save(fig, path)


def allocation_figure(runs: Sequence[RunRecord], path: Path) -> Path | None:
    """Each run's data allocation across map sizes per round, one panel per run (the paper's Fig. 7)."""
    data = [(run, *allocation(run)) for run in runs]
    data = [d for d in data if d[1]]
    if not data:
        return None
    plt = _plt()
    sizes = sorted({n for d in data for n in d[2]})
    cmap = plt.get_cmap("viridis")
    colors = {n: cmap(i / max(len(sizes) - 1, 1)) for i, n in enumerate(sizes)}
    fig, axes = plt.subplots(1, len(data), figsize=(2.2 + 2.4 * len(data), 4.0), sharey=True, squeeze=False)
    for ax, (run, rounds, _, share) in zip(axes[0], data, strict=True):
        bottom = [0.0] * len(rounds)
        for n in sizes:
            vals = share.get(n, [0.0] * len(rounds))
            ax.bar(
                range(len(rounds)), vals, bottom=bottom, color=colors[n], label=f"{n}x{n}", edgecolor="white"
            )
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xticks(range(len(rounds)), [f"r{r}" for r in rounds])
        ax.set_title(run.name, fontsize=9)
        ax.set_ylim(0, 100)
    axes[0][0].set_ylabel("share of the round's samples (%)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, title="size", loc="center right", fontsize=8)
    fig.suptitle("data allocation across map sizes per round")
    fig.tight_layout(rect=(0, 0, 1 - 0.9 / (2.2 + 2.4 * len(data)), 1))
    return _save(fig, path, tight=False)


def arm_curves(arms: Mapping[str, Sequence[RunRecord]]) -> dict[str, list[dict[str, Any]]]:
    """Per arm, each point of its learning curve (the starting model's validation, then each round's):
    valid and optimal % as the mean over the arm's runs that reached it, with its 95 % bootstrap interval
    over those runs (:func:`envengineer.loop.intervals.bootstrap_mean`).

    Returns ``{arm: [{"point": "start" | "round R", "valid": {n, mean, low, high}, "optimal": ...}]}``.
    """
    from envengineer.loop.intervals import METRICS, bootstrap_mean

    out: dict[str, list[dict[str, Any]]] = {}
    for name, runs in arms.items():
        points: dict[str, dict[str, list[float]]] = {}
        for run in runs:
            curve = [("start", run.start_validation)] + [
                (f"round {r.index}", r.validation) for r in run.rounds
            ]
            for label, scores in curve:
                if scores:
                    cell = points.setdefault(label, {m: [] for m in METRICS})
                    for m in METRICS:
                        cell[m].append(float(scores["summary"][m]))
        order = sorted(points, key=_position)
        out[name] = [{"point": p, **{m: bootstrap_mean(points[p][m]) for m in METRICS}} for p in order]
    return out


def _position(point: str) -> int:
    """Where a curve's point lies: ``"start"`` at -1, ``"round R"`` at R."""
    return -1 if point == "start" else int(point.split()[1])


def curves_markdown(curves: Mapping[str, list[dict[str, Any]]]) -> str:
    """The arms' learning curves as a table: valid % (optimal %), mean [95 % interval] over seeds."""
    labels = sorted({c["point"] for cs in curves.values() for c in cs}, key=_position)
    lines = [
        "## Learning curves over seeds",
        "",
        "Validation valid % (optimal %) per point, mean over the arm's runs [95 % bootstrap interval]:",
        "",
        "| arm | n | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for name, cs in curves.items():
        by = {c["point"]: c for c in cs}
        n = max((c["valid"]["n"] for c in cs), default=0)
        cells = [_point_text(by[p]) if p in by else "" for p in labels]
        lines.append(f"| `{name}` | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _point_text(c: Mapping[str, Any]) -> str:
    v, o = c["valid"], c["optimal"]
    text = f"{v['mean']:.2f} ({o['mean']:.2f})"
    return text + (f" [{v['low']:.2f}, {v['high']:.2f}]" if v["low"] is not None else "")


def curves_figure(curves: Mapping[str, list[dict[str, Any]]], path: Path) -> Path | None:
    """Each arm's learning curve, valid and optimal %, mean over seeds with its 95 % interval shaded."""
    if not any(curves.values()):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0), sharex=True)
    cmap = plt.get_cmap("tab10")
    for i, (name, cs) in enumerate(curves.items()):
        xs = [_position(c["point"]) for c in cs]
        for ax, metric in zip(axes, ("valid", "optimal"), strict=True):
            means = [c[metric]["mean"] for c in cs]
            n = max(c[metric]["n"] for c in cs)
            ax.plot(xs, means, marker="o", color=cmap(i % 10), label=f"{name} (n={n})")
            if all(c[metric]["low"] is not None for c in cs):
                lows = [c[metric]["low"] for c in cs]
                highs = [c[metric]["high"] for c in cs]
                ax.fill_between(xs, lows, highs, color=cmap(i % 10), alpha=0.15)
    ticks = sorted({_position(c["point"]) for cs in curves.values() for c in cs})
    for ax, metric in zip(axes, ("valid", "optimal"), strict=True):
        ax.set_xticks(ticks, ["start" if t < 0 else f"round {t}" for t in ticks])
        ax.set_ylabel(f"validation {metric} (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("learning curves per arm: mean over seeds, 95 % bootstrap interval shaded")
    return _save(fig, path)
