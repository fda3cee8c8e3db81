"""The report's PNG figures, drawn with matplotlib's Agg backend (no display needed).

Each ``fig_*`` function draws one figure of a :class:`~envengineer.loop.report_data.RunRecord` to a path
and returns it, or None when the run has nothing to draw yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envengineer.loop.report_data import (
    OUTCOMES,
    RoundRecord,
    RunRecord,
    allocation,
    outcome_counts,
    parsed_share,
    train_rewards,
)

#: What to install for the figures of ``report``, ``compare`` and ``run``'s report.
FIGURES_EXTRA_HINT = "pip install 'envengineer[train]'"


def _plt() -> Any:
    """matplotlib's pyplot on the Agg backend.

    Raises:
        MissingDependency: matplotlib is not installed (the testbed-only install); names the extra.
    """
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        from envengineer.integrations import MissingDependency

        raise MissingDependency(
            f"the figures of report and compare need matplotlib; install it with {FIGURES_EXTRA_HINT}",
            name="matplotlib",
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_colors(sizes: list[int]) -> dict[int, Any]:
    plt = _plt()
    cmap = plt.get_cmap("viridis")
    return {n: cmap(i / max(len(sizes) - 1, 1)) for i, n in enumerate(sizes)}


def fig_allocation(run: RunRecord, path: Path) -> Path | None:
    rounds, sizes, share = allocation(run)
    if not rounds:
        return None
    plt = _plt()
    colors = _size_colors(sizes)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rounds) + 2.5), 4.0))
    bottom = [0.0] * len(rounds)
    xs = list(range(len(rounds)))
    for n in sizes:
        ax.bar(
            xs, share[n], bottom=bottom, color=colors[n], label=f"{n}x{n}", edgecolor="white", linewidth=0.5
        )
        bottom = [b + s for b, s in zip(bottom, share[n], strict=True)]
    ax.set_xticks(xs, [f"round {r}" for r in rounds])
    ax.set_ylabel("share of the round's samples (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{run.name}: data allocation across map sizes")
    ax.legend(title="size", bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=8)
    return _save(fig, path)


def fig_knobs(run: RunRecord, path: Path) -> Path | None:
    rounds = [r for r in run.rounds if r.config]
    if not rounds:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6), sharex=True)
    cmap = plt.get_cmap("plasma")
    for i, r in enumerate(rounds):
        cfg = sorted(((int(k), v) for k, v in r.config["sizes"].items()))
        xs = [n for n, _ in cfg]
        color = cmap(i / max(len(rounds) - 1, 1) * 0.85)
        for ax, key in zip(axes, ("hole_ratio", "wait_ratio"), strict=True):
            ax.plot(xs, [v[key] for _, v in cfg], marker="o", color=color, label=f"round {r.index}")
    for ax, key, top in zip(axes, ("hole ratio", "wait ratio"), (0.5, 1.0), strict=True):
        ax.set_xlabel("map size n")
        ax.set_ylabel(key)
        ax.set_ylim(0, top * 1.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{run.name}: hole and wait ratios per round")
    return _save(fig, path)


def fig_failures(run: RunRecord, path: Path) -> Path | None:
    rounds = [r for r in run.rounds if r.validation]
    if not rounds:
        return None
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    colors = {c: cmap(i % 10) for i, c in enumerate(OUTCOMES)}
    width = 3.2 * len(rounds) + 2.0
    fig, axes = plt.subplots(1, len(rounds), figsize=(width, 3.8), sharey=True, squeeze=False)
    for ax, r in zip(axes[0], rounds, strict=True):
        counts = outcome_counts(r.validation)
        sizes = list(counts)
        totals = [sum(counts[n].values()) or 1 for n in sizes]
        bottom = [0.0] * len(sizes)
        for cat in OUTCOMES:
            vals = [100.0 * counts[n].get(cat, 0) / t for n, t in zip(sizes, totals, strict=True)]
            if any(vals):
                ax.bar(range(len(sizes)), vals, bottom=bottom, color=colors[cat], label=cat)
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xticks(range(len(sizes)), [str(n) for n in sizes])
        ax.set_title(f"round {r.index}")
        ax.set_xlabel("map size n")
    axes[0][0].set_ylabel("validation answers (%)")
    handles = {lab: h for a in axes[0] for h, lab in zip(*a.get_legend_handles_labels(), strict=True)}
    fig.legend(handles.values(), handles.keys(), loc="center right", fontsize=8)
    fig.suptitle(f"{run.name}: validation outcomes per round and size")
    fig.subplots_adjust(left=0.6 / width * 1.4, right=1 - 1.9 / width, top=0.83, bottom=0.14, wspace=0.08)
    return _save(fig, path, tight=False)


def fig_learning(run: RunRecord, path: Path) -> Path | None:
    rounds = [r for r in run.rounds if r.validation]
    if run.start_validation:  # the starting model, drawn at round -1
        rounds = [RoundRecord(index=-1, validation=run.start_validation), *rounds]
    rewards = train_rewards(run)
    if not rounds and not rewards:
        return None
    plt = _plt()
    ncols = 2 if rewards else 1
    fig, axes = plt.subplots(1, ncols, figsize=(4.6 * ncols, 3.6), squeeze=False)
    ax = axes[0][0]
    xs = [r.index for r in rounds]
    for key, marker in (("valid", "o"), ("optimal", "s")):
        ax.plot(xs, [r.validation["summary"][key] for r in rounds], marker=marker, label=f"{key} %")
    parsed = [parsed_share(r.validation) for r in rounds]
    if all(p is not None for p in parsed):
        ax.plot(xs, parsed, marker="^", linestyle="--", color="C2", label="parsed % (any plan read)")
    if run.benchmark:
        x = (xs[-1] + 0.5) if xs else 0
        ax.scatter(
            [x], [run.benchmark["summary"]["valid"]], marker="*", s=120, color="C0", label="benchmark valid"
        )
        ax.scatter(
            [x],
            [run.benchmark["summary"]["optimal"]],
            marker="*",
            s=120,
            color="C1",
            label="benchmark optimal",
        )
    values = [r.validation["summary"][k] for r in rounds for k in ("valid", "optimal")]
    values += [p for p in parsed if p is not None]
    if run.benchmark:
        values += [run.benchmark["summary"]["valid"], run.benchmark["summary"]["optimal"]]
    ax.set_ylim(0, min(100.0, max(10.0, 1.2 * max(values, default=0.0))))
    ax.set_xlabel("round (-1: the starting model)" if run.start_validation else "round")
    ax.set_ylabel("validation (%)")
    ax.set_xticks(xs or [0])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if rewards:
        ax2 = axes[0][1]
        ax2.plot([p[0] for p in rewards], [p[1] for p in rewards], marker=".", linewidth=1)
        ax2.set_xlabel("round (fraction of its steps)")
        ax2.set_ylabel("training reward")
        ax2.grid(alpha=0.3)
    fig.suptitle(f"{run.name}: learning curves")
    return _save(fig, path)


def fig_benchmark(run: RunRecord, path: Path) -> Path | None:
    if not run.benchmark:
        return None
    table = run.benchmark["table"]
    plt = _plt()
    fig, axes = plt.subplots(1, len(table), figsize=(3.8 * len(table), 3.4), squeeze=False, sharey=True)
    for ax, (agents, t) in zip(axes[0], sorted(table.items(), key=lambda kv: int(kv[0])), strict=True):
        sizes = sorted(t["sizes"], key=int)
        x = range(len(sizes))
        ax.bar([i - 0.2 for i in x], [t["sizes"][n]["valid"] for n in sizes], width=0.4, label="valid")
        ax.bar([i + 0.2 for i in x], [t["sizes"][n]["optimal"] for n in sizes], width=0.4, label="optimal")
        ax.set_xticks(list(x), [f"{n}" for n in sizes])
        ax.set_title(f"{agents} agents (Sum {t['sum']['valid']:.1f} / {t['sum']['optimal']:.1f})")
        ax.set_xlabel("map size n")
    axes[0][0].set_ylabel("benchmark (%)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{run.name}: benchmark")
    return _save(fig, path)


def _save(fig: Any, path: Path, *, tight: bool = True) -> Path:
    plt = _plt()
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
