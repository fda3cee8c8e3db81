"""``envengineer policy init``: create a small from-scratch policy folder (weights, tokenizer, template).

The folder is an ordinary local model: pass it to ``eval``, ``sft``, ``train`` or an experiment's ``model``.
Every argument is checked before torch is imported (argparse's types, then :func:`init_policy`'s own
checks), so a bad one fails at once. ``--overwrite`` replaces the contents of a model folder only
(:func:`~envengineer.models.small_policy.replaceable_folder`).
"""

from __future__ import annotations

import argparse

from envengineer.cli.options import add_out, command


def register(sub: argparse._SubParsersAction) -> None:
    from envengineer.models.small_policy import DEFAULT_FORMAT, POLICY_FORMATS, POLICY_SIZES

    p = sub.add_parser(
        "policy",
        help="small from-scratch policies (1-20M parameters) that train in minutes on a CPU",
        description="Small Llama-style policies with the testbed's own tokenizer, trained from scratch "
        "through the same sft/train/run commands as any other model.",
    )
    actions = p.add_subparsers(dest="policy_command", metavar="ACTION", help="what to do")
    init = command(
        actions,
        "init",
        cmd_init,
        help="write a freshly initialised policy folder",
        description="Write OUT/config.json, OUT/model.safetensors and the tokenizer with its chat "
        "template. Sizes: "
        + ", ".join(f"{name} (hidden {s.hidden}, {s.layers} layers)" for name, s in POLICY_SIZES.items())
        + ".",
    )
    init.add_argument(
        "--size", choices=sorted(POLICY_SIZES), default="tiny", help="model size (default tiny)"
    )
    add_out(init, "folder to write (new or empty)", required=True)
    init.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the weight initialisation, digits 0-9 in [0, 2**32) as in policy:SIZE@SEED (default 0)",
    )
    init.add_argument(
        "--prompt-style",
        choices=("compact", "full"),
        default="compact",
        help="prompts the policy reads: compact (the board alone, default) or full (rules and format)",
    )
    init.add_argument(
        "--format",
        dest="policy_format",
        choices=list(POLICY_FORMATS),
        default=DEFAULT_FORMAT,
        help=f"how the policy spells cells and what its scratchpad holds (default {DEFAULT_FORMAT}; "
        "docs/models.md has the measured candidates)",
    )
    init.add_argument(
        "--max-length",
        type=_max_length,
        default=2048,
        help="longest prompt + answer in tokens (default 2048)",
    )
    init.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the contents of an existing model folder (a config.json beside plain files only)",
    )
    p.set_defaults(func=lambda args: p.print_help() or 1)


def _seed(text: str) -> int:
    from envengineer.errors import ConfigError
    from envengineer.models.small_policy import parse_seed

    try:
        return parse_seed(text, where="the seed")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_length(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 64 <= int(text) <= 65536:
        raise argparse.ArgumentTypeError(f"must be an integer in [64, 65536], got {text[:20]!r}")
    return int(text)


def cmd_init(args: argparse.Namespace) -> int:
    from envengineer.models.small_policy import init_policy, policy_summary

    folder = init_policy(
        args.out,
        size=args.size,
        seed=args.seed,
        prompt_style=args.prompt_style,
        policy_format=args.policy_format,
        max_length=args.max_length,
        overwrite=args.overwrite,
    )
    print(policy_summary(folder))
    return 0
