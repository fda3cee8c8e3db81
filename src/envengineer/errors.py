"""The project's exception hierarchy: one base class, messages that say what to change.

:func:`describe_error` turns any exception into the one-line message and exit code a command gives.
"""

from __future__ import annotations

import gzip
import zlib


class EnvEngineerError(Exception):
    """Base class of every error the project raises on purpose."""


class InstanceFormatError(EnvEngineerError, ValueError):
    """An instance (or a file of instances) does not follow the documented format."""


class ConfigError(EnvEngineerError, ValueError):
    """A configuration file or value is out of its legal space."""


class SolverBudgetExceeded(EnvEngineerError):
    """The exact solver gave up within its node budget; the instance is neither solved nor proven hard."""


class UnsolvableInstance(EnvEngineerError):
    """The instance has no conflict-free plan (e.g. an agent cannot reach its goal)."""


class GenerationError(EnvEngineerError):
    """The generator could not produce an instance that meets the requested targets within its budget."""


class UndecidedDraw(GenerationError):
    """A set whose draws must all be decided (benchmark v2) met a draw the solver could neither solve nor
    prove unsolvable within the generous budget; the message names the draw."""


# -- one line per error ----------------------------------------------------------------------------------
#: Longest message the boundary prints for an error it did not raise itself (one line).
_MAX_MESSAGE = 300


def describe_error(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code the command line gives for ``exc``.

    Input problems (the project's own errors, decoding, parsing, OS errors) exit with 2; anything else is
    an internal error (exit 1) whose message says how to see the traceback.

    >>> describe_error(IsADirectoryError(21, "Is a directory", "runs"))
    ('runs: is a directory, not a file', 2)
    """
    if isinstance(exc, EnvEngineerError):
        return str(exc), 2
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"the input is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at offset "
            f"{exc.start}); save the file as UTF-8",
            2,
        )
    if isinstance(exc, gzip.BadGzipFile):
        return f"a .gz file is not gzip data ({exc}); give the uncompressed file or a real .gz", 2
    if isinstance(exc, (EOFError, zlib.error)):
        return f"a compressed file is truncated or damaged ({exc}); recreate it", 2
    if isinstance(exc, IsADirectoryError):
        return f"{exc.filename}: is a directory, not a file", 2
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", 2
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to read; flatten it", 2
    if isinstance(exc, MemoryError):
        return "out of memory while reading the input; give a smaller file", 2
    if isinstance(exc, (OverflowError, ValueError)):
        return _one_line(f"bad value in the input: {exc}"), 2
    return _one_line(f"internal error {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"), 1


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."
