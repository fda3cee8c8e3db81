"""Reports of a run: a Markdown page with PNG figures, read from the run directory alone.

``write_report(RUN)`` writes ``RUN/report.md`` and ``RUN/figures/``:

* ``benchmark.png`` — valid and optimal % per map size for each agent count (the paper's table as bars);
* ``allocation.png`` — data allocation across map sizes per round, stacked (the paper's Figure 7 view);
* ``knobs.png`` — hole ratio and wait ratio per map size, one line per round;
* ``failures.png`` — validation outcome per map size for each round (optimal, suboptimal, each failure);
* ``learning.png`` — validation valid / optimal % per round, and the training reward where it was logged.

A run still in progress renders what it has. Figures use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.integrity import verified_scores
from envengineer.loop.rundir import ROUND_STAGES, RunDir, atomic_write_text, read_json
from envengineer.mapf.config import read_yaml
from envengineer.mapf.scoring import subset_table_md

log = logging.getLogger(__name__)

#: Outcome categories in the order figures stack them (validator order, then the valid ones).
OUTCOMES: tuple[str, ...] = (
    "optimal", "suboptimal", "goal_not_reached", "swap_conflict", "vertex_conflict", "hole", "out_of_bounds",
    "invalid_action", "agent_mismatch", "parse_error",
)  # fmt: skip


@dataclass
class RoundRecord:
    """What the run directory holds about one round (missing pieces are ``None``)."""

    index: int
    config: dict[str, Any] | None = None
    projection: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    rationale: str | None = None
    stages: tuple[str, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class RunRecord:
    """A run read back from its directory."""

    root: Path
    experiment: dict[str, Any]
    rounds: list[RoundRecord] = field(default_factory=list)
    benchmark: dict[str, Any] | None = None
    start_validation: dict[str, Any] | None = None  # the starting model's validation (``validation.start``)
    seconds: dict[str, float] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # scores left out: changed, missing or malformed

    @property
    def name(self) -> str:
        return str(self.experiment.get("name", self.root.name))

    @property
    def finished(self) -> bool:
        return self.benchmark is not None


def load_run(run_dir: str | Path) -> RunRecord:
    """Read a run directory (finished or not) into a :class:`RunRecord`.

    Raises:
        ConfigError: the folder holds no run.
    """
    rd = RunDir(run_dir)
    if not rd.experiment_path.exists():
        raise ConfigError(
            f"{rd.root} is not a run directory ({rd.experiment_path.name} missing); "
            "pass the --out folder of `envengineer run`"
        )
    experiment = read_yaml(rd.experiment_path, "resolved experiment") or {}
    if not isinstance(experiment, dict):
        raise ConfigError(f"{rd.experiment_path}: not an experiment (a YAML {type(experiment).__name__})")
    done = rd.done()
    run = RunRecord(root=rd.root, experiment=experiment)

    def scores(key: tuple[int | None, str], path: Path) -> dict[str, Any] | None:
        data, problem = verified_scores(rd, done[key], path)
        if problem:
            log.warning("%s: %s; left out", rd.root, problem)
            run.damaged.append(problem)
        return data

    for r in rd.rounds_present():
        d = rd.round_dir(r)
        stages = tuple(s for s in ROUND_STAGES if (r, s) in done)
        rec = RoundRecord(index=r, stages=stages, seconds={s: done[(r, s)].seconds for s in stages})
        if "config" in stages:
            rec.config = read_yaml(d / "config.applied.yaml", "applied configuration")
            rec.projection = _maybe_json(d / "projection.json")
            rationale = d / "engineer" / "rationale.txt"
            rec.rationale = rationale.read_text(encoding="utf-8") if rationale.exists() else None
        if "data" in stages:
            rec.data = _maybe_json(d / "dataset" / "summary.json")
        if "train" in stages:
            rec.train = _maybe_json(d / "train" / "metrics.json")
        if "validation" in stages:
            rec.validation = scores((r, "validation"), d / "validation" / "scores.json")
        if stages:
            run.rounds.append(rec)
    if (None, "benchmark") in done:
        run.benchmark = scores((None, "benchmark"), rd.benchmark_dir / "scores.json")
    if (None, "start_validation") in done:
        run.start_validation = scores(
            (None, "start_validation"), rd.root / "start" / "validation" / "scores.json"
        )
    run.seconds = {
        "warm_start": done[(None, "warm_start")].seconds if (None, "warm_start") in done else 0.0,
        "rounds": sum(e.seconds for (r, _), e in done.items() if r is not None),
        "benchmark": done[(None, "benchmark")].seconds if (None, "benchmark") in done else 0.0,
    }
    return run


def _maybe_json(path: Path) -> Any:
    return read_json(path) if path.exists() else None


def benchmark_table_md(scores: dict[str, Any], *, title: str = "", model: str | None = None) -> str:
    """The paper-style table (valid / optimal % per size, then Sum per agent count) from ScoreReport JSON."""
    table = scores.get("table", {})
    sizes = sorted({int(n) for t in table.values() for n in t["sizes"]})
    lines = []
    if title:
        lines += [f"### {title}", ""]
    lines += [
        "| agents | " + " | ".join(f"{n}x{n}" for n in sizes) + " | Sum |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for agents, t in sorted(table.items(), key=lambda kv: int(kv[0])):
        cells = []
        for n in sizes:
            c = t["sizes"].get(str(n))
            cells.append(f"{c['valid']:.1f} / {c['optimal']:.1f}" if c else "")
        lines.append(
            f"| {agents} | " + " | ".join(cells) + f" | {t['sum']['valid']:.2f} / {t['sum']['optimal']:.2f} |"
        )
    s = scores.get("summary", {})
    parsed = parsed_share(scores)
    tokens = s.get("mean_tokens")
    lines += [
        "",
        f"valid % / optimal %; {s.get('n', 0)} instances"
        + (f"; parsed {parsed:.2f} %" if parsed is not None else "")
        + (f"; {tokens:.1f} tokens per answer" if isinstance(tokens, (int, float)) else "")
        + (f"; model: {model}" if model else ""),
    ]
    pooled = subset_table_md(subset_scores(scores))
    if pooled:
        lines += ["", pooled]
    return "\n".join(lines)


_SUBSET_IN_ID = re.compile(r"_wr(\d{3})_")


def subset_scores(scores: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pooled valid / optimal % per wait subset (Table 5 shape) from ScoreReport JSON.

    Uses the ``subsets`` entry where the scores have one; older score files are pooled from their verdicts
    (the ``subset`` field, or the ``wrXXX`` part of a benchmark id). Empty when no verdict names a subset.

    >>> subset_scores({"verdicts": [{"id": "3agents_3x3_wr025_000001", "valid": True, "optimal": False}]})
    {'wr_025': {'n': 1, 'valid': 100.0, 'optimal': 0.0}}
    """
    if scores.get("subsets"):
        return dict(scores["subsets"])
    groups: dict[str, list[dict[str, Any]]] = {}
    for v in scores.get("verdicts") or []:
        name = v.get("subset")
        if not name:
            m = _SUBSET_IN_ID.search(str(v.get("id", "")))
            name = f"wr_{m.group(1)}" if m else None
        if name:
            groups.setdefault(str(name), []).append(v)
    return {
        name: {
            "n": len(vs),
            "valid": round(100.0 * sum(bool(v.get("valid")) for v in vs) / len(vs), 2),
            "optimal": round(100.0 * sum(bool(v.get("optimal")) for v in vs) / len(vs), 2),
        }
        for name, vs in sorted(groups.items())
    }


