"""The small policy's warm-start, skill by skill: valid and optimal rates of one, two and three agents.

Creates a fresh small policy in a given format (``--format``: its tokenizer, embedding initialisation and
scratchpad, docs/models.md), generates training boards (agent counts ``--agents`` in equal shares, sizes
``--sizes``, hole ratio ``--holes``: 0.25, or ``uniform`` in [0, 0.5] board by board as in the benchmark and
the held-out sets; wait ratio 0.5), runs the supervised warm-start through TRL's ``SFTTrainer``
with ``sft-small`` for ``--steps`` steps (stopped at ``--minutes`` of training time), then answers greedily
three held-out, benchmark-shaped sets and prints valid / optimal rates per size and the validator's failure
categories per size, beside the scripted greedy heuristic (each agent's own shortest path) on the same
boards (for two agents also the diagnostic of ``bench_teach.py``: the boards answered with the solver's
first scratchpad line written in, and the free answers split by whether their first line is the solver's):

* one agent, sizes 3-8 (``--per-cell`` x 3 boards per size, hole ratio uniform in [0, 0.5]): path-finding
  alone, where greedy and the solver are both 100 %;
* two agents, sizes 3-8, ``--per-cell`` per size and wait subset (25/50/75 % need a wait): with the
  default 16, the 288 boards of ``bench_grpo.py``;
* three agents, the same shape.

``--report-sizes 9,10`` adds larger boards to every set (reported apart, never in the headline). Held-out
boards are disjoint from the training boards by board hash. Evaluation time is not training time.

Usage::

    python benchmarks/bench_warm_start.py --format moves --json warm-moves.json       # 15 minutes at most
    OMP_NUM_THREADS=1 python benchmarks/bench_warm_start.py --threads 1 ...           # one lane of two
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

from common import answer, diagnostic, held_out_sets, size_rates, training_boards, wait_ratio
from envengineer.mapf.policies import respond
from envengineer.models.small_policy import DEFAULT_FORMAT, POLICY_FORMATS, init_policy
from envengineer.training.presets import load_preset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--format", default=DEFAULT_FORMAT, choices=list(POLICY_FORMATS), help="policy format")
    p.add_argument("--size", default="tiny", help="policy size (default tiny)")
    p.add_argument("--preset", default="sft-small", help="SFT preset (default sft-small)")
    p.add_argument(
        "--max-completion-length",
        type=int,
        default=None,
        help="longest target and answer in tokens (default: the preset's; a longer scratchpad needs more)",
    )
    p.add_argument("--agents", default="2,3", help="agent counts of the training boards (equal shares)")
    p.add_argument("--sizes", default="3,4,5,6,7,8", help="map sizes of the training boards")
    p.add_argument("--samples", type=int, default=160000, help="training boards (default 160000)")
    p.add_argument("--steps", type=int, default=4000, help="optimizer steps: the schedule's length")
    p.add_argument("--minutes", type=float, default=15.0, help="stop training after this much time")
    p.add_argument(
        "--stop-at-step",
        type=int,
        default=0,
        help="stop after this many steps, the schedule still --steps long: a run as long as one that "
        "--minutes stopped there (its record's steps), whatever the machine's load; with another --threads "
        "the sums round otherwise, so the weights differ (0: no such stop)",
    )
    p.add_argument(
        "--sampling",
        default=None,
        choices=["random", "group_by_length"],
        help="the trainer's train_sampling_strategy (default: the preset's)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="rows per step (default: the preset's 32)")
    p.add_argument(
        "--length-groups",
        type=int,
        default=None,
        help="batch rows of similar length, sorted within groups of this many batches "
        "(the preset's length_group_batches; default: the preset's)",
    )
    p.add_argument(
        "--holes",
        type=hole_ratio,
        default=0.25,
        help="hole ratio of the training boards, or 'uniform': each board draws its own in [0, 0.5]",
    )
    p.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and wait subset")
    p.add_argument("--report-sizes", default="", help="larger sizes reported apart, e.g. 9,10")
    p.add_argument("--eval-agents", default="1,2,3", help="agent counts of the held-out sets")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy and of the training boards")
    p.add_argument(
        "--save-every",
        type=int,
        default=0,
        help="also save a checkpoint every this many steps (sft/trainer/checkpoint-STEP), to measure the "
        "curve of a long run afterwards with bench_teach.py --learner none (0: only the last)",
    )
    p.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the record here")
    return p.parse_args(argv)


def source_commit() -> str:
    """The checkout's commit, ``+changes`` when files differ from it (``unknown`` outside git)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def hole_ratio(text: str) -> float | None:
    """``--holes``: a ratio in [0, 1), or ``uniform`` (None: every board draws its own in [0, 0.5]).

    >>> hole_ratio("0.25"), hole_ratio("uniform")
    (0.25, None)
    """
    if text == "uniform":
        return None
    ratio = float(text)
    if not 0.0 <= ratio < 1.0:
        raise argparse.ArgumentTypeError(f"a hole ratio lies in [0, 1), got {text}")
    return ratio


