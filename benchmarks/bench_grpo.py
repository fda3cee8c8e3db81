"""GRPO on the small policy, measured: does a round improve the warm-start, and which settings do?

Two commands:

``warm``   trains one warm-start (``policy init`` + ``sft-small``) on 2- and 3-agent boards and scores it.
``sweep``  runs GRPO variants x seeds from that warm-start and scores each result greedily on a fixed
           held-out validation set; prints per variant the mean gain over the warm-start in valid and
           optimal points with a 95 % bootstrap interval over seeds, plus the sampled diagnostics. The
           runs go in lanes: one process per core at a time, each on its share of the cores as torch
           and BLAS threads (``--lanes 1``: one after another in this process).

The held-out set is benchmark-shaped (``build_validation_set``: wait subsets 25/50/75 %, hole ratio
uniform in [0, 0.5], seeds disjoint from the benchmark): two agents, sizes 3-8, ``--per-cell`` boards per
size and subset (16: 288 boards), and the same set for every variant and seed. Training boards exclude
it by board hash. Decoding for scoring is greedy (the evaluation's temperature 0).

Usage::

    python benchmarks/bench_grpo.py warm --out runs/bench-grpo/warm
    python benchmarks/bench_grpo.py sweep --warm runs/bench-grpo/warm/sft/checkpoint \\
        --variants preset,sparse-drgrpo --seeds 0,1,2 --steps 150 --json runs/bench-grpo/sweep.json
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.loop.intervals import bootstrap_mean
from envengineer.mapf.benchmark import build_validation_set
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round
from envengineer.mapf.instance import Instance
from envengineer.mapf.prompt import build_messages
from envengineer.mapf.validator import validate
from envengineer.sweep.executors import THREAD_VARIABLES, usable_cpus

#: GRPO variants: overrides of the shipped grpo-small preset (top-level keys and the ``grpo:`` section).
VARIANTS: dict[str, dict[str, Any]] = {
    # the preset as shipped before this sweep: graded reward, DAPO loss, std-scaled, temperature 1, lr 1e-4
    "old": {
        "reward_shape": "graded",
        "grpo": {"learning_rate": 1e-4, "temperature": 1.0, "loss_type": "dapo", "scale_rewards": "group"},
        "dynamic_sampling": {"enabled": False},
    },
    # the shipped preset, whatever it is now
    "preset": {},
    # the paper's sparse reward (no format bonus), Dr. GRPO (no per-group std scaling, no length bias)
    "sparse-drgrpo": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none"},
        "dynamic_sampling": {"enabled": False},
    },
    # ... sampled at 0.7: a policy closer to the greedy one that is evaluated
    "sparse-drgrpo-t07": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 0.7, "loss_type": "dr_grpo", "scale_rewards": "none"},
        "dynamic_sampling": {"enabled": False},
    },
    # ... and DAPO's dynamic sampling: zero-variance groups replaced by fresh ones
    "sparse-drgrpo-t07-dyn": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 0.7, "loss_type": "dr_grpo", "scale_rewards": "none"},
        "dynamic_sampling": {"enabled": True, "max_refills": 4},
    },
    "sparse-drgrpo-t07-dyn-lr3e-4": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 3e-4, "temperature": 0.7, "loss_type": "dr_grpo", "scale_rewards": "none"},
        "dynamic_sampling": {"enabled": True, "max_refills": 4},
    },
    # ... anchored to the round's starting policy by a KL penalty (TRL keeps a reference copy)
    "sparse-drgrpo-beta": {
        "reward_shape": "sparse",
        "grpo": {
            "learning_rate": 1e-4,
            "temperature": 1.0,
            "loss_type": "dr_grpo",
            "scale_rewards": "none",
            "beta": 0.04,
        },
        "dynamic_sampling": {"enabled": False},
    },
    # four times the prompts per step (32 x 8): a less noisy gradient for about the same wall time per step
    "big-lr1e-4": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "per_device_train_batch_size": 256},
        "dynamic_sampling": {"enabled": False},
    },
    "big-lr3e-5": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 3e-5, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "per_device_train_batch_size": 256},
        "dynamic_sampling": {"enabled": False},
    },
    # lower learning rates with a short warm-up: Adam's first steps move every weight by about the rate,
    # whatever the gradient's signal-to-noise (10 steps at 1e-4 already cost 2.8 optimal points)
    "lr3e-5": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 3e-5, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "warmup_steps": 10},
        "dynamic_sampling": {"enabled": False},
    },
    "lr3e-5-t07": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 3e-5, "temperature": 0.7, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "warmup_steps": 10},
        "dynamic_sampling": {"enabled": False},
    },
    "lr1e-5-t07": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-5, "temperature": 0.7, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "warmup_steps": 10},
        "dynamic_sampling": {"enabled": False},
    },
    # many small steps: the seeds' spread of where the weights drift shrinks only with the number of samples
    # (the drift's signal-to-noise ratio does not depend on the learning rate), so a long round at a low
    # rate, with or without a KL anchor that pulls the noise back towards the warm-start
    "long-lr2e-5": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 2e-5, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "warmup_steps": 20},
        "dynamic_sampling": {"enabled": False},
    },
    "long-lr2e-5-beta": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 2e-5, "temperature": 1.0, "loss_type": "dr_grpo", "scale_rewards": "none",
                 "warmup_steps": 20, "beta": 0.04},
        "dynamic_sampling": {"enabled": False},
    },
    "sparse-dapo-t07-dyn": {
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 0.7, "loss_type": "dapo", "scale_rewards": "group"},
        "dynamic_sampling": {"enabled": True, "max_refills": 4},
    },
}


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
    s.add_argument("--warm", type=Path, required=True, help="the warm-start checkpoint folder")
    s.add_argument("--variants", default="old,sparse-drgrpo")
    s.add_argument("--seeds", default="0,1,2")
    s.add_argument("--steps", type=int, default=150)
    s.add_argument("--sizes", default="3,4,5,6,7,8", help="training sizes (uniform data ratio)")
    s.add_argument("--hole-ratio", type=float, default=0.25)
    s.add_argument("--wait-ratio", type=float, default=0.5)
    s.add_argument("--out", type=Path, default=Path("runs/bench-grpo"))
    s.add_argument("--json", type=Path, default=None)
    s.add_argument(
        "--lanes",
        type=int,
        default=0,
        help="runs at once, each in its own process (0: one per core; 1: one after another in this process)",
    )
    for q in (w, s):
        q.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and subset")
        q.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t = sub.add_parser("table", help="the sweep table of several --json files (runs in parallel processes)")
    t.add_argument("files", type=Path, nargs="+")
    return p.parse_args(argv)


def held_out(per_cell: int, agents: int = 2, max_size: int = 8) -> list[Instance]:
    """The fixed held-out set: ``agents`` agents, sizes ``agents``..``max_size`` (min 3), 3 wait subsets."""
    return build_validation_set(per_cell, agents=(agents,), min_size=3, max_size=max_size, workers=1)


def answer(model: str, instances: list[Instance], max_new_tokens: int = 200) -> list[str]:
    """Greedy answers of a checkpoint, in the compact prompt style the small policy records."""
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    backend = HFBackend(model, device="cpu")
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    texts: list[str] = []
    for lo in range(0, len(instances), 64):
        conversations = [build_messages(i, style="compact") for i in instances[lo : lo + 64]]
        texts += [c.text for c in backend.generate(conversations, params)]
    return texts


def score(instances: list[Instance], texts: list[str]) -> dict[str, Any]:
    """Per-board valid/optimal flags and the rates per size."""
    verdicts = [validate(i, t) for i, t in zip(instances, texts, strict=True)]
    valid = np.array([v.valid for v in verdicts], dtype=float)
    optimal = np.array([v.optimal for v in verdicts], dtype=float)
    sizes = np.array([i.size for i in instances])
    per_size = {int(n): round(100 * float(valid[sizes == n].mean()), 1) for n in sorted(set(sizes.tolist()))}
    return {
        "valid": valid,
        "optimal": optimal,
        "valid_pct": round(100 * float(valid.mean()), 2),
        "optimal_pct": round(100 * float(optimal.mean()), 2),
        "valid_by_size": per_size,
    }


def cmd_warm(args: argparse.Namespace) -> int:
    from envengineer.models.small_policy import init_policy
    from envengineer.training.sft import sft

    agents = [int(a) for a in args.agents.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    validation = held_out(args.per_cell)
    exclude = frozenset(i.board_hash() for i in validation)
    train: list[Instance] = []
    for k, a in enumerate(agents):
        config = RoundConfig.model_validate(
            {
                "sizes": {
                    n: {"data_ratio": 1.0, "hole_ratio": 0.25, "wait_ratio": 0.5} for n in sizes if n >= a
                },
                "num_agents": a,
                "num_samples": args.samples // len(agents),
            }
        )
        train += generate_round(config, args.seed + k, split="train", exclude=exclude)
    np.random.default_rng(args.seed).shuffle(train)  # mix agent counts within every batch
    policy = init_policy(args.out / "policy", size=args.size, seed=args.seed, overwrite=True)
    t0 = time.perf_counter()
    result = sft(
        str(policy), train, out_dir=args.out / "sft", preset="sft-small", seed=args.seed, max_steps=args.steps
    )
    minutes = (time.perf_counter() - t0) / 60
    two = score(validation, answer(str(result.checkpoint), validation))
    three_set = held_out(max(1, args.per_cell // 2), agents=3)
    three = score(three_set, answer(str(result.checkpoint), three_set, max_new_tokens=300))
    small = [i for i in validation if i.size <= 6]
    small_score = score(small, answer(str(result.checkpoint), small))
    record = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "minutes": round(minutes, 2),
        "checkpoint": str(result.checkpoint),
        "two_agents": _public(two),
        "two_agents_sizes_3_6": _public(small_score),
        "three_agents": _public(three),
    }
    print(json.dumps(record, indent=2))
    (args.out / "warm.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if getattr(args, "threads", 0):
        import torch

        torch.set_num_threads(args.threads)
    return {"warm": cmd_warm, "sweep": cmd_sweep, "table": cmd_table}[args.command](args)


def variant_preset(name: str, steps: int) -> dict[str, Any]:
    """The grpo-small preset with a variant's overrides, ``steps`` optimizer steps and a light probe."""
    from envengineer.training.presets import load_preset

    preset = load_preset("grpo-small", "grpo").model_dump(mode="json")
    overrides = VARIANTS[name]
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(preset.get(key), dict):
            preset[key] = {**preset[key], **value}
        else:
            preset[key] = value
    preset["grpo"].update(max_steps=steps, report_to="none", disable_tqdm=True, logging_steps=10)
    preset["probe"] = {**preset["probe"], "every": max(steps // 3, 1), "per_cell": 1}
    return preset


def train_data(
    prompts: int, sizes: list[int], hole: float, wait: float, seed: int, exclude: frozenset[str]
) -> list:
    """``prompts`` two-agent training boards over ``sizes`` (uniform data ratio)."""
    config = RoundConfig.model_validate(
        {
            "sizes": {n: {"data_ratio": 1.0, "hole_ratio": hole, "wait_ratio": wait} for n in sizes},
            "num_agents": 2,
            "num_samples": prompts,
        }
    )
    return generate_round(config, 1000 + seed, split="train", exclude=exclude)


def run_one(
    args: argparse.Namespace, variant: str, seed: int, validation: list, warm: dict
) -> dict[str, Any]:
    from envengineer.training.grpo import train_round

    exclude = frozenset(i.board_hash() for i in validation)
    sizes = [int(s) for s in args.sizes.split(",")]
    preset = variant_preset(variant, args.steps)
    per_step = preset["grpo"]["per_device_train_batch_size"] // preset["grpo"]["num_generations"]
    instances = train_data(args.steps * per_step, sizes, args.hole_ratio, args.wait_ratio, seed, exclude)
    out = args.out / f"{variant}-s{seed}"
    t0 = time.perf_counter()
    result = train_round(str(args.warm), instances, out_dir=out, preset=preset, seed=seed)
    minutes = (time.perf_counter() - t0) / 60
    after = score(validation, answer(str(result.checkpoint), validation))
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
    warm = score(validation, answer(str(args.warm), validation))
    print(
        f"# {len(validation)} held-out boards; warm-start {args.warm}: valid {warm['valid_pct']} % "
        f"optimal {warm['optimal_pct']} % by size {warm['valid_by_size']}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    jobs = [(variant, seed) for variant in variants for seed in seeds]
    for row in finished_runs(args, jobs, validation, warm):
        runs.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("probe", "sampled")}), flush=True)
        if args.json:
            record = {
                "args": {k: str(v) for k, v in vars(args).items()},
                "warm": _public(warm),
                "runs": runs,
            }
            args.json.write_text(json.dumps(record, indent=2) + "\n")
    print_table(runs, variants)
    return 0


