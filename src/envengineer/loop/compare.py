"""Several runs side by side: one table (the paper's comparison shape) and one figure.

``compare_runs([RUN_A, RUN_B, ...], out=DIR)`` writes ``DIR/compare.md`` and ``DIR/compare.png``. The
table has one row per run: the benchmark's Sum column (valid / optimal %) per agent count, as in SPEC §4,
then the mean over agent counts and the validation of each run's last round. The figure shows the benchmark
Sums as grouped bars and the validation valid % per round as lines.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.report import RunRecord, _plt, _save, load_run
from envengineer.loop.rundir import atomic_write_text

log = logging.getLogger(__name__)


def comparison_rows(runs: Sequence[RunRecord]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(agent counts, rows)``; each row: name, engineer, per-agents Sum, mean, last validation."""
    agents = sorted({a for r in runs if r.benchmark for a in r.benchmark["table"]}, key=int)
    rows = []
    for run in runs:
        table = (run.benchmark or {}).get("table", {})
        sums = {a: table[a]["sum"] for a in agents if a in table}
        val_rounds = [r for r in run.rounds if r.validation]
        last = val_rounds[-1].validation["summary"] if val_rounds else None
        mean = None
        if sums:
            mean = {k: round(sum(s[k] for s in sums.values()) / len(sums), 2) for k in ("valid", "optimal")}
        rows.append(
            {
                "name": run.name,
                "root": str(run.root),
                "engineer": run.experiment.get("engineer", {}).get("kind"),
                "rounds": run.experiment.get("rounds"),
                "finished": run.finished,
                "sums": sums,
                "mean": mean,
                "validation_last": last,
                "validation_curve": [
                    (r.index, r.validation["summary"]["valid"], r.validation["summary"]["optimal"])
                    for r in val_rounds
                ],
                "benchmark_n": (run.benchmark or {}).get("summary", {}).get("n"),
            }
        )
    return agents, rows


def comparison_markdown(agents: list[str], rows: list[dict[str, Any]]) -> str:
    head = ["run", "engineer", "rounds", *[f"{a} agents" for a in agents], "mean", "last validation", "n"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row['name']}`", str(row["engineer"]), str(row["rounds"])]
        for a in agents:
            s = row["sums"].get(a)
            cells.append(f"{s['valid']:.2f} / {s['optimal']:.2f}" if s else "")
        cells.append(f"{row['mean']['valid']:.2f} / {row['mean']['optimal']:.2f}" if row["mean"] else "")
        v = row["validation_last"]
        cells.append(f"{v['valid']:.2f} / {v['optimal']:.2f}" if v else "")
        cells.append(str(row["benchmark_n"] or ("unfinished" if not row["finished"] else "")))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Benchmark Sum (unweighted mean over map sizes), valid % / optimal %, per agent count; "
        "`n`: benchmark instances scored.",
    ]
    return "\n".join(lines)


def compare_figure(agents: list[str], rows: list[dict[str, Any]], path: Path) -> Path:
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


def compare_runs(run_dirs: Sequence[str | Path], *, out: str | Path) -> Path:
    """Write ``compare.md`` and ``compare.png`` into ``out``; returns the Markdown path."""
    if not run_dirs:
        raise ConfigError("compare needs at least one run directory")
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        log.warning("several runs share a name (%s); the table lists them in the given order", names)
    agents, rows = comparison_rows(runs)
    out = Path(out)
    fig = compare_figure(agents, rows, out / "compare.png")
    text = "# Comparison\n\n" + comparison_markdown(agents, rows) + f"\n\n![comparison]({fig.name})\n"
    return atomic_write_text(out / "compare.md", text)
