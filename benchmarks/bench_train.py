"""Seconds per GRPO step, peak memory, and the share of a step spent outside the model.

Runs a few real GRPO steps (TRL ``GRPOTrainer``) with a preset (default: the CPU preset and the embedded
SmolLM2-135M) on a freshly generated round and prints:

* seconds per optimizer step (mean and median; the first step, which warms up allocators, reported apart),
* peak resident memory of the process (RSS, from ``getrusage``) and, on a GPU, peak CUDA memory,
* the share of the round spent outside the model: instance generation (generator + exact solver), the
  prompt dataset, and the reward calls (parser + validator), against generation + dataset + training time.
  The issue's target is under 2 % on CPU.

The round has exactly as many instances as the steps consume, so generation time is charged at the rate
a full round would pay per step.

Usage::

    python benchmarks/bench_train.py                       # CPU preset, embedded model, 4 steps
    python benchmarks/bench_train.py --steps 8 --json bench.json
    python benchmarks/bench_train.py --preset grpo-gpu --set use_vllm=false  # embedded model, on a GPU
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envengineer.mapf.config import RoundConfig
from envengineer.training.grpo import resolve_model_path, train_round_from_config
from envengineer.training.presets import load_preset
from envengineer.yamlio import load_yaml


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="grpo-cpu", help="GRPO preset name or file (default grpo-cpu)")
    p.add_argument("--model", default=None, help="hub id or local folder (default: the embedded model)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps to time (default 4)")
    p.add_argument("--sizes", default="3,4,5", help="map sizes of the round, equal shares (default 3,4,5)")
    p.add_argument("--hole-ratio", type=float, default=0.2)
    p.add_argument("--wait-ratio", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice); 1 is faster on a machine shared with other jobs",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a grpo: option")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    return p.parse_args(argv)


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    preset = preset_of(args)
    options = preset.build_config(output_dir=tempfile.mkdtemp(), max_steps=args.steps)
    completions_per_step = (
        options.per_device_train_batch_size * options.gradient_accumulation_steps * options.world_size
    )
    prompts_per_step = max(1, completions_per_step // options.num_generations)
    samples = args.steps * prompts_per_step
    round_config = round_of(args, samples)

    t0 = time.perf_counter()
    model_path = resolve_model_path(args.model)
    resolve_s = time.perf_counter() - t0
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_train_"))
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.reset_peak_memory_stats()

    result = train_round_from_config(
        model_path, round_config, out_dir=out, seed=args.seed, preset=preset, max_steps=args.steps
    )
    timing = result.metrics["timing"]
    steps = timing["step_s"]
    later = steps[1:] or steps
    figures: dict[str, Any] = {
        "preset": args.preset,
        "overrides": args.set,
        "model": model_path,
        "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "steps": result.steps,
        "instances": samples,
        "prompts_per_step": prompts_per_step,
        "completions_per_step": completions_per_step,
        "max_completion_length": preset.max_completion_length,
        "lora": preset.lora.enabled,
        "reward_shape": preset.reward_shape,
        "model_resolve_s": round(resolve_s, 3),
        "first_step_s": round(steps[0], 3) if steps else None,
        "step_s_mean": round(sum(later) / len(later), 3) if later else None,
        "step_s_median": round(statistics.median(later), 3) if later else None,
        "generate_s": timing["generate_s"],
        "dataset_s": timing["dataset_s"],
        "reward_s": timing["reward_s"],
        "reward_calls": timing["reward_calls"],
        "train_s": timing["train_s"],
        "outside_model_share_pct": round(100 * timing["outside_model_share"], 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_cuda_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if gpu else None,
        "mean_completion_tokens": _mean_logged(result.metrics["log_history"], "completions/mean_length"),
        "run_dir": str(out),
    }
    print_figures(args.preset, model_path, options.num_generations, figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def preset_of(args: argparse.Namespace) -> Any:
    """The GRPO preset with each ``--set KEY=VALUE`` in its ``grpo:`` options."""
    base = load_preset(args.preset, "grpo")
    grpo = dict(base.grpo)
    for item in args.set:
        key, _, value = item.partition("=")
        grpo[key] = load_yaml(value)
    return load_preset({**base.model_dump(mode="json"), "grpo": grpo}, "grpo")


def round_of(args: argparse.Namespace, samples: int) -> RoundConfig:
    """A round of ``samples`` instances over ``--sizes`` in equal shares."""
    sizes = [int(s) for s in args.sizes.split(",")]
    return RoundConfig.model_validate(
        {
            "num_samples": samples,
            "sizes": {
                n: {"data_ratio": 1.0, "hole_ratio": args.hole_ratio, "wait_ratio": args.wait_ratio}
                for n in sizes
            },
        }
    )


def print_figures(preset: str, model_path: str, generations: int, f: dict[str, Any]) -> None:
    cuda = f", peak CUDA {f['peak_cuda_mib']} MiB" if f["peak_cuda_mib"] is not None else ""
    print()
    print(f"GRPO step benchmark: preset {preset}, model {model_path}")
    print(f"  device {f['device']}, torch threads {f['torch_threads']}, cpus {f['cpu_count']}")
    print(
        f"  {f['steps']} steps, {f['completions_per_step']} completions per step "
        f"({f['prompts_per_step']} prompts x {generations}), "
        f"mean completion {f['mean_completion_tokens']} tokens"
    )
    print(
        f"  seconds per step: mean {f['step_s_mean']} / median {f['step_s_median']} "
        f"(first step {f['first_step_s']})"
    )
    print(f"  peak RSS {f['peak_rss_mib']} MiB{cuda}")
    print(
        f"  outside the model: {f['outside_model_share_pct']:.3f}% (generation {f['generate_s']:.3f} s + "
        f"dataset {f['dataset_s']:.3f} s + reward {f['reward_s']:.3f} s over {f['reward_calls']} calls; "
        f"training {f['train_s']:.1f} s)"
    )
    ok = f["outside_model_share_pct"] < 2.0
    print(f"  target < 2%: {'met' if ok else 'NOT met'}")


def _mean_logged(history: list[dict[str, Any]], key: str) -> float | None:
    values = [entry[key] for entry in history if key in entry]
    return round(sum(values) / len(values), 1) if values else None


if __name__ == "__main__":
    sys.exit(main())