def finished_runs(
    args: argparse.Namespace, jobs: list[tuple[str, int]], validation: list, warm: dict
) -> Iterator[dict[str, Any]]:
    """The rows of the (variant, seed) runs as they finish, in lanes of processes or in this process.

    Two torch processes that each take every core lose most of their time to each other; one thread per
    core each runs them side by side at nearly full speed.
    """
    lanes = min(args.lanes or usable_cpus(), len(jobs))
    if lanes <= 1:
        for variant, seed in jobs:
            yield run_one(args, variant, seed, validation, warm)
        return
    threads = args.threads or max(1, usable_cpus() // lanes)
    # the lanes' processes start with this environment (numpy loads OpenBLAS before any initializer runs);
    # this process has set up its own thread pools already
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    spawn = multiprocessing.get_context("spawn")  # fresh interpreters: no torch state forked mid-use
    print(f"# {len(jobs)} runs in {lanes} lanes of {threads} thread(s)", flush=True)
    with ProcessPoolExecutor(lanes, mp_context=spawn, initializer=_start_lane, initargs=(threads,)) as pool:
        futures = [pool.submit(run_one, args, variant, seed, validation, warm) for variant, seed in jobs]
        for future in as_completed(futures):
            yield future.result()


def _start_lane(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.WARNING)


def print_table(runs: list[dict[str, Any]], variants: list[str]) -> None:
    """Per variant: mean rates, the mean gains with a 95 % bootstrap interval over seeds, minutes per run."""
    print(
        "\n| variant | seeds | valid % | optimal % | gain valid (95 % CI) | gain optimal (95 % CI) "
        "| min/run |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in variants:
        rows = [r for r in runs if r["variant"] == variant]
        gv = _ci(bootstrap_mean([r["gain_valid"] for r in rows]))
        go = _ci(bootstrap_mean([r["gain_optimal"] for r in rows]))
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


def _ci(b: dict[str, Any]) -> str:
    """A bootstrap mean as ``+m [low, high]`` (no interval from a single seed)."""
    if b["low"] is None:
        return f"{b['mean']:+.1f} [one seed]"
    return f"{b['mean']:+.1f} [{b['low']:+.1f}, {b['high']:+.1f}]"


def _public(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in ("valid", "optimal")}


if __name__ == "__main__":
    sys.exit(main())
