"""Evaluation throughput: responses per second, tokens per second and peak memory of ``evaluate``.

Evaluates a model (default: the embedded SmolLM2-135M-Instruct through the ``hf`` backend) on a
stratified slice of N instances (default: the validation set; every (agents, size, subset) cell is
covered before any repeats) and prints:

* responses per second and generated tokens per second, at the stated batch size and token budget,
* mean prompt tokens and mean completion tokens per response, and the prefill time of the longest batch,
* model load time (and the one-time conversion of the embedded model, when it happened in this run),
* the process's CPU time over the evaluation and its share of the wall time per thread (below 1 when
  other jobs share the cores: the wall-clock figures are then slower than on an idle machine),
* peak resident memory of the process (RSS, from ``getrusage``) and, on a GPU, peak CUDA memory,
* how many responses parse, are valid and are optimal (for orientation; 135M parameters solve nothing).

Usage::

    python benchmarks/bench_eval.py                              # CPU, embedded model, 32 instances, batch 8
    python benchmarks/bench_eval.py --n 64 --batch-size 16 --max-new-tokens 256 --json bench_eval.json
    python benchmarks/bench_eval.py --device cuda --n 256 --batch-size 64   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envengineer.evaluation import evaluate, stratified_subset
from envengineer.mapf.instance import Instance, load_instances
from envengineer.models import SamplingParams, load_backend
from envengineer.models import embedded as emb


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model folder or hub id (default: the embedded model)")
    p.add_argument(
        "--set",
        dest="eval_set",
        default="validation",
        help="validation (default), benchmark, or an instance file",
    )
    p.add_argument("--n", type=int, default=32, help="instances to evaluate (default 32)")
    p.add_argument("--batch-size", type=int, default=8, help="conversations per generate call (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="token budget per response (default 128)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    return p.parse_args(argv)


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def load_set(name: str) -> tuple[list[Instance], str]:
    """The instances to sample from, and a note on where they came from."""
    from envengineer.errors import EnvEngineerError
    from envengineer.mapf import benchmark

    if name == "benchmark":
        return benchmark.load_benchmark(), "benchmark"
    if name != "validation":
        return load_instances(name), name
    loader = getattr(benchmark, "load_validation_set", None)
    try:
        if loader is not None:
            return loader(), "validation set"
        return benchmark.build_validation_set(), "validation set"
    except EnvEngineerError as exc:  # no packaged benchmark to exclude yet: same shape, one per cell
        logging.warning("%s; using a benchmark-shaped set of 1 instance per cell and subset instead", exc)
        built = benchmark.build_set(seed=benchmark.VALIDATION_SEED, split="validation", per_cell=1, workers=1)
        return built, "benchmark-shaped validation split, 1 per cell and subset"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    converted_before = emb.is_converted()
    t0 = time.perf_counter()
    model = emb.resolve_model(args.model)
    t_resolve = time.perf_counter() - t0
    t0 = time.perf_counter()
    options: dict[str, Any] = {"device": args.device} if args.device else {}
    backend = load_backend("hf", model, **options)
    t_load = time.perf_counter() - t0
    loading = {
        "model_load_seconds": round(t_load, 2),
        "embedded_conversion_seconds": round(t_resolve, 2)
        if not converted_before and args.model is None
        else None,
    }

    pool, source = load_set(args.eval_set)
    instances = stratified_subset(pool, args.n)
    run = timed_evaluation(args, backend, instances)
    figures = figures_of(args, backend.name, len(instances), source, run, loading)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


def timed_evaluation(args: argparse.Namespace, backend: Any, instances: list[Instance]) -> dict[str, Any]:
    """The prompts' tokens, the prefill of the longest batch alone, then ``evaluate`` timed on the wall
    clock and the process's CPU clock; its report."""
    import torch

    prompt_tokens = [
        len(backend.tokenizer(backend.render(m), add_special_tokens=False)["input_ids"])
        for m in _messages(instances)
    ]
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    device = str(next(backend.model.parameters()).device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    # Prefill alone: the first batch evaluate() sends (the longest prompts), with a budget of one token.
    by_length = sorted(_messages(instances), key=lambda m: -sum(len(x["content"]) for x in m))
    first = by_length[: args.batch_size]
    t0 = time.perf_counter()
    backend.generate(first, SamplingParams(temperature=0, max_new_tokens=1))
    prefill = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as out:
        t0, c0 = time.perf_counter(), time.process_time()
        report = evaluate(
            backend,
            instances,
            out_dir=out,
            params=params,
            batch_size=args.batch_size,
            resume=False,
            progress=False,
        )
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
    return {
        "prompt_tokens": prompt_tokens,
        "device": device,
        "prefill": prefill,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "report": report,
    }


def figures_of(
    args: argparse.Namespace,
    model: str,
    n: int,
    source: str,
    run: dict[str, Any],
    loading: dict[str, Any],
) -> dict[str, Any]:
    """What the script prints and writes, in its order: the set-up, the rates, the memory, the verdicts."""
    import torch

    report, device, seconds, cpu_seconds = run["report"], run["device"], run["seconds"], run["cpu_seconds"]
    summary = report.summary()
    tokens = sum(report.tokens.values())
    failures: dict[str, int] = {}
    for v in report.verdicts.values():
        key = v.failure or "optimal"
        failures[key] = failures.get(key, 0) + 1
    return {
        "model": model,
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "instances": n,
        "set": source,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "cpu_share": round(cpu_seconds / seconds / torch.get_num_threads(), 2) if device == "cpu" else None,
        "responses_per_second": round(n / seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1),
        "mean_completion_tokens": summary["mean_tokens"],
        "mean_prompt_tokens": round(sum(run["prompt_tokens"]) / len(run["prompt_tokens"]), 1),
        "prefill_seconds_longest_batch": round(run["prefill"], 2),
        **loading,
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_cuda_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1)
        if device.startswith("cuda")
        else None,
        "valid_pct": summary["valid"],
        "optimal_pct": summary["optimal"],
        "verdicts": dict(sorted(failures.items())),
    }


def _messages(instances: list[Instance]) -> list[list[dict[str, str]]]:
    from envengineer.mapf.prompt import build_messages

    return [build_messages(inst) for inst in instances]


if __name__ == "__main__":
    sys.exit(main())
