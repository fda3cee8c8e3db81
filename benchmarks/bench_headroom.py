"""The headroom of a curriculum: an oracle that picks each round's best configuration, against the fixed arm.

From a finished run of the fixed arm (``RUN``), each round ``K`` of ``--rounds`` is branched
(``envengineer branch``, :mod:`envengineer.loop.branch`) once per candidate: the configuration each arm's
engineer writes from the oracle's own state (the fixed arm, the rules, a random draw, the LLM engineer:
``--engineer``) and hand-written ones (``--config``). The candidate with the best valid rate on the *select*
half of the validation boards is kept and the next round branches from it; every figure is reported on
the other, *report* half, paired with the fixed run's same round on the same boards (so the choice is never
scored on the boards that made it). The oracle's gain over the fixed arm is the headroom: what the best
choice among these candidates would have gained, round by round.

    python benchmarks/bench_headroom.py runs/cmp/cpu-policy-main-fixed-s0 --rounds 1 2 --out runs/headroom-s0
    python benchmarks/bench_headroom.py --summary runs/headroom-s0 runs/headroom-s1 runs/headroom-s2

``--summary`` reads the ``headroom.json`` of several seeds and prints, per round, each candidate's and the
oracle's difference to the fixed arm on the report half (mean over seeds and its 95 % bootstrap interval
over seeds, :func:`envengineer.loop.intervals.bootstrap_mean`), and ``hindsight``: the candidate best on
the report half itself, an upper bound biased by choosing on the boards that score it.

The fixed candidate of the first round is the fixed run's own round (it reproduces it to the byte), so it
is read from the run rather than trained again. A stopped measurement resumes with the same command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from envengineer.loop.branch import BranchSpec, on_half, rates, run_branches
from envengineer.loop.report_data import paired_gain
from envengineer.loop.rundir import read_json

#: The engineers asked for candidates: name -> experiment file (its ``engineer`` section).
ENGINEERS = {
    "fixed": "experiments/cpu/policy-main-fixed.yaml",
    "climb": "experiments/cpu/policy-baseline-climb.yaml",
    "threshold": "experiments/cpu/policy-baseline-threshold.yaml",
    "learnability": "experiments/cpu/policy-baseline-learnability.yaml",
    "random": "experiments/cpu/policy-baseline-random.yaml",
    "llm": "experiments/cpu/policy-main-llm.yaml",
    "llm-probe": "experiments/cpu/policy-main-llm-probe.yaml",
    "llm-moves": "experiments/cpu/policy-main-llm-moves.yaml",
    "llm-effects": "experiments/cpu/policy-main-llm-effects.yaml",
    "random-probe": "experiments/cpu/policy-baseline-random-probe.yaml",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, nargs="?", help="a finished run of the fixed arm")
    p.add_argument("--summary", type=Path, nargs="+", metavar="DIR", help="tabulate finished measurements")
    p.add_argument("--rounds", type=int, nargs="+", default=[1, 2], help="rounds to branch (default 1 2)")
    p.add_argument(
        "--engineers",
        default="fixed,climb,threshold,learnability,random",
        help=f"candidate engineers, comma-separated, of {', '.join(ENGINEERS)}",
    )
    p.add_argument("--config", action="append", default=[], metavar="NAME=ROUND.yaml", help="more candidates")
    p.add_argument("--out", type=Path)
    p.add_argument("--lanes", type=int, default=1)
    p.add_argument(
        "--allow-fingerprint-change",
        action="store_true",
        help="branch from a run made by other code or presets (e.g. a commit since; recorded)",
    )
    args = p.parse_args(argv)
    if args.summary:
        print(summary([json.loads((d / "headroom.json").read_text()) for d in args.summary]))
        return 0
    if args.run is None or args.out is None:
        p.error("give RUN and --out (or --summary DIR ...)")

    specs = [BranchSpec(n, Path(ENGINEERS[n]), "engineer") for n in args.engineers.split(",") if n]
    specs += [BranchSpec.parse(text) for text in args.config]
    source, rows = args.run, []
    for k in args.rounds:
        first = source == args.run
        todo = [s for s in specs if not (first and s.name == "fixed")]  # the run's own round k
        record = run_branches(
            source,
            k,
            todo,
            args.out / f"round_{k}",
            lanes=args.lanes,
            allow_fingerprint_change=args.allow_fingerprint_change,
        )
        fixed_k = _scores(args.run / f"round_{k:02d}" / "validation" / "scores.json")
        candidates = {
            b["name"]: _scores(Path(b["folder"]) / f"round_{k:02d}/validation/scores.json")
            for b in record["branches"]
        }
        if first and any(s.name == "fixed" for s in specs):
            candidates["fixed"] = fixed_k
        chosen = max(candidates, key=lambda n: (_rate(candidates[n], "select"), n == "fixed"))
        row = {"round": k, "chosen": chosen, "candidates": {}}
        for name, scores in candidates.items():
            row["candidates"][name] = {
                "select": _rate(scores, "select"),
                "report": _rate(scores, "report"),
                "vs_fixed_report": paired_gain(on_half(fixed_k, "report"), on_half(scores, "report")),
            }
        rows.append(row)
        if chosen != "fixed" or not first:
            source = args.out / f"round_{k}" / chosen
        print(_table(row))
    (args.out / "headroom.json").write_text(json.dumps({"run": str(args.run), "rounds": rows}, indent=2))
    return 0


def summary(records: list[dict[str, Any]]) -> str:
    """Per round: each candidate's and the oracle's valid difference to the fixed arm on the report half,
    mean over seeds with its 95 % interval over seeds, and what the oracle chose in each seed."""
    from envengineer.loop.intervals import bootstrap_mean

    lines = [f"{len(records)} seed(s); valid points against the fixed arm's same round, report half", ""]
    rounds = sorted({row["round"] for rec in records for row in rec["rounds"]})
    for k in rounds:
        rows = [row for rec in records for row in rec["rounds"] if row["round"] == k]
        names = sorted({n for row in rows for n in row["candidates"]})
        lines += [
            f"round {k}: chosen {', '.join(row['chosen'] for row in rows)}",
            "| candidate | valid, mean [95 %] | optimal, mean [95 %] |",
            "|---|---|---|",
        ]
        picked = {n: [row["candidates"][n] for row in rows if n in row["candidates"]] for n in names}
        picked["oracle"] = [row["candidates"][row["chosen"]] for row in rows]
        # the best on the report half itself: chosen on the boards that score it, so biased upward
        picked["hindsight"] = [
            max(row["candidates"].values(), key=lambda c: _gain(c, "valid")) for row in rows
        ]
        for name, cands in picked.items():
            cells = [_mean_text(bootstrap_mean([_gain(c, m) for c in cands])) for m in ("valid", "optimal")]
            lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)


def _gain(candidate: dict[str, Any], metric: str) -> float:
    return float(candidate["vs_fixed_report"][metric]["mean"])


def _mean_text(b: dict[str, Any]) -> str:
    interval = f" [{b['low']:+.2f}, {b['high']:+.2f}]" if b["low"] is not None else ""
    return f"{b['mean']:+.2f}{interval}"


def _scores(path: Path) -> dict[str, Any]:
    return read_json(path)


def _rate(scores: dict[str, Any], half: str) -> float:
    return rates(scores)[half]["valid"]


def _table(row: dict[str, Any]) -> str:
    lines = [
        f"round {row['round']}: chosen {row['chosen']} (best valid on the select half)",
        "| candidate | select valid % | report valid % | report vs fixed (valid, 95 % over boards) |",
        "|---|---|---|---|",
    ]
    for name, c in sorted(row["candidates"].items(), key=lambda x: -x[1]["select"]):
        g = (c["vs_fixed_report"] or {}).get("valid") or {}
        gain = f"{g.get('mean', 0):+.2f} [{g.get('low') or 0:+.2f}, {g.get('high') or 0:+.2f}]"
        lines.append(f"| {name} | {c['select']:.2f} | {c['report']:.2f} | {gain} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
