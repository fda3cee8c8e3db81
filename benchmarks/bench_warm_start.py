"""The small policy's warm-start: training tokens/s and validation valid/optimal rates against minutes.

Creates a fresh small policy (``envengineer policy init``), generates two-agent training boards (sizes
3-6 by default), runs the supervised warm-start through TRL's ``SFTTrainer`` with a preset (default
``sft-small``) and, every ``--every`` optimizer steps, answers a fixed validation set greedily with the
model being trained and prints a row::

    step  minutes  train_tok/s  loss   valid%  optimal%

The validation set is benchmark-shaped (``build_validation_set``: wait subsets 25/50/75 %, hole ratio
uniform in [0, 0.5], seeds disjoint from the benchmark), two agents, sizes 3-6 by default. Evaluation time
is excluded from the minutes and from tokens/s. The issue's target: >= 60 % valid within 15 minutes on
2 cores.

Usage::

    python benchmarks/bench_warm_start.py                         # tiny policy, 15 minutes at most
    python benchmarks/bench_warm_start.py --size small --minutes 30 --json warm.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envengineer.mapf.benchmark import build_validation_set
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round
from envengineer.mapf.prompt import build_messages
from envengineer.mapf.validator import validate
from envengineer.models.small_policy import init_policy
from envengineer.training.presets import load_preset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny", help="policy size (default tiny)")
    p.add_argument("--preset", default="sft-small", help="SFT preset (default sft-small)")
    p.add_argument("--samples", type=int, default=48000, help="training instances (default 48000)")
    p.add_argument("--steps", type=int, default=1500, help="optimizer steps (default 1500)")
    p.add_argument("--minutes", type=float, default=15.0, help="stop after this much training time")
    p.add_argument("--every", type=int, default=250, help="evaluate every N steps (default 250)")
    p.add_argument("--sizes", default="3,4,5,6", help="map sizes of training and validation")
    p.add_argument("--per-cell", type=int, default=8, help="validation instances per size and subset")
    p.add_argument("--hole-ratio", type=float, default=0.25)
    p.add_argument("--wait-ratio", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from transformers import TrainerCallback

    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend
    from envengineer.training.sft import sft

    sizes = [int(s) for s in args.sizes.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-warm-"))
    t0 = time.perf_counter()
    config = RoundConfig.model_validate(
        {
            "sizes": {
                n: {"data_ratio": 1.0, "hole_ratio": args.hole_ratio, "wait_ratio": args.wait_ratio}
                for n in sizes
            },
            "num_agents": 2,
            "num_samples": args.samples,
        }
    )
    train = generate_round(config, args.seed)
    validation = build_validation_set(
        args.per_cell, agents=(2,), min_size=min(sizes), max_size=max(sizes), workers=1
    )
    print(
        f"# {len(train)} training boards (sizes {sizes}), {len(validation)} validation boards, "
        f"generated in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    policy = init_policy(out / "policy", size=args.size, seed=args.seed, overwrite=True)
    preset = load_preset(args.preset, "sft").model_dump(mode="json")
    preset["sft"].update(disable_tqdm=True, logging_steps=args.every)
    rows: list[dict[str, Any]] = []

    class Curve(TrainerCallback):
        """Evaluate every ``--every`` steps; stop when the time budget is spent."""

        def __init__(self) -> None:
            self.train_s = 0.0
            self.tokens = 0
            self._t = 0.0
            self.loss: float | None = None

        def on_train_begin(self, targs, state, control, **kw):
            self._t = time.perf_counter()

        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.loss = float(logs["loss"])

        def on_step_end(self, targs, state, control, model=None, processing_class=None, **kw):
            now = time.perf_counter()
            self.train_s += now - self._t
            self.tokens = int(state.num_input_tokens_seen or 0)
            out_of_time = self.train_s >= args.minutes * 60
            if state.global_step % args.every == 0 or out_of_time:
                rows.append(self.evaluate(state.global_step, model, processing_class))
                control.should_training_stop = control.should_training_stop or out_of_time
            self._t = time.perf_counter()

        def evaluate(self, step: int, model: Any, tokenizer: Any) -> dict[str, Any]:
            backend = HFBackend.from_model(model, tokenizer, name="warm-start")
            params = SamplingParams(temperature=0.0, max_new_tokens=preset["max_completion_length"])
            texts = []
            for lo in range(0, len(validation), 64):
                batch = validation[lo : lo + 64]
                conversations = [build_messages(i, style="compact") for i in batch]
                texts += [c.text for c in backend.generate(conversations, params)]
            verdicts = [validate(i, t) for i, t in zip(validation, texts, strict=True)]
            row = {
                "step": step,
                "minutes": round(self.train_s / 60, 2),
                "train_tokens_per_s": round(self.tokens / self.train_s) if self.train_s else None,
                "loss": self.loss,
                "valid": round(100 * sum(v.valid for v in verdicts) / len(verdicts), 2),
                "optimal": round(100 * sum(v.optimal for v in verdicts) / len(verdicts), 2),
            }
            print(
                f"{row['step']:>6} {row['minutes']:>8.2f} {row['train_tokens_per_s'] or 0:>11} "
                f"{row['loss'] or float('nan'):>6.3f} {row['valid']:>7.2f} {row['optimal']:>8.2f}",
                flush=True,
            )
            return row

    print(f"# {platform.node()} {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; policy {args.size}")
    print("  step  minutes  train_tok/s   loss  valid%  optimal%", flush=True)
    preset["sft"]["include_num_input_tokens_seen"] = "non_padding"
    sft(
        str(policy),
        train,
        out_dir=out / "sft",
        preset=preset,
        seed=args.seed,
        max_steps=args.steps,
        callbacks=[Curve()],
    )
    print(f"# load average at the end {os.getloadavg()[0]:.2f}; checkpoint {out / 'sft' / 'checkpoint'}")
    if args.json:
        record = {"args": vars(args) | {"out": str(out)}, "rows": rows}
        args.json.write_text(json.dumps(record, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
