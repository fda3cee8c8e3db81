"""The ``eval`` command: evaluate a model or a scripted policy on the benchmark, validation set or a file."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

from envengineer.cli.options import add_out, add_seed, command
from envengineer.errors import ConfigError, InstanceFormatError

log = logging.getLogger(__name__)

_BACKENDS = ("hf", "vllm", "openai", "scripted")
#: Which backend each backend-specific flag applies to (flag dest -> (option name, backends)).
_BACKEND_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "base_url": ("base_url", ("openai",)),
    "api_key_env": ("api_key_env", ("openai",)),
    "concurrency": ("concurrency", ("openai",)),
    "timeout": ("timeout", ("openai",)),
    "max_retries": ("max_retries", ("openai",)),
    "deadline": ("deadline", ("openai",)),
    "max_response_bytes": ("max_response_bytes", ("openai",)),
    "device": ("device", ("hf",)),
    "dtype": ("dtype", ("hf", "vllm")),
    "tensor_parallel_size": ("tensor_parallel_size", ("vllm",)),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "eval",
        cmd_eval,
        help="evaluate a model on the benchmark, the validation set or an instance file",
        description="Ask a model about every instance, write OUT/responses.jsonl and OUT/scores.json (the "
        "JSON `envengineer score --json` writes) and print the paper's table. An interrupted run resumes "
        "where it stopped. Without --model, the hf backend uses the embedded SmolLM2-135M-Instruct.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="hf/vllm: local folder, hub id or 'embedded' (default); openai: the served model name; "
        "scripted: optimal (default), greedy or random",
    )
    p.add_argument("--backend", choices=_BACKENDS, default="hf", help="model backend (default hf)")
    p.add_argument(
        "--set",
        dest="eval_set",
        default="benchmark",
        help="'benchmark' (3,150 instances of v2, default; 'benchmark-v1' for v1), 'validation', or an "
        "instance file (.jsonl)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="evaluate N instances, a stratified slice that covers every (agents, size, subset) cell",
    )
    add_out(p, "output folder (default runs/eval/SET-BACKEND-MODEL)", default=None)
    p.add_argument("--batch-size", type=int, default=8, help="conversations per generate call (default 8)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="token budget per response (default 512; for a small policy, sft-small's answer budget, which "
        "its longest answers fit: 5 agents on 10x10)",
    )
    p.add_argument(
        "--temperature", type=float, default=0.7, help="sampling temperature, 0 = greedy (default 0.7)"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    add_seed(p, "sampling seed (default 0)")
    p.add_argument(
        "--thinking",
        choices=("on", "off"),
        default=None,
        help="Qwen3's thinking switch (hf, vllm, openai to a vLLM server); default: the template's",
    )
    p.add_argument(
        "--no-resume", action="store_true", help="start afresh instead of resuming OUT/responses.jsonl"
    )
    _add_openai_options(p)
    _add_local_options(p)


def _add_openai_options(p: argparse.ArgumentParser) -> None:
    """The options of the openai backend, in their own group of the help."""
    g = p.add_argument_group("openai backend")
    g.add_argument("--base-url", default=None, help="endpoint URL, e.g. http://localhost:8000/v1")
    g.add_argument(
        "--api-key-env", default=None, help="environment variable holding the API key (OPENAI_API_KEY)"
    )
    g.add_argument("--concurrency", type=int, default=None, help="requests in flight (default 8)")
    g.add_argument(
        "--timeout", type=float, default=None, help="seconds one connect or read may wait (default 120)"
    )
    g.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds one request may take in all, retries included (default 600)",
    )
    g.add_argument(
        "--max-response-bytes",
        type=int,
        default=None,
        help="largest response body, after decompression (default 8 MiB)",
    )
    g.add_argument("--max-retries", type=int, default=None, help="retries on 429/5xx/timeouts (default 5)")


def _add_local_options(p: argparse.ArgumentParser) -> None:
    """The options of the hf and vllm backends, in their own group of the help."""
    g = p.add_argument_group("hf / vllm backends")
    g.add_argument("--device", default=None, help="hf: cpu, cuda, cuda:1 (default: cuda when available)")
    g.add_argument(
        "--dtype", default=None, help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16, float16"
    )
    g.add_argument("--tensor-parallel-size", type=int, default=None, help="vllm: GPUs per model")
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="hf on CPU: torch threads (default: torch's choice; 1 is fastest on a CPU other jobs keep busy)",
    )


def load_eval_set(name: str) -> list[Any]:
    """The instances named by ``--set``: ``benchmark`` (v2; ``benchmark-v1`` for v1), ``validation`` or a
    path to an instance file."""
    from envengineer.mapf import benchmark
    from envengineer.mapf.instance import load_instances

    version = benchmark.benchmark_name(name)
    if version is not None:
        return benchmark.load_benchmark(version)
    if name == "validation":
        loader = getattr(benchmark, "load_validation_set", None)
        if loader is not None:
            return loader()
        log.info("building the validation set (deterministic; a few seconds)")
        return benchmark.build_validation_set()
    path = Path(name)
    if not path.exists():
        raise InstanceFormatError(
            f"--set {name!r}: no such file; use 'benchmark' ('benchmark-v1' for v1), 'validation' or an "
            "instance file"
        )
    return load_instances(path)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for dest, (option, backends) in _BACKEND_FLAGS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if args.backend not in backends:
            flag = "--" + dest.replace("_", "-")
            raise ConfigError(f"{flag} applies to --backend {' or '.join(backends)}, not {args.backend}")
        options[option] = value
    if args.thinking is not None:
        if args.backend == "scripted":
            raise ConfigError("--thinking does not apply to --backend scripted")
        options["enable_thinking"] = args.thinking == "on"
    return options


def _default_out(args: argparse.Namespace) -> Path:
    model = args.model or ("optimal" if args.backend == "scripted" else "embedded")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name if Path(model).exists() else model).strip("_")
    set_name = Path(args.eval_set).stem if args.eval_set not in ("benchmark", "validation") else args.eval_set
    suffix = f"-n{args.limit}" if args.limit is not None else ""
    return Path("runs") / "eval" / f"{set_name}{suffix}-{args.backend}-{slug}"


def answer_budget(args: argparse.Namespace) -> int:
    """``--max-new-tokens``, else 512, or for a small policy the answer budget of ``sft-small`` (its
    scratchpad answers run to 625 tokens for 5 agents on 10x10 on benchmark v2, past 512)."""
    from envengineer.models.small_policy import is_small_policy

    if args.max_new_tokens is not None:
        return args.max_new_tokens
    if args.backend == "hf" and is_small_policy(args.model):
        from envengineer.training.presets import load_preset

        return load_preset("sft-small", "sft").max_completion_length
    return 512


def cmd_eval(args: argparse.Namespace) -> int:
    from envengineer.evaluation import evaluate, stratified_subset
    from envengineer.models import SamplingParams, load_backend

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    options = _options(args)
    if args.threads is not None:
        if args.backend != "hf" or args.threads < 1:
            raise ConfigError(
                f"--threads takes a positive count and applies to --backend hf, got {args.threads}"
            )
        import torch

        torch.set_num_threads(args.threads)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=answer_budget(args), seed=args.seed
    )
    instances = stratified_subset(load_eval_set(args.eval_set), args.limit)
    unsolved = [i.id for i in instances if not i.solved]
    if unsolved:
        raise InstanceFormatError(
            f"{len(unsolved)} instances have no optima (e.g. {unsolved[0]!r}); run "
            f"`envengineer solve {args.eval_set} -o SOLVED.jsonl` and evaluate that file"
        )
    if args.backend == "scripted":
        options["instances"] = instances
    out = args.out or _default_out(args)
    backend = load_backend(args.backend, args.model, **options)
    print(f"evaluating {backend.name} on {len(instances)} instances of {args.eval_set} -> {out}")
    report = evaluate(
        backend, instances, out_dir=out, params=params, batch_size=args.batch_size, resume=not args.no_resume
    )
    print(report.markdown())
    summary = report.summary()
    info = _read_info(out)
    errors = info.get("errors", 0)
    tokens = summary.get("mean_tokens")
    print(f"mean tokens per response: {tokens if tokens is not None else 'n/a'}; failed requests: {errors}")
    print(f"wrote {out / 'responses.jsonl'} and {out / 'scores.json'}")
    if instances and errors == len(instances):
        print("every request failed; see the error field in responses.jsonl")
        return 1
    return 0


def _read_info(out: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads((out / "eval_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