def training_versions() -> dict[str, str]:
    """The versions that train: python, envengineer, torch, transformers and trl (``missing`` when absent)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("envengineer", "torch", "transformers", "trl"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    agents = [int(a) for a in args.agents.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-warm-"))
    sets, train = board_sets(args, agents, sizes)
    policy = init_policy(
        out / "policy", size=args.size, seed=args.seed, policy_format=args.format, overwrite=True
    )
    preset = warm_start_preset(args)
    load = os.getloadavg()[0]
    versions = training_versions()
    result, budget = warm_start(args, policy, out, train, preset)
    train_s = result.metrics["timing"].get("train_s") or (time.perf_counter() - budget.start)
    losses = [r["loss"] for r in result.metrics["log_history"] if "loss" in r]
    record: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "commit": source_commit(),
        "versions": versions,  # read before training: what trained, not what packages it later
        "data": {
            "agents": agents,
            "sizes": sizes,
            "samples": len(train),
            "hole_ratio": "uniform" if args.holes is None else args.holes,
            "wait_ratio": {str(a): wait_ratio(a) for a in agents},
        },
        "format": args.format,
        "steps": result.steps,
        "train_minutes": round(train_s / 60, 2),
        "train_tokens_per_s": round(budget.tokens / train_s) if train_s else None,
        "final_loss": losses[-1] if losses else None,
        "load_before": round(load, 2),
        "sets": {},
    }
    print(
        f"# format {args.format}: {result.steps} steps in {train_s / 60:.1f} min, "
        f"{record['train_tokens_per_s']} tokens/s, last loss {record['final_loss']}, load {load:.2f}"
    )
    record["sets"] = evaluate_sets(str(result.checkpoint), sets, preset["max_completion_length"])
    print(f"# load average at the end {os.getloadavg()[0]:.2f}; checkpoint {result.checkpoint}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def board_sets(args: argparse.Namespace, agents: list[int], sizes: list[int]) -> tuple[dict[int, list], list]:
    """The held-out sets (per agent count) and the training boards, disjoint from them by board hash."""
    extra = [int(s) for s in args.report_sizes.split(",") if s]
    t0 = time.perf_counter()
    sets = held_out_sets([int(a) for a in args.eval_agents.split(",")], args.per_cell, max([8, *extra]))
    exclude = frozenset(i.board_hash() for s in sets.values() for i in s)
    train = training_boards(agents, sizes, args.samples, args.seed, exclude, args.holes)
    print(
        f"# {len(train)} training boards ({agents} agents, sizes {sizes}), held-out "
        f"{ {k: len(v) for k, v in sets.items()} }, generated in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return sets, train


def warm_start_preset(args: argparse.Namespace) -> dict[str, Any]:
    """The SFT preset with the options that change it (``--sampling``, ``--batch-size``, ...)."""
    preset = load_preset(args.preset, "sft").model_dump(mode="json")
    preset["sft"].update(disable_tqdm=True, include_num_input_tokens_seen="non_padding")
    if args.sampling:
        preset["sft"]["train_sampling_strategy"] = args.sampling
    if args.batch_size:
        preset["sft"]["per_device_train_batch_size"] = args.batch_size
    if args.length_groups:
        preset["length_group_batches"] = args.length_groups
    if args.max_completion_length:
        preset["max_completion_length"] = args.max_completion_length
    if args.save_every:
        preset["sft"].update(save_strategy="steps", save_steps=args.save_every, save_only_model=True)
    return preset


def warm_start(
    args: argparse.Namespace, policy: Path, out: Path, train: list, preset: dict[str, Any]
) -> tuple[Any, Any]:
    """The fresh policy trained on ``train`` in ``out/sft``: the trainer's result and its budget callback
    (when it started, the tokens it saw)."""
    from transformers import TrainerCallback

    from envengineer.training.sft import sft

    class Budget(TrainerCallback):
        """Stop when ``--minutes`` of training time are spent or at ``--stop-at-step``; count the tokens."""

        def __init__(self) -> None:
            self.start = 0.0
            self.tokens = 0

        def on_train_begin(self, targs, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            self.tokens = int(state.num_input_tokens_seen or 0)
            out_of_time = time.perf_counter() - self.start >= args.minutes * 60
            if out_of_time or 0 < args.stop_at_step <= state.global_step:
                control.should_training_stop = True

    budget = Budget()
    result = sft(
        str(policy),
        train,
        out_dir=out / "sft",
        preset=preset,
        seed=args.seed,
        max_steps=args.steps,
        callbacks=[budget],
    )
    return result, budget


def evaluate_sets(checkpoint: str, sets: dict[int, list], max_tokens: int) -> dict[int, dict[str, Any]]:
    """Each held-out set answered greedily by the checkpoint, beside the scripted greedy heuristic, with the
    rates printed per size (two agents also get ``common.diagnostic``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)  # to count the answers' tokens
    out: dict[int, dict[str, Any]] = {}
    for k, instances in sets.items():
        t1 = time.perf_counter()
        texts = answer(checkpoint, instances, max_tokens)
        lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        policy_score = size_rates(instances, texts)
        rng = np.random.default_rng(0)
        greedy = size_rates(instances, [respond("greedy", i, rng) for i in instances])
        out[k] = {
            "policy": policy_score,
            "greedy": greedy,
            "mean_completion_tokens": round(float(np.mean(lengths)), 1),
        }
        if k == 2:  # the two causes apart: its own first line, and coordination (common.diagnostic)
            diag = diagnostic(checkpoint, instances, texts, max_tokens)
            out[k]["diagnostic"] = diag
            print(
                "  diagnostic (boards, valid, optimal): "
                + json.dumps({name: (d["boards"], d["valid"], d["optimal"]) for name, d in diag.items()})
            )
        out[k]["eval_seconds"] = round(time.perf_counter() - t1, 1)
        _print_set(k, instances, policy_score, greedy, lengths)
    return out


def _print_set(k: int, instances: list, policy_score: dict, greedy: dict, lengths: list[int]) -> None:
    head, g = policy_score["sizes_3_8"], greedy["sizes_3_8"]
    print(
        f"\n{k} agent(s), {len(instances)} boards: valid {head['valid']} / optimal {head['optimal']} "
        f"(sizes 3-6 {policy_score['sizes_3_6']['valid']}, 7-8 {policy_score['sizes_7_8']['valid']}); "
        f"greedy {g['valid']} / {g['optimal']}; {np.mean(lengths):.0f} tokens per answer"
    )
    for n, row in policy_score["by_size"].items():
        print(
            f"  {n}x{n}: {row['valid']:5.1f} / {row['optimal']:5.1f}  greedy "
            f"{greedy['by_size'][n]['valid']:5.1f}  failures {row['failures']}"
        )


if __name__ == "__main__":
    sys.exit(main())
