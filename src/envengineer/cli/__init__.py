"""The ``envengineer`` command line: one sub-command module per layer, one error path for all of them.

Each module in this package exposes ``register(subparsers)`` and sets ``func`` on its parsers; a
sub-command returns an exit code (or ``None`` for 0).

The error boundary (:func:`main`): whatever a command meets in its input (a file that is not UTF-8, JSON or
YAML nested too deeply, a number too large to hold, a truncated or fake ``.gz`` file, a path that is a
directory or cannot be written, a value out of its range) ends in one line on stderr,
``envengineer: error: ...``, and exit code 2. An error the project did not foresee is one line too, naming
itself as internal (exit code 1). ``--debug`` (anywhere on the command line, or ``ENVENGINEER_DEBUG=1``)
shows the traceback instead. Log lines and error messages pass through
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
from envengineer.errors import describe_error
from envengineer.sanitize import ScrubFilter, safe_text

# Sub-command modules, in the order `--help` lists them. A module whose optional dependencies are
# missing still registers its commands; they fail with a message naming the extra to install.
_MODULES = (
    "envengineer.cli.testbed",
    "envengineer.cli.eval",
    "envengineer.cli.train",
    "envengineer.cli.teach",
    "envengineer.cli.policy",
    "envengineer.cli.loop",
    "envengineer.cli.branch",
    "envengineer.cli.integrations",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envengineer",
        description="MAPF-FrozenLake testbed and the LLM-as-Environment-Engineer training loop.",
    )
    parser.add_argument("--version", action="version", version=f"envengineer {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error instead of one line (accepted anywhere on the line)",
    )
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
    args_in = list(sys.argv[1:] if argv is None else argv)
    cut = args_in.index("--") if "--" in args_in else len(args_in)
    debug = "--debug" in args_in[:cut] or os.environ.get("ENVENGINEER_DEBUG", "") not in ("", "0")
    args_in = [a for i, a in enumerate(args_in) if not (a == "--debug" and i < cut)]
    parser = build_parser()
    args = parser.parse_args(args_in)
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
    except KeyboardInterrupt:
        print(f"envengineer {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        message, code = describe_error(exc)
        print(f"envengineer: error: {safe_text(message)}", file=sys.stderr)
        return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's final flush finds no broken pipe to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. captured output)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
