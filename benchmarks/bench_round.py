"""What one supervised round does to the packaged trainee, size by size: the question behind ``sft-round``.

Continues the packaged trainee (``policy:trainee``, or ``--model``) for ``--steps`` supervised steps on the
solver's plans of fresh boards (``--agents``, ``--sizes``; hole ratio 0.25, half the boards needing a wait)
with the packaged ``sft-round`` preset at ``--lr`` (its own 3e-4 by default), then answers held-out two- and
three-agent boards of sizes 3-10 greedily (``common.held_out``: ``--per-cell`` per size and wait subset, the
same boards for every setting, none seen in training) and prints valid rates per size, over sizes 3-8 (the
trainee's own) and 9-10 (sizes it never saw). ``--steps 0`` scores the trainee itself; ``table`` puts
several records side by side with each one's paired difference to the first (a 95 % bootstrap interval over
the boards, :func:`envengineer.loop.intervals.paired_board_gain`).

Usage::

    python benchmarks/bench_round.py --steps 0 --json none.json
    python benchmarks/bench_round.py --agents 2,3 --steps 300 --lr 3e-4 --json a23.json
    python benchmarks/bench_round.py table none.json a23.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import answer, held_out, size_rates, training_boards

EVAL_AGENTS = (2, 3)
TOKENS = 640  # a free-moves answer of three agents on 10x10 fits


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="the policy to continue (default: the packaged trainee)")
    p.add_argument("--agents", default="2,3", help="agent counts of the training boards, equal shares")
    p.add_argument("--sizes", default="3,4,5,6,7,8,9,10", help="sizes of the training boards")
    p.add_argument("--samples", type=int, default=9600, help="training boards generated")
    p.add_argument("--steps", type=int, default=300, help="supervised steps of 32 boards (0: no training)")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (cosine, 10 warm-up steps)")
    p.add_argument("--per-cell", type=int, default=8, help="held-out boards per size and wait subset")
    p.add_argument("--seed", type=int, default=0, help="seed of the training run")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "table":
        return table([Path(a) for a in argv[1:]])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from envengineer.mapf.validator import validate
    from envengineer.models.trainee import trainee_path

    sets = {k: held_out(args.per_cell, agents=k, max_size=10) for k in EVAL_AGENTS}
    model = args.model or str(trainee_path())
    record: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.steps:
        exclude = frozenset(i.board_hash() for s in sets.values() for i in s)
        agents = [int(a) for a in args.agents.split(",")]
        sizes = [int(s) for s in args.sizes.split(",")]
        train = training_boards(agents, sizes, args.samples, 2000 + args.seed, exclude)
        model, record["train"] = supervised(model, train, args)
    for k, instances in sets.items():
        t = time.perf_counter()
        texts = answer(model, instances, TOKENS)
        by_size = size_rates(instances, texts)["by_size"]
        flags = [int(validate(i, x).valid) for i, x in zip(instances, texts, strict=True)]
        record[str(k)] = {
            "valid": round(100 * float(np.mean(flags)), 1),
            "by_size": {n: r["valid"] for n, r in by_size.items()},
            "flags": flags,
            "eval_seconds": round(time.perf_counter() - t, 1),
        }
        print(f"{k} agents: {summary(record[str(k)])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(record) + "\n")
    return 0


def round_preset(lr: float) -> dict[str, Any]:
    """The packaged ``sft-round`` preset (``sft-small``'s settings at 3e-4 with 10 warm-up steps, targets of
    up to 640 tokens as :data:`TOKENS`) at the peak learning rate ``lr``."""
    from envengineer.training.presets import load_preset

    preset = load_preset("sft-round", "sft").model_dump(mode="json")
    preset["sft"]["learning_rate"] = lr
    return preset


def supervised(model: str, train: list, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """An ``sft-round`` round at ``--lr`` (:func:`round_preset`) for ``--steps`` steps."""
    from envengineer.training.sft import sft

    preset = round_preset(args.lr)
    out = Path(tempfile.mkdtemp(prefix="bench-round-"))
    result = sft(model, train, out_dir=out, preset=preset, seed=args.seed, max_steps=args.steps)
    print(f"# {result.steps} steps in {result.seconds / 60:.1f} min", flush=True)
    return str(result.checkpoint), {"steps": result.steps, "seconds": round(result.seconds, 1)}


def summary(rec: dict[str, Any]) -> str:
    by = {int(n): v for n, v in rec["by_size"].items()}
    seen = np.mean([by[n] for n in range(3, 9)])
    new = np.mean([by[n] for n in (9, 10)])
    return f"valid {rec['valid']:.1f} (sizes 3-8 {seen:.1f}, 9-10 {new:.1f}) by size {by}"


def table(paths: list[Path]) -> int:
    """Markdown rows: each record's valid rates, and its paired difference to the first record's."""
    from envengineer.loop.intervals import paired_board_gain

    base = json.loads(paths[0].read_text())
    head = "| setting | 2 agents valid % (3-8 · 9-10) | 3 agents valid % (3-8 · 9-10) | both, to the first |"
    print(head)
    print("|---|---|---|---|")
    for path in paths:
        rec = json.loads(path.read_text())
        cells = []
        for k in EVAL_AGENTS:
            r = rec[str(k)]
            by = {int(n): v for n, v in r["by_size"].items()}
            cells.append(
                f"{r['valid']:.1f} ({np.mean([by[n] for n in range(3, 9)]):.1f} · {(by[9] + by[10]) / 2:.1f})"
            )
        mine = [f for k in EVAL_AGENTS for f in rec[str(k)]["flags"]]
        theirs = [f for k in EVAL_AGENTS for f in base[str(k)]["flags"]]
        gain = paired_board_gain(theirs, mine)
        a = rec["args"]
        name = "no training"
        if a["steps"] != "0":
            name = f"agents {a['agents']}, sizes {a['sizes']}, lr {a['lr']}, {a['steps']} steps"
        diff = f"{gain['mean']:+.2f} [{gain['low']:+.2f}, {gain['high']:+.2f}]"
        print(f"| {name} | {cells[0]} | {cells[1]} | {diff} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