# -- numbers the figures and tables share ------------------------------------------------------------------
def allocation(run: RunRecord) -> tuple[list[int], list[int], dict[int, list[float]]]:
    """``(rounds, sizes, share[size][i])``: each round's normalised data ratio per size (percent)."""
    rounds = [r for r in run.rounds if r.config]
    sizes = sorted({int(n) for r in rounds for n in r.config["sizes"]})
    share: dict[int, list[float]] = {n: [] for n in sizes}
    for r in rounds:
        cfg = {int(k): v for k, v in r.config["sizes"].items()}
        total = sum(v["data_ratio"] for v in cfg.values()) or 1.0
        for n in sizes:
            share[n].append(100.0 * cfg.get(n, {}).get("data_ratio", 0.0) / total)
    return [r.index for r in rounds], sizes, share


def outcome_counts(scores: dict[str, Any]) -> dict[int, dict[str, int]]:
    """Per map size (all agent counts pooled): how many answers were optimal, suboptimal or each failure."""
    out: dict[int, dict[str, int]] = {}
    for agents, t in scores.get("table", {}).items():
        for n, cell in t["sizes"].items():
            size = int(n)
            fails = scores.get("failures", {}).get(agents, {}).get(n, {})
            row = out.setdefault(size, dict.fromkeys(OUTCOMES, 0))
            failed = sum(fails.values())
            for cat, c in fails.items():
                row[cat] = row.get(cat, 0) + int(c)
            row["optimal"] += max(int(cell["n"]) - failed, 0)
    return dict(sorted(out.items()))


def parsed_share(scores: dict[str, Any]) -> float | None:
    """Percent of answers in which a plan could be read (not a ``parse_error``); None without verdicts.

    Small models fail on the format first; this line moves before the valid rate does.
    """
    verdicts = scores.get("verdicts")
    if not verdicts:
        parsed = scores.get("summary", {}).get("parsed")
        return float(parsed) if isinstance(parsed, (int, float)) else None
    return 100.0 * sum(v.get("failure") != "parse_error" for v in verdicts) / len(verdicts)


