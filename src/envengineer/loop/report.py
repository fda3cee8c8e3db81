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
from pathlib import Path
from typing import Any

from envengineer.loop.report_data import (
    OUTCOMES,
    RoundRecord,
    RunRecord,
    allocation,
    benchmark_table_md,
    load_run,
    outcome_counts,
    paired_gain,
    parsed_share,
    subset_scores,
    train_rewards,
)
from envengineer.loop.report_figures import (
    _plt,
    _save,
    fig_allocation,
    fig_benchmark,
    fig_failures,
    fig_knobs,
    fig_learning,
)
from envengineer.loop.rundir import ROUND_STAGES, atomic_write_text

#: Names kept importable from here: the records and numbers (report_data), the figures (report_figures).
__all__ = [
    "OUTCOMES",
    "RoundRecord",
    "RunRecord",
    "_plt",
    "_save",
    "allocation",
    "benchmark_table_md",
    "fig_allocation",
    "fig_benchmark",
    "fig_failures",
    "fig_knobs",
    "fig_learning",
    "load_run",
    "outcome_counts",
    "parsed_share",
    "render_markdown",
    "subset_scores",
    "train_rewards",
    "write_report",
]

log = logging.getLogger(__name__)


# -- the Markdown page ------------------------------------------------------------------------------------
def render_markdown(run: RunRecord, figures: dict[str, Path | None]) -> str:
    """The report page: settings, benchmark, rounds, training distribution, failures, engineer's decisions."""
    lines = _settings_md(run)
    if run.benchmark:
        lines += ["## Benchmark", "", benchmark_table_md(run.benchmark), ""]
        lines += _figure(figures, "benchmark", "valid and optimal per size")
    lines += _rounds_md(run)
    lines += _gain_md(run)
    lines += _figure(figures, "learning", "learning curves")
    lines += _diagnostics_md(run)
    lines += ["## Training distribution per round", ""]
    lines += _figure(figures, "allocation", "data allocation across map sizes per round")
    lines += _figure(figures, "knobs", "hole and wait ratios per round")
    lines += _ratios_md(run)
    lines += ["## Validation failures", ""]
    lines += _figure(figures, "failures", "validation outcomes per round and size")
    lines += _failures_md(run)
    lines += _decisions_md(run)
    return "\n".join(lines).rstrip() + "\n"


def _settings_md(run: RunRecord) -> list[str]:
    """The title, the description and the table of the run's settings and status."""
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
        f"| training | {_training_text(exp.get('training', {}))} |",
        f"| status | {'finished' if run.finished else 'in progress (or stopped): ' + _progress_text(run)} |",
        f"| time in finished stages | {_duration(sum(run.seconds.values()))} ("
        + ", ".join(f"{k.replace('_', '-')} {_duration(v)}" for k, v in run.seconds.items() if v)
        + ") |",
        "",
    ]
    return lines


def _training_text(training: dict[str, Any]) -> str:
    """The learner and its preset (the teach learner reads no preset)."""
    learner = training.get("learner", "grpo")
    if learner == "teach":
        return "learner `teach` (settings `training.teach`)"
    return f"learner `{learner}`, preset `{training.get('preset')}`"


def _rounds_md(run: RunRecord) -> list[str]:
    """One row per round: where its configuration came from, its steps, stage times, validation."""
    lines = ["## Rounds", ""]
    if run.rounds:
        lines += [
            "| round | configuration from | projection changes | fell back | training steps | "
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
    return lines


def _ratios_md(run: RunRecord) -> list[str]:
    """Each round's data / hole / wait ratio per size (data ratios normalised)."""
    lines: list[str] = []
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
    return lines


def _failures_md(run: RunRecord) -> list[str]:
    """Each round's validation outcomes, all sizes pooled."""
    lines: list[str] = []
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
    return lines


def _decisions_md(run: RunRecord) -> list[str]:
    """The engineer's rationale, rejected attempts and projection changes per round."""
    lines: list[str] = []
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
    return lines


def _gain_md(run: RunRecord) -> list[str]:
    """The last validation against the starting model's, paired board by board, with a 95 % interval."""
    done = [r for r in run.rounds if r.validation]
    if not run.start_validation or not done:
        return []
    gain = paired_gain(run.start_validation, done[-1].validation or {})
    if gain is None:
        return []
    parts = [
        f"{k} {gain[k]['mean']:+.2f} points"
        + (
            f" (95 % bootstrap interval {gain[k]['low']:+.2f} to {gain[k]['high']:+.2f})"
            if gain[k]["low"] is not None
            else " (one board: no interval)"
        )
        for k in ("valid", "optimal")
    ]
    return [
        f"Round {done[-1].index}'s validation against the starting model's, on the same {gain['n']} boards: "
        + "; ".join(parts)
        + ". This is one seed; docs/loop.md has the spread between seeds.",
        "",
    ]


def _diagnostics_md(run: RunRecord) -> list[str]:
    """Per round, what GRPO sampled and how the policy moved (envengineer.training.diagnostics)."""
    rows = [
        row for r in run.rounds if (row := _diagnostics_row(r.index, (r.train or {}).get("metrics") or {}))
    ]
    if not rows:
        return []
    return [
        "## Training diagnostics",
        "",
        "| round | sampled valid % (per size) | groups without reward variance % | entropy first → last | "
        "probe greedy valid % over the round | KL from the round's start at its end |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _diagnostics_row(index: int, metrics: dict[str, Any]) -> str | None:
    sampled = metrics.get("sampled") or {}
    if not isinstance(sampled, dict) or not sampled:
        return None
    stats = [(int(k), v) for k, v in sampled.items() if str(k).isdigit() and isinstance(v, dict)]
    n = sum(float(v.get("completions") or 0) for _, v in stats) or 1.0
    valid = sum(float(v.get("valid") or 0) * float(v.get("completions") or 0) for _, v in stats) / n
    groups = sum(float(v.get("groups") or 0) for _, v in stats)
    zero = sum(float(v.get("zero_std") or 0) * float(v.get("groups") or 0) for _, v in stats)
    per_size = ", ".join(f"{k}: {100 * float(v.get('valid') or 0):.0f}" for k, v in sorted(stats))
    entropy = [
        e["entropy"] for e in metrics.get("log_history") or [] if isinstance(e.get("entropy"), (int, float))
    ]
    probe = [p for p in (metrics.get("probe") or {}).get("rows") or [] if isinstance(p, dict)]
    kl = probe[-1].get("kl") if probe else None
    return (
        f"| {index} | {100 * valid:.1f} ({per_size}) | {_num(100 * zero / groups if groups else None, 1)} | "
        + (f"{entropy[0]:.3f} → {entropy[-1]:.3f}" if entropy else "-")
        + " | "
        + (" → ".join(f"{100 * float(p.get('valid') or 0):.0f}" for p in probe) or "-")
        + f" | {_num(kl, 4) if kl is not None else '-'} |"
    )


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
    from envengineer.loop.context_settings import ContextSettings

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
