"""YAML as data only: no aliases, one-line errors, bounded reprs in messages.

YAML aliases let a few hundred bytes stand for an exponentially large document (a "billion laughs"
file): every later step that walks the expanded data (validation, error formatting) pays for the
expansion. Configuration files, experiments, presets and ``--set`` values never need aliases, so
:func:`load_yaml` refuses them before anything is built, with a one-line message that names the line.
The engineer's proposal parser refuses them the same way.

>>> load_yaml("a: 1\\nb: [2, 3]")
{'a': 1, 'b': [2, 3]}
>>> load_yaml("a: &x [1]\\nb: *x")
Traceback (most recent call last):
...
envengineer.yamlio.YAMLDataError: line 2, column 4: aliases (*name) are not accepted; write the values out
>>> brief(list(range(1000)), 30)
'[0, 1, 2, 3, 4, 5, ...]'
"""

from __future__ import annotations

import reprlib
import sys
from typing import Any

import yaml

from envengineer.errors import ConfigError

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when available
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple = 3, 4, 6, 6
_REPR.maxset, _REPR.maxstring, _REPR.maxother = 6, 40, 40


class YAMLDataError(ConfigError):
    """A YAML text that is not plain data (bad syntax, or aliases)."""


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, refusing aliases; errors are one line (``line L, column C: ...``).

    Raises:
        YAMLDataError: invalid YAML or an alias.
    """
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise YAMLDataError(
                    f"{_where(event.start_mark)}aliases (*name) are not accepted; write the values out"
                )
        return yaml.load(text, Loader=_LOADER)  # the safe constructor: data only
    except YAMLDataError:
        raise
    except yaml.YAMLError as exc:
        raise YAMLDataError(yaml_error_line(exc)) from None
    except ValueError as exc:  # the constructor's int() or date(): a number too long, a date like 2024-13-01
        raise YAMLDataError(_unreadable_value(exc)) from None


def _unreadable_value(exc: ValueError) -> str:
    if "integer string conversion" in str(exc):  # Python's own message names a setting of the interpreter
        return f"a number has more than {sys.get_int_max_str_digits()} digits; write a smaller one"
    return f"a value cannot be read ({str(exc)[:120]})"


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: where and what, without the echoed source snippet."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if problem is None:
        return brief(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 200)
    return f"{_where(mark)}{problem}"


def brief(value: Any, limit: int = 60) -> str:
    """A repr of ``value`` of at most about ``limit`` characters, computed in bounded work.

    Unlike ``repr(value)[:limit]`` it never serialises the whole value first (``reprlib`` stops at a
    few items per level), so an error message about a huge value costs what it prints.
    """
    text = value[: limit + 1] if isinstance(value, str) else value
    out = _REPR.repr(text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _where(mark: Any) -> str:
    return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}: "
