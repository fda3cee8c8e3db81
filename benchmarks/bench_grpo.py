"""GRPO on the small policy, measured: does a round improve the warm-start, and which settings do?

Four commands:

``warm``      trains one warm-start (``policy init`` + ``sft-small``) on 2- and 3-agent boards and scores it
              (:mod:`grpo_warm`).
``sweep``     runs GRPO variants x seeds from that warm-start and scores each result greedily on a fixed
              held-out validation set; prints per variant the mean gain over the warm-start in valid and
              optimal points with a 95 % bootstrap interval over seeds, plus the sampled diagnostics. The
              runs go in lanes: one process per core at a time, each on its share of the cores as torch
              and BLAS threads (``--lanes 1``: one after another in this process).
``table``     the sweep table of several ``sweep --json`` files.
``transfer``  does a gain carry to boards never trained on? One variant x seeds (in lanes), each scored
              on its own training boards and three held-out sets as paired gains with 95 % intervals
              (:mod:`grpo_transfer`). ``--boards N`` trains on N boards cycled over the steps'
              prompts, 0 a fresh board per prompt; ``--variant sft-same-boards`` is the supervised
              control: the same boards learnt from the solver's plans (``grpo_runs.SFT_CONTROLS``).

The held-out set is benchmark-shaped (``build_validation_set``: wait subsets 25/50/75 %, hole ratio
uniform in [0, 0.5], seeds disjoint from the benchmark): two agents, sizes 3-8, ``--per-cell`` boards per
size and subset (16: 288 boards), and the same set for every variant and seed. Training boards exclude
it by board hash. Decoding for scoring is greedy (the evaluation's temperature 0). The variants, their
training and the lanes are in :mod:`grpo_runs`; the held-out sets, answers and scores in :mod:`common`.

Usage::

    python benchmarks/bench_grpo.py warm --out runs/bench-grpo/warm
    python benchmarks/bench_grpo.py sweep --warm runs/bench-grpo/warm/sft/checkpoint \\
        --variants preset,sparse-drgrpo --seeds 0,1,2 --steps 150 --json runs/bench-grpo/sweep.json
    python benchmarks/bench_grpo.py transfer --warm runs/bench-grpo/warm/sft/checkpoint \\
        --variant preset --seeds 0,1,2 --steps 150 --boards 300 --json runs/bench-grpo/transfer.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from common import answer, board_flags, ci_text, held_out, public
from envengineer.loop.intervals import bootstrap_mean
from grpo_runs import SFT_CONTROLS, VARIANTS, finished_runs, train_one


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warm", help="train and score one warm-start")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--size", default="tiny")
    w.add_argument("--agents", default="2,3", help="agent counts of the warm-start data (equal shares)")
    w.add_argument("--sizes", default="3,4,5,6")
    w.add_argument("--samples", type=int, default=48000)
    w.add_argument("--steps", type=int, default=2000)
    w.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("sweep", help="GRPO variants x seeds from one warm-start")
    s.add_argument("--variants", default="old,sparse-drgrpo")
    x = sub.add_parser("transfer", help="one variant x seeds: gains on trained-on and held-out boards")
    x.add_argument("--variant", default="preset", choices=[*VARIANTS, *SFT_CONTROLS])
    x.add_argument("--train-eval", type=int, default=288, help="trained-on boards scored (at most)")
    for q in (s, x):
        q.add_argument("--warm", type=Path, required=True, help="the warm-start checkpoint folder")
        q.add_argument("--seeds", default="0,1,2")
        q.add_argument("--steps", type=int, default=150)
        q.add_argument("--sizes", default="3,4,5,6,7,8", help="training sizes (uniform data ratio)")
        q.add_argument("--hole-ratio", type=float, default=0.25)
        q.add_argument("--wait-ratio", type=float, default=0.5)
        q.add_argument("--agents", default="2", help="agent counts of the training boards (equal shares)")
        q.add_argument(
            "--max-completion-length",
            type=int,
            default=None,
            help="GRPO's completion budget and every scored answer's (default: grpo-small's for training "
            "and sft-small's for scoring, so that every plan the warm-start learned fits)",
        )
        q.add_argument(
            "--boards",
            type=int,
            default=0,
            help="distinct training boards, cycled over steps x prompts per step (0: a fresh one per prompt)",
        )
        q.add_argument("--out", type=Path, default=Path("runs/bench-grpo"))
        q.add_argument("--json", type=Path, default=None)
        q.add_argument(
            "--lanes",
            type=int,
            default=0,
            help="runs at once, each in its own process (0: one per core; 1: one after another here)",
        )
    x.set_defaults(out=Path("runs/bench-grpo/transfer"))  # apart from the sweep's runs of the same name
    for q in (w, s, x):
        q.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and subset")
        q.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t = sub.add_parser("table", help="the sweep table of several --json files (runs in parallel processes)")
    t.add_argument("files", type=Path, nargs="+")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if getattr(args, "threads", 0):
        import torch

        torch.set_num_threads(args.threads)
    if args.command == "warm":
        from grpo_warm import cmd_warm  # library modules of their own: they import no script

        return cmd_warm(args)
    if args.command == "transfer":
        from grpo_transfer import cmd_transfer

        return cmd_transfer(args)
    return {"sweep": cmd_sweep, "table": cmd_table}[args.command](args)


def run_one(
    args: argparse.Namespace, variant: str, seed: int, validation: list, warm: dict
) -> dict[str, Any]:
    """One ``sweep`` run: train, score the result on the held-out set, and the round's diagnostics."""
    result, _, minutes = train_one(args, variant, seed, frozenset(i.board_hash() for i in validation))
    after = board_flags(validation, answer(str(result.checkpoint), validation, args.max_completion_length))
    history = result.metrics["log_history"]
    entropy = [e["entropy"] for e in history if "entropy" in e]
    zero = [e["frac_reward_zero_std"] for e in history if "frac_reward_zero_std" in e]
    return {
        "variant": variant,
        "seed": seed,
        "minutes": round(minutes, 2),
        "valid_pct": after["valid_pct"],
        "optimal_pct": after["optimal_pct"],
        "valid_by_size": after["valid_by_size"],
        "gain_valid": round(after["valid_pct"] - warm["valid_pct"], 2),
        "gain_optimal": round(after["optimal_pct"] - warm["optimal_pct"], 2),
        "entropy_first_last": [round(entropy[0], 3), round(entropy[-1], 3)] if entropy else None,
        "zero_std_first_last": [round(zero[0], 3), round(zero[-1], 3)] if zero else None,
        "probe": result.metrics["probe"]["rows"],
        "sampled": result.metrics["sampled"],
    }


