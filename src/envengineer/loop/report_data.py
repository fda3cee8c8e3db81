"""What a run's report reads and counts: the run directory as records, the numbers the tables and figures
share, and the benchmark table.

Everything here is a plain function of a :class:`RunRecord` or of ScoreReport JSON; nothing draws.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.integrity import verified_scores
from envengineer.loop.rundir import ROUND_STAGES, RunDir, read_json
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


def paired_gain(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """The change in valid and optimal rates (points) from ``before`` to ``after`` on the boards both
    scored (matched by id), each a seeded 95 % percentile-bootstrap interval over boards
    (:func:`envengineer.loop.intervals.paired_board_gain`); None when they share no board."""
    from envengineer.loop.intervals import paired_board_gain

    def flags(scores: dict[str, Any]) -> dict[str, tuple[float, float]]:
        rows = scores.get("verdicts") or []
        return {
            str(v["id"]): (float(bool(v.get("valid"))), float(bool(v.get("optimal"))))
            for v in rows
            if isinstance(v, dict) and "id" in v
        }

    a, b = flags(before), flags(after)
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    out: dict[str, Any] = {"n": len(ids)}
    for k, name in enumerate(("valid", "optimal")):
        out[name] = paired_board_gain([a[i][k] for i in ids], [b[i][k] for i in ids])
    return out
