"""``envengineer branch``: train a finished run's round K again under other configurations.

Every branch starts from the run's state before round K and trains round K with the run's learner, seeds
and settings on its own configuration; ``DIR/branches.json`` holds each branch's rates and its paired
difference to the run's own round K (:mod:`envengineer.loop.branch`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from envengineer.argtypes import nonneg_int, pos_int
from envengineer.cli.options import add_out, command


def register(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "branch",
        cmd_branch,
        help="the counterfactual of a round: train a run's round K under other configurations",
        description="Take the run in RUN_DIR before its round K, train round K once per --config with the "
        "run's learner, seeds and settings, validate each branch on the run's validation boards and write "
        "DIR/branches.json: per branch its configuration, valid and optimal rates (overall, per size, on "
        "the select and report halves of the boards) and the paired difference to the run's own round K. "
        "The run's own configuration (RUN_DIR/round_0K/config.applied.yaml) reproduces its round K. "
        "A stopped branch set resumes with the same command.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run that finished every stage before K")
    p.add_argument(
        "--round",
        dest="round_index",
        type=nonneg_int,
        required=True,
        metavar="K",
        help="the round to train again (the run must have finished every stage before it)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=ROUND.yaml",
        help="a branch: its name (its folder under --out) and its round configuration (repeatable)",
    )
    p.add_argument(
        "--engineer",
        action="append",
        default=[],
        metavar="NAME=EXPERIMENT.yaml",
        help="a branch whose configuration the engineer of that experiment file writes from the run's "
        "state before K, as the loop asks its own (repeatable; K >= 1)",
    )
    add_out(p, "folder of the branch set (one folder a branch)", required=True)
    p.add_argument(
        "--lanes",
        type=pos_int,
        default=1,
        help="branches trained side by side, each on its share of the cores (default 1: one at a time)",
    )
    p.add_argument(
        "--allow-fingerprint-change",
        action="store_true",
        help="branch from a run whose stages other code or presets computed (refused by default, naming "
        "what differs; each branch's fingerprint.json records it)",
    )


def cmd_branch(args: argparse.Namespace) -> int:
    from envengineer.loop.branch import BranchSpec, run_branches

    specs = [BranchSpec.parse(text) for text in args.config]
    specs += [BranchSpec.parse(text, "engineer") for text in args.engineer]
    record = run_branches(
        args.run_dir,
        args.round_index,
        specs,
        args.out,
        lanes=args.lanes,
        allow_fingerprint_change=args.allow_fingerprint_change,
    )
    own = record["own"]
    print(f"round {record['round']} of {record['source']}: {len(record['branches'])} branch(es)")
    if own is not None:
        print(f"  {'(the run)':<20} valid {own['all']['valid']:6.2f}  optimal {own['all']['optimal']:6.2f}")
    for b in record["branches"]:
        line = f"  {b['name']:<20} valid {b['all']['valid']:6.2f}  optimal {b['all']['optimal']:6.2f}"
        gain = (b.get("vs_own") or {}).get("all")
        if gain:
            v = gain["valid"]
            interval = f" [{v['low']:+.2f}, {v['high']:+.2f}]" if v["low"] is not None else ""
            line += f"  vs the run: valid {v['mean']:+.2f}{interval}"
        print(line)
    print(f"wrote {Path(args.out) / 'branches.json'}")
    return 0