def cmd_sweep(args: argparse.Namespace) -> int:
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        print(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    validation = held_out(args.per_cell)
    warm = board_flags(validation, answer(str(args.warm), validation, args.max_completion_length))
    print(
        f"# {len(validation)} held-out boards; warm-start {args.warm}: valid {warm['valid_pct']} % "
        f"optimal {warm['optimal_pct']} % by size {warm['valid_by_size']}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    jobs = [(variant, seed, validation, warm) for variant in variants for seed in seeds]
    for row in finished_runs(args, run_one, jobs):
        runs.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("probe", "sampled")}), flush=True)
        if args.json:
            record = {
                "args": {k: str(v) for k, v in vars(args).items()},
                "warm": public(warm),
                "runs": runs,
            }
            args.json.write_text(json.dumps(record, indent=2) + "\n")
    print_table(runs, variants)
    return 0


def print_table(runs: list[dict[str, Any]], variants: list[str]) -> None:
    """Per variant: mean rates, the mean gains with a 95 % bootstrap interval over seeds, minutes per run."""
    print(
        "\n| variant | seeds | valid % | optimal % | gain valid (95 % CI) | gain optimal (95 % CI) "
        "| min/run |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in variants:
        rows = [r for r in runs if r["variant"] == variant]
        gv = ci_text(bootstrap_mean([r["gain_valid"] for r in rows]))
        go = ci_text(bootstrap_mean([r["gain_optimal"] for r in rows]))
        print(
            f"| {variant} | {len(rows)} | {np.mean([r['valid_pct'] for r in rows]):.1f} "
            f"| {np.mean([r['optimal_pct'] for r in rows]):.1f} "
            f"| {gv} | {go} "
            f"| {np.mean([r['minutes'] for r in rows]):.1f} |"
        )


def cmd_table(args: argparse.Namespace) -> int:
    runs: list[dict[str, Any]] = []
    warms = set()
    for path in args.files:
        record = json.loads(path.read_text())
        warms.add(json.dumps(record["warm"], sort_keys=True))
        runs += record["runs"]
    if len(warms) > 1:  # gains against different warm-starts or held-out sets do not pool
        print("the files score different warm-starts or held-out sets; not pooled", file=sys.stderr)
        return 2
    print_table(runs, list(dict.fromkeys(r["variant"] for r in runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
