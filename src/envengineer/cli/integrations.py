"""Integration commands: export an instance set for other trainers (datasets / Parquet, verl)."""

from __future__ import annotations

import argparse
import time

from envengineer.cli.options import add_output, command


def register(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "export",
        cmd_export,
        help="write an instance set as a Hugging Face dataset / Parquet (or verl's layout)",
        description="Export an instance set with chat-message prompts, the instance, its optima and a split "
        "column: as a Parquet file (OUT ending in .parquet) or a datasets.save_to_disk folder (any other "
        "OUT). An existing OUT is replaced only with --overwrite, and only when it is an exported dataset. "
        "--format verl writes the columns verl's reward manager reads (docs/integrations.md).",
    )
    p.add_argument(
        "source",
        help="'benchmark', 'validation', a round configuration (.yaml/.yml/.json) "
        "or an instance file (.jsonl)",
    )
    add_output(p, "OUT.parquet or a new folder")
    p.add_argument("--format", choices=("hf", "verl"), default="hf", help="column layout (default hf)")
    p.add_argument("--split", default=None, help="value of the split column (default: from the source)")
    p.add_argument("--seed", type=int, default=0, help="data seed of a round configuration (default 0)")
    p.add_argument("--no-system", action="store_true", help="prompts without the system message")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUT.parquet or exported dataset folder"
    )


def cmd_export(args: argparse.Namespace) -> int:
    from envengineer.integrations import hf_datasets, verl

    t0 = time.perf_counter()
    hf_datasets.check_output(args.output, overwrite=args.overwrite)  # before the work, not after it
    instances, split = hf_datasets.resolve_instances(args.source, seed=args.seed)
    split = args.split or split
    build = verl.to_verl_dataset if args.format == "verl" else hf_datasets.to_dataset
    dataset = build(instances, split=split, system=not args.no_system)
    hf_datasets.write_dataset(dataset, args.output, overwrite=args.overwrite)
    print(
        f"wrote {len(instances)} instances ({args.format} layout, split {split!r}) to {args.output} "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return 0
