"""``envengineer policy init``: create a small from-scratch policy folder (weights, tokenizer, template).

The folder is an ordinary local model: pass it to ``eval``, ``sft``, ``train`` or an experiment's ``model``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from envengineer.models.small_policy import POLICY_SIZES

    p = sub.add_parser(
        "policy",
        help="small from-scratch policies (1-20M parameters) that train in minutes on a CPU",
        description="Small Llama-style policies with the testbed's own tokenizer, trained from scratch "
        "through the same sft/train/run commands as any other model.",
    )
    actions = p.add_subparsers(dest="policy_command", metavar="ACTION", help="what to do")
    init = actions.add_parser(
        "init",
        help="write a freshly initialised policy folder",
        description="Write OUT/config.json, OUT/model.safetensors and the tokenizer with its chat "
        "template. Sizes: "
        + ", ".join(f"{name} (hidden {s.hidden}, {s.layers} layers)" for name, s in POLICY_SIZES.items())
        + ".",
    )
    init.add_argument(
        "--size", choices=sorted(POLICY_SIZES), default="tiny", help="model size (default tiny)"
    )
    init.add_argument("--out", type=Path, required=True, help="folder to write (new or empty)")
    init.add_argument("--seed", type=int, default=0, help="seed of the weight initialisation (default 0)")
    init.add_argument(
        "--prompt-style",
        choices=("compact", "full"),
        default="compact",
        help="prompts the policy reads: compact (the board alone, default) or full (rules and format)",
    )
    init.add_argument(
        "--max-length", type=int, default=2048, help="longest prompt + answer in tokens (default 2048)"
    )
    init.add_argument("--overwrite", action="store_true", help="replace a non-empty folder")
    init.set_defaults(func=cmd_init)
    p.set_defaults(func=lambda args: p.print_help() or 1)


def cmd_init(args: argparse.Namespace) -> int:
    from envengineer.models.small_policy import init_policy, policy_summary

    folder = init_policy(
        args.out,
        size=args.size,
        seed=args.seed,
        prompt_style=args.prompt_style,
        max_length=args.max_length,
        overwrite=args.overwrite,
    )
    print(policy_summary(folder))
    return 0
