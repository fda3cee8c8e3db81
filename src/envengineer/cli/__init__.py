"""The ``envengineer`` command line: one sub-command module per layer, one error path for all of them.

Each module in this package exposes ``register(subparsers)`` and sets ``func`` on its parsers; a
sub-command returns an exit code (or ``None`` for 0). Errors the project raises on purpose become a
one-line message and exit code 2, never a traceback. Log lines and error messages pass through
:class:`envengineer.sanitize.ScrubFilter` / :func:`~envengineer.sanitize.safe_text`: no secret of the
process is printed.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from envengineer import __version__
from envengineer.errors import EnvEngineerError
from envengineer.sanitize import ScrubFilter, safe_text

# Sub-command modules, in the order `--help` lists them. A module whose optional dependencies are
# missing still registers its commands; they fail with a message naming the extra to install.
_MODULES = (
    "envengineer.cli.testbed",
    "envengineer.cli.eval",
    "envengineer.cli.train",
    "envengineer.cli.policy",
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
    for handler in logging.getLogger().handlers:  # no secret of the process in any log line
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `envengineer show ... | head`: the reader left; stop quietly, as other Unix tools do
        _silence_stdout()
        return 0
    except EnvEngineerError as exc:
        print(f"envengineer {args.command}: error: {safe_text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"envengineer {args.command}: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's final flush finds no broken pipe to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. captured output)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
