"""The ``envengineer`` command line: one sub-command module per layer, one error path for all of them.

Each module in this package exposes ``register(subparsers)`` and sets ``func`` on its parsers; a
sub-command returns an exit code (or ``None`` for 0). Errors the project raises on purpose become a
one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from envengineer import __version__
from envengineer.errors import EnvEngineerError

# Sub-command modules, in the order `--help` lists them. A module whose optional dependencies are
# missing still registers its commands; they fail with a message naming the extra to install.
_MODULES = (
    "envengineer.cli.testbed",
    "envengineer.cli.eval",
    "envengineer.cli.train",
    "envengineer.cli.loop",
    "envengineer.cli.integrations",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envengineer",
        description="MAPF-FrozenLake testbed and the LLM-as-Environment-Engineer training loop.",
    )
    parser.add_argument("--version", action="version", version=f"envengineer {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("envengineer"):
                continue  # that layer is not part of this checkout
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except EnvEngineerError as exc:
        print(f"envengineer {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"envengineer {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
