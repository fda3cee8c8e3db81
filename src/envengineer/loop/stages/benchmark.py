"""Stage ``benchmark``: the final checkpoint on the benchmark (``benchmark/scores.json`` and ``table.md``)."""

from __future__ import annotations

from typing import Any

from envengineer.loop.records import read_scores, scored_set, write_scores
from envengineer.loop.report_data import benchmark_table_md
from envengineer.loop.rundir import atomic_write_text
from envengineer.loop.seeds import round_seed
from envengineer.loop.state import Loop


def run(loop: Loop, model: str | None, keep: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Answer the benchmark with ``model``; its scores are also put in ``keep["scores"]``."""
    d = loop.rd.benchmark_dir
    report = loop.comps.evaluator(
        model,
        loop.benchmark_set,
        out_dir=d,
        experiment=loop.exp,
        seed=round_seed(loop.exp.seeds.evaluation, "benchmark", 0),
        progress=loop.progress,
    )
    ev = loop.exp.evaluation
    scored = scored_set(loop.benchmark_set, version=ev.benchmark_version, path=ev.benchmark_path)
    scores = write_scores(d / "scores.json", report, scored)
    atomic_write_text(d / "table.md", benchmark_table_md(scores, title=loop.exp.name, model=model) + "\n")
    keep["scores"] = scores
    files = {"scores": d / "scores.json", "table": d / "table.md", "responses": d / "responses.jsonl"}
    return files, {
        "model": model,
        **scores["summary"],
    }


def load(loop: Loop, keep: dict[str, Any]) -> None:
    """The scores of a benchmark that finished earlier, into ``keep["scores"]``."""
    keep["scores"] = read_scores(loop.rd.benchmark_dir / "scores.json")
