"""The solver teaching the policy on its own answers, against more of the solver's plans, at equal minutes.

Starts from a warm-started checkpoint (``bench_warm_start.py --out DIR`` leaves it in ``DIR/sft/checkpoint``)
and continues it for ``--minutes`` with one learner:

* ``teach``: :mod:`envengineer.training.teach` (roll in with the policy, the exact teacher labels its
  answers from their first mistake on, learn);
* ``sft``: the supervised control, more of the solver's plans on fresh boards through ``sft()`` at the same
  learning rate, minutes and batch size;
* ``grpo``: guided GRPO as shipped (``grpo-small``, its own rate) on the same fresh boards, sized in steps
  (``--max-steps``; its trainer takes no wall-time stop);
* ``none``: no training (the checkpoint's own figures, measured the same way).

Then it answers the held-out sets of ``bench_warm_start.py`` greedily (one, two and three agents, sizes 3-8)
and prints, per set, valid and optimal rates, failure categories, the share of conflicts among failures and
the share of answer lines that are not the moves of their own scratchpad line; for two agents also the
diagnostic of the two causes: the same boards answered with the solver's first scratchpad line written in,
and the free answers split by whether their first line is the solver's.

Usage::

    python benchmarks/bench_teach.py --model W/sft/checkpoint --learner teach --minutes 5 --json t.json
    python benchmarks/bench_teach.py --model W/sft/checkpoint --learner sft --minutes 5 --json s.json
    python benchmarks/bench_teach.py --model W/sft/checkpoint --learner grpo --max-steps 46 --json g.json
    python benchmarks/bench_teach.py table none.json t0.json t1.json t2.json   # paired gains over seeds
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from common import answer, diagnostic, held_out_sets, size_rates, training_boards
from envengineer.loop.intervals import paired_seed_gain
from envengineer.mapf.instance import Instance
from envengineer.mapf.validator import validate
from envengineer.training.teach import TeachSettings, teach, written_plan

CONFLICTS = ("vertex_conflict", "swap_conflict")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the warm-started checkpoint to continue")
    p.add_argument("--learner", choices=("teach", "sft", "grpo", "none"), default="teach")
    p.add_argument("--minutes", type=float, default=5.0, help="training wall time")
    p.add_argument("--agents", default="1,2,3", help="agent counts of the training boards")
    p.add_argument("--sizes", default="3,4,5,6,7,8", help="sizes of the training boards")
    p.add_argument("--samples", type=int, default=24000, help="training boards generated (cycled if used up)")
    p.add_argument("--seed", type=int, default=0, help="seed of the training boards and of the learner")
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (teach, sft; not grpo)")
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="schedule length (default: by minutes, 37 a minute for teach, 95 for sft: 2 cores' rates)",
    )
    p.add_argument("--rollout-batch", type=int, default=64)
    p.add_argument("--steps-per-rollout", type=int, default=4)
    p.add_argument("--expert-rows", type=int, default=0, help="the solver's own rows per roll-in (teach)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and wait subset")
    p.add_argument("--eval-agents", default="1,2,3")
    p.add_argument("--max-new-tokens", type=int, default=640)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "table":
        return table([Path(a) for a in argv[1:]])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-teach-"))
    sets = held_out_sets([int(a) for a in args.eval_agents.split(",")], args.per_cell, 8)
    exclude = frozenset(i.board_hash() for s in sets.values() for i in s)
    t0 = time.perf_counter()
    seed = 1000 + args.seed  # boards apart from the warm-start's (seed 0..) and the held-out sets
    train = training_boards(
        [int(a) for a in args.agents.split(",")],
        [int(s) for s in args.sizes.split(",")],
        args.samples,
        seed,
        exclude,
    )
    print(f"# {len(train)} training boards in {time.perf_counter() - t0:.0f} s", flush=True)
    checkpoint, record = str(args.model), {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.learner == "teach":
        cfg = TeachSettings(
            minutes=args.minutes,
            max_steps=args.max_steps or int(37 * args.minutes),  # the rate planned on 2 cores
            learning_rate=args.lr,
            rollout_batch=args.rollout_batch,
            steps_per_rollout=args.steps_per_rollout,
            expert_rows=args.expert_rows,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
        metrics = teach(checkpoint, train, out_dir=out / "teach", settings=cfg)
        checkpoint = metrics["checkpoint"]
        record["train"] = {k: metrics[k] for k in ("steps", "rollins", "seconds", "unlabelled")}
        record["history"] = metrics["history"]
        h = metrics["history"]
        mean = {key: np.mean([r[key] for r in h]) for key in ("rollin_s", "train_s")}
        print(
            f"# teach: {metrics['steps']} steps, {metrics['rollins']} roll-ins in "
            f"{metrics['seconds'] / 60:.1f} min; per roll-in: answers and labels {mean['rollin_s']:.1f} s, "
            f"optimizer steps {mean['train_s']:.1f} s; roll-in valid "
            f"{h[0]['rollin_valid']:.2f} -> {np.mean([r['rollin_valid'] for r in h[-5:]]):.2f}",
            flush=True,
        )
    elif args.learner == "sft":
        checkpoint, record["train"] = supervised(args, checkpoint, train, out)
    elif args.learner == "grpo":
        checkpoint, record["train"] = guided_grpo(args, checkpoint, train, out)
    record["sets"] = {}
    for k, instances in sets.items():
        t1 = time.perf_counter()
        texts = answer(checkpoint, instances, args.max_new_tokens)
        rec = describe(instances, texts)
        if k == 2:
            rec["diagnostic"] = diagnostic(checkpoint, instances, texts, args.max_new_tokens)
        rec["eval_seconds"] = round(time.perf_counter() - t1, 1)
        record["sets"][k] = rec
        print(f"\n{k} agent(s), {len(instances)} boards: {json.dumps(summary(rec))}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def supervised(args: argparse.Namespace, model: str, train: list[Instance], out: Path) -> tuple[str, dict]:
    """The control: ``sft-small`` on the solver's plans of fresh boards, at the learner's rate and minutes."""
    from transformers import TrainerCallback

    from envengineer.training.presets import load_preset
    from envengineer.training.sft import sft

    preset = load_preset("sft-small", "sft").model_dump(mode="json")
    preset["max_completion_length"] = args.max_new_tokens
    preset["sft"].update(learning_rate=args.lr, warmup_steps=10, disable_tqdm=True)

    class Budget(TrainerCallback):
        def on_train_begin(self, targs, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            if time.perf_counter() - self.start >= args.minutes * 60:
                control.should_training_stop = True

    steps = args.max_steps or int(95 * args.minutes)  # this machine's SFT steps a minute, measured
    result = sft(
        model,
        train,
        out_dir=out / "sft",
        preset=preset,
        seed=args.seed,
        max_steps=steps,
        callbacks=[Budget()],
    )
    print(f"# sft: {result.steps} steps in {result.seconds / 60:.1f} min", flush=True)
    return str(result.checkpoint), {"steps": result.steps, "seconds": result.seconds}


def guided_grpo(args: argparse.Namespace, model: str, train: list[Instance], out: Path) -> tuple[str, dict]:
    """Guided GRPO as shipped (``grpo-small``: its own rate, 8 boards x 8 samples a step, the solver's plan
    in every group without an optimal sample) on the same fresh boards, one a prompt. GRPO's trainer takes
    no wall-time stop here, so the run is sized in steps: ``--max-steps``, else the steps ``--minutes``
    allow on 2 idle cores (6.5 s a step, measured); its seconds are recorded beside them."""
    from envengineer.training.grpo import train_round
    from grpo_runs import per_step, variant_preset

    steps = args.max_steps or int(60 * args.minutes / 6.5)
    preset = variant_preset("preset", steps, args.max_new_tokens)
    preset["probe"] = {**preset["probe"], "every": 0}  # no probe: the held-out sets below measure it
    prompts = train[: steps * per_step(preset)]
    result = train_round(model, prompts, out_dir=out / "grpo", preset=preset, seed=args.seed, max_steps=steps)
    seconds = result.metrics["timing"].get("train_s") or result.seconds
    print(f"# grpo: {result.steps} steps in {seconds / 60:.1f} min", flush=True)
    return str(result.checkpoint), {"steps": result.steps, "seconds": seconds}


def describe(instances: list[Instance], texts: list[str]) -> dict[str, Any]:
    """Rates, failures, conflicts among failures, answer lines that do not copy their scratchpad."""
    rec = size_rates(instances, texts)
    failures = Counter(
        v.failure for v in (validate(i, t) for i, t in zip(instances, texts, strict=True)) if not v.valid
    )
    lines = miscopied = 0
    for t in texts:
        pad, _ = written_plan(t, scratchpad=True)
        ans, _ = written_plan(t, scratchpad=False)
        for x, line in enumerate(ans):
            lines += 1
            miscopied += x >= len(pad) or pad[x] != line
    verdicts = [validate(i, t) for i, t in zip(instances, texts, strict=True)]
    rec["valid_flags"] = [int(v.valid) for v in verdicts]  # board by board, for paired intervals
    rec["optimal_flags"] = [int(v.optimal) for v in verdicts]
    rec["failures"] = dict(failures.most_common())
    rec["conflict_share"] = round(sum(failures[c] for c in CONFLICTS) / max(1, sum(failures.values())), 3)
    rec["miscopied_lines"] = round(miscopied / max(1, lines), 3)
    return rec


def table(files: list[Path]) -> int:
    """``table BEFORE.json AFTER.json...``: the gain of the runs (one per seed) over the first record on
    every held-out set, paired board by board, mean over seeds with its 95 % bootstrap interval."""
    before, *after = [json.loads(f.read_text()) for f in files]
    for k in before["sets"]:
        cells = []
        for flag in ("valid_flags", "optimal_flags"):
            g = paired_seed_gain(
                [before["sets"][k][flag]] * len(after),
                [a["sets"][k][flag] for a in after],
                shared_boards=True,
            )
            ci = "" if g["low"] is None else f" [{g['low']:+.1f}, {g['high']:+.1f}]"
            cells.append(f"{g['warm_pct']:.1f} -> {g['after_pct']:.1f}: {g['mean']:+.1f}{ci} {g['per_seed']}")
        print(f"{k} agent(s): valid {cells[0]}; optimal {cells[1]}")
    return 0


def summary(rec: dict[str, Any]) -> dict[str, Any]:
    head = {
        "valid": rec["sizes_3_8"]["valid"],
        "optimal": rec["sizes_3_8"]["optimal"],
        "conflict_share": rec["conflict_share"],
        "miscopied_lines": rec["miscopied_lines"],
        "failures": rec["failures"],
    }
    if "diagnostic" in rec:
        head["diagnostic"] = {
            k: (v["boards"], v["valid"], v["optimal"]) for k, v in rec["diagnostic"].items()
        }
    return head


if __name__ == "__main__":
    sys.exit(main())