def train_rewards(run: RunRecord) -> list[tuple[float, float, int]]:
    """``(x, reward, round)`` points from the training logs, x in rounds (round + fraction of its steps)."""
    points = []
    for r in run.rounds:
        metrics = (r.train or {}).get("metrics") or {}
        history = metrics.get("log_history") or metrics.get("history") or []
        rows = [h for h in history if isinstance(h, dict) and _reward_of(h) is not None]
        if rows:
            for j, h in enumerate(rows):
                points.append((r.index + (j + 1) / len(rows), float(_reward_of(h)), r.index))
        elif _reward_of(metrics) is not None:
            points.append((r.index + 1.0, float(_reward_of(metrics)), r.index))
    return points


def _reward_of(d: dict[str, Any]) -> float | None:
    for key in ("reward", "train_reward", "mean_reward", "rewards/mean"):
        v = d.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


# -- figures ----------------------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

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


# -- the Markdown page ------------------------------------------------------------------------------------
def render_markdown(run: RunRecord, figures: dict[str, Path | None]) -> str:
    exp = run.experiment
    eng = exp.get("engineer", {})
    lines = [f"# Run `{run.name}`", ""]
    if exp.get("description"):
        lines += [str(exp["description"]).strip(), ""]
    model = exp.get("policy") or exp.get("model") or "embedded default (SmolLM2-135M-Instruct)"
    ctx = eng.get("context", {})
    lines += [
        "| setting | value |",
        "|---|---|",
        f"| model | `{model}` |",
        f"| rounds × samples × epochs | {exp.get('rounds')} × {exp.get('samples_per_round')} × "
        f"{exp.get('epochs_per_round'):g} |",
        f"| engineer | `{eng.get('kind')}`" + (f" (`{eng.get('model')}`)" if eng.get("model") else "") + " |",
        f"| context | {_context_text(ctx) if _is_llm(eng) else 'none (not a language model)'} |",
        f"| training preset | `{exp.get('training', {}).get('preset')}` |",
        f"| status | {'finished' if run.finished else 'in progress (or stopped): ' + _progress_text(run)} |",
        f"| time in finished stages | {_duration(sum(run.seconds.values()))} ("
        + ", ".join(f"{k.replace('_', '-')} {_duration(v)}" for k, v in run.seconds.items() if v)
        + ") |",
        "",
    ]
    if run.benchmark:
        lines += ["## Benchmark", "", benchmark_table_md(run.benchmark), ""]
        lines += _figure(figures, "benchmark", "valid and optimal per size")
    lines += ["## Rounds", ""]
    if run.rounds:
        lines += [
            "| round | configuration from | projection changes | fell back | GRPO steps | "
            "seconds: engineer / data / train / validation | validation parsed % | valid % | optimal % | "
            "tokens / answer |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        if run.start_validation:
            start = run.start_validation.get("summary", {})
            lines.append(
                f"| start (model before round 0) | | | | | | {_num(parsed_share(run.start_validation))} | "
                f"{_num(start.get('valid'))} | {_num(start.get('optimal'))} | "
                f"{_num(start.get('mean_tokens'), 1)} |"
            )
        for r in run.rounds:
            proj = r.projection or {}
            train = r.train or {}
            val = (r.validation or {}).get("summary", {})
            lines.append(
                f"| {r.index} | {proj.get('source', '')} | {len(proj.get('changes', []) or [])} | "
                f"{'yes' if proj.get('fell_back') else 'no'} | "
                f"{train.get('steps', '') if not train.get('skipped') else 'skipped'} | "
                f"{' / '.join(f'{r.seconds[k]:.0f}' if k in r.seconds else '-' for k in ROUND_STAGES)} | "
                f"{_num(parsed_share(r.validation or {}))} | {_num(val.get('valid'))} | "
                f"{_num(val.get('optimal'))} | {_num(val.get('mean_tokens'), 1)} |"
            )
        lines.append("")
    else:
        lines += ["No round has finished yet.", ""]
    lines += _figure(figures, "learning", "learning curves")
    lines += ["## Training distribution per round", ""]
    lines += _figure(figures, "allocation", "data allocation across map sizes per round")
    lines += _figure(figures, "knobs", "hole and wait ratios per round")
    cfg_rounds = [r for r in run.rounds if r.config]
    if cfg_rounds:
        sizes = sorted({int(n) for r in cfg_rounds for n in r.config["sizes"]})
        lines += [
            "data / hole / wait ratio per size:",
            "",
            "| round | " + " | ".join(f"{n}x{n}" for n in sizes) + " |",
            "|---|" + "---|" * len(sizes),
        ]
        for r in cfg_rounds:
            cfg = {int(k): v for k, v in r.config["sizes"].items()}
            total = sum(v["data_ratio"] for v in cfg.values()) or 1.0
            cells = [
                f"{cfg[n]['data_ratio'] / total:.2f} / {cfg[n]['hole_ratio']:.2f} / "
                f"{cfg[n]['wait_ratio']:.2f}"
                if n in cfg
                else ""
                for n in sizes
            ]
            lines.append(f"| {r.index} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Validation failures", ""]
    lines += _figure(figures, "failures", "validation outcomes per round and size")
    val_rounds = [r for r in run.rounds if r.validation]
    if val_rounds:
        lines += ["| round | " + " | ".join(OUTCOMES) + " |", "|---|" + "---|" * len(OUTCOMES)]
        for r in val_rounds:
            tot = dict.fromkeys(OUTCOMES, 0)
            for row in outcome_counts(r.validation).values():
                for k, v in row.items():
                    tot[k] = tot.get(k, 0) + v
            lines.append(f"| {r.index} | " + " | ".join(str(tot[c]) for c in OUTCOMES) + " |")
        lines.append("")
    eng_rounds = [r for r in run.rounds if r.projection and r.index > 0]
    if eng_rounds:
        lines += ["## The engineer's decisions", ""]
        for r in eng_rounds:
            proj = r.projection or {}
            lines.append(
                f"**Round {r.index}** ({proj.get('source', '')}"
                + (", fell back to the previous configuration" if proj.get("fell_back") else "")
                + ")"
            )
            lines.append("")
            if r.rationale:
                lines += ["> " + line for line in _clip(r.rationale, 1200).splitlines()] + [""]
            for err in (proj.get("errors") or [])[:5]:
                lines.append(f"- rejected attempt: {_clip(str(err), 200)}")
            for change in (proj.get("changes") or [])[:10]:
                lines.append(f"- projection: {change}")
            more = len(proj.get("changes") or []) - 10
            if more > 0:
                lines.append(
                    f"- … and {more} more projection changes (see `round_{r.index:02d}/projection.json`)"
                )
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_report(run_dir: str | Path, *, out: str | Path | None = None) -> Path:
    """Write ``report.md`` and ``figures/*.png`` for a run; returns the Markdown path."""
    run = load_run(run_dir)
    out_dir = Path(out) if out is not None else run.root
    fig_dir = out_dir / "figures"
    figures = {
        "benchmark": fig_benchmark(run, fig_dir / "benchmark.png"),
        "learning": fig_learning(run, fig_dir / "learning.png"),
        "allocation": fig_allocation(run, fig_dir / "allocation.png"),
        "knobs": fig_knobs(run, fig_dir / "knobs.png"),
        "failures": fig_failures(run, fig_dir / "failures.png"),
    }
    rel = {k: (v.relative_to(out_dir) if v is not None else None) for k, v in figures.items()}
    text = render_markdown(run, rel)
    if run.damaged:  # said at the top: these scores are not in the tables below
        title, _, rest = text.partition("\n")
        note = "\n".join(f"> - {d}" for d in run.damaged)
        text = f"{title}\n\n> **Damaged scores, left out of this report:**\n{note}\n{rest}"
    path = atomic_write_text(out_dir / "report.md", text)
    log.info("report written to %s", path)
    return path


def _figure(figures: dict[str, Path | None], key: str, alt: str) -> list[str]:
    p = figures.get(key)
    return [f"![{alt}]({p.as_posix()})", ""] if p is not None else []


def _is_llm(eng: dict[str, Any]) -> bool:
    """Whether the run's engineer reads a context (the LLM kinds); the default kind is ``self``."""
    return eng.get("kind", "self") in ("self", "base", "openai")


def _context_text(ctx: Any) -> str:
    from envengineer.loop.experiment import ContextSettings

    try:
        sw = ContextSettings.model_validate(ctx if ctx else {}).switches()
    except Exception:  # a report must render even from an older experiment file
        return str(ctx)
    mods = [m for m in ("F", "G", "H", "S") if sw[m]]
    text = "+".join(mods) or "none"
    if sw["H"]:
        text += " (history with round-0 default)" if sw["H_default"] else " (history without round-0 default)"
    if sw["T"] != "none":
        text += f", T={sw['T']}"
    variant = ctx.get("variant", "V6") if isinstance(ctx, dict) else ctx
    return f"{variant}: {text}"


def _progress_text(run: RunRecord) -> str:
    rounds = run.experiment.get("rounds", 0)
    complete = sum(1 for r in run.rounds if len(r.stages) == len(ROUND_STAGES))
    return f"{complete} of {rounds} rounds complete"


def _duration(seconds: float) -> str:
    """``75`` -> ``'1 min 15 s'``.

    >>> _duration(75.2), _duration(3.4)
    ('1 min 15 s', '3.4 s')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s"


def _num(v: Any, digits: int = 2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def _clip(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"
