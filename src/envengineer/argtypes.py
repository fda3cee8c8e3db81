"""Argument types shared by the sub-commands: numbers checked when the command line is parsed.

A bad value is argparse's usual one-line error (``argument --seed: ...``) and exit code 2, before any file
is read or any work starts.
"""

from __future__ import annotations

import argparse
import math


def nonneg_int(text: str) -> int:
    """An integer >= 0 (seeds).

    >>> nonneg_int("3")
    3
    """
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def pos_int(text: str) -> int:
    """An integer >= 1 (counts, budgets)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def pos_float(text: str) -> float:
    """A finite number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _int(text: str) -> int:
    if len(text) > 30:
        raise argparse.ArgumentTypeError(f"must be an integer of at most 30 digits, got {text[:20]!r}...")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
