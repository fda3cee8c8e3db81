"""The figures of ``envengineer compare``: the arms' benchmark sums and validation curves, and each run's
data allocation across map sizes per round (the paper's Fig. 7)."""

from __future__ import annotations

from collections.abc import Sequence
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
