"""The comparison's tables: one row per run, the wait subsets, and each arm's spread over its seeds
(:mod:`envengineer.loop.compare`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from envengineer.loop.compare_arms import Arm
from envengineer.loop.report import RunRecord, parsed_share, subset_scores
from envengineer.loop.scored_sets import split_scores as _scores_of


# -- per run -----------------------------------------------------------------------------------------------
def comparison_rows(runs: Sequence[RunRecord]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(agent counts, rows)``; each row: name, engineer, per-agents Sum, mean, last validation, subsets."""
    agents = sorted({a for r in runs if r.benchmark for a in r.benchmark["table"]}, key=int)
    rows = []
    for run in runs:
        bench = run.benchmark or {}
        table = bench.get("table", {})
        sums = {a: table[a]["sum"] for a in agents if a in table}
        val_rounds = [r for r in run.rounds if r.validation]
        last = val_rounds[-1].validation if val_rounds else None
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
                "parsed": parsed_share(bench) if bench else None,
                "tokens": bench.get("summary", {}).get("mean_tokens"),
                "validation_last": last["summary"] if last else None,
                "validation_curve": [
                    (r.index, r.validation["summary"]["valid"], r.validation["summary"]["optimal"])
                    for r in val_rounds
                ],
                "subsets": subset_scores(bench) if bench else {},
                "validation_subsets": subset_scores(last) if last else {},
                "benchmark_n": bench.get("summary", {}).get("n"),
            }
        )
    return agents, rows


def comparison_markdown(agents: list[str], rows: list[dict[str, Any]]) -> str:
    head = [
        "run", "engineer", "rounds", *[f"{a} agents" for a in agents], "mean", "parsed %", "tokens / answer",
        "last validation", "n",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row['name']}`", str(row["engineer"]), str(row["rounds"])]
        for a in agents:
            s = row["sums"].get(a)
            cells.append(f"{s['valid']:.2f} / {s['optimal']:.2f}" if s else "")
        cells.append(f"{row['mean']['valid']:.2f} / {row['mean']['optimal']:.2f}" if row["mean"] else "")
        cells.append(_fmt(row["parsed"]))
        cells.append(_fmt(row["tokens"], 1))
        v = row["validation_last"]
        cells.append(f"{v['valid']:.2f} / {v['optimal']:.2f}" if v else "")
        cells.append(str(row["benchmark_n"] or ("unfinished" if not row["finished"] else "")))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Benchmark Sum (unweighted mean over map sizes), valid % / optimal %, per agent count; `parsed %`: "
        "benchmark answers in which a plan could be read; `n`: benchmark instances scored.",
    ]
    return "\n".join(lines)


def subsets_markdown(rows: list[dict[str, Any]]) -> str:
    """Pooled valid / optimal % per wait subset, benchmark and last validation (the paper's Table 5)."""
    names = sorted({s for r in rows for key in ("subsets", "validation_subsets") for s in r[key]})
    if not names:
        return ""
    head = ["run", *[f"benchmark {s}" for s in names], *[f"validation {s}" for s in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row['name']}`"]
        for key in ("subsets", "validation_subsets"):
            for s in names:
                c = row[key].get(s)
                cells.append(f"{c['valid']:.2f} / {c['optimal']:.2f}" if c else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Pooled over agents and sizes, valid % / optimal % per wait subset."]
    return "\n".join(lines)


# -- arms: several seeds per experiment --------------------------------------------------------------------
def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n - 1; None for one value), min, max and n.

    >>> spread([10.0, 20.0, 30.0])
    {'n': 3, 'mean': 20.0, 'std': 10.0, 'min': 10.0, 'max': 30.0}
    """
    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {
        "n": n,
        "mean": round(mean, 2),
        "std": None if std is None else round(std, 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def arm_statistics(arm: Arm, which: str) -> dict[str, Any]:
    """``{agents: {"sizes": {size: {valid: spread, optimal: spread}}, "sum": {...}}, "n_runs": n}``.

    ``which`` is ``benchmark`` or ``validation`` (each run's last validated round). Runs without those
    scores are left out (``n`` says how many runs a figure comes from).
    """
    scored = [s for s in (_scores_of(r, which) for r in arm.runs) if s]
    agents = sorted({a for s in scored for a in s.get("table", {})}, key=int)
    out: dict[str, Any] = {"n_runs": len(scored), "agents": {}}
    for a in agents:
        tables = [s["table"][a] for s in scored if a in s.get("table", {})]
        sizes = sorted({n for t in tables for n in t["sizes"]}, key=int)
        out["agents"][a] = {
            "sizes": {
                n: {
                    k: spread([t["sizes"][n][k] for t in tables if n in t["sizes"]])
                    for k in ("valid", "optimal")
                }
                for n in sizes
            },
            "sum": {k: spread([t["sum"][k] for t in tables]) for k in ("valid", "optimal")},
        }
    return out


def arms_markdown(arms: Sequence[Arm], *, mixed: bool = False) -> str:
    """Per split and metric: one row per (arm, agents), mean ± std [min–max] per size and for the Sum.

    ``mixed``: an arm holds different experiments (``--mixed-arms``), which the heading says.
    """
    parts: list[str] = []
    for which in ("benchmark", "validation"):
        stats = [(arm, arm_statistics(arm, which)) for arm in arms]
        sizes = sorted({int(n) for _, st in stats for t in st["agents"].values() for n in t["sizes"]})
        if not sizes:
            continue
        for metric in ("valid", "optimal"):
            title = "benchmark" if which == "benchmark" else "last validation"
            parts += [f"### {title}, {metric} %: mean ± std [min–max] over an arm's runs", ""]
            head = ["arm", "runs", "agents", *[f"{n}x{n}" for n in sizes], "Sum"]
            parts += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for arm, st in stats:
                for a, t in st["agents"].items():
                    cells = [f"`{arm.name}`", str(st["n_runs"]), a]
                    for n in sizes:
                        c = t["sizes"].get(str(n))
                        cells.append(_spread_text(c[metric]) if c else "")
                    cells.append(f"**{_spread_text(t['sum'][metric])}**")
                    parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
    if not parts:
        return ""
    lines = [
        "## Arms (some mix different experiments: --mixed-arms, see the warnings)"
        if mixed
        else "## Arms (runs that differ only in their seeds)",
        "",
        "| arm | runs |",
        "|---|---|",
        *[f"| `{a.name}` | " + ", ".join(f"`{r.root}`" for r in a.runs) + " |" for a in arms],
        "",
        "std is the sample standard deviation over the arm's runs (n - 1); with one run it is `–`. Two arms "
        "whose [min–max] ranges overlap are not told apart by these runs.",
        "",
        *parts,
    ]
    return "\n".join(lines).rstrip()


def _spread_text(s: Mapping[str, Any]) -> str:
    if not s or s.get("mean") is None:
        return ""
    std = "–" if s["std"] is None else f"{s['std']:.2f}"
    if s["n"] == 1:
        return f"{s['mean']:.2f}"
    return f"{s['mean']:.2f} ± {std} [{s['min']:.2f}–{s['max']:.2f}]"


def _fmt(v: Any, digits: int = 2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
