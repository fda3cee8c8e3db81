"""What several commands declare alike, written once: a command's parser with its function, and the options
that mean the same wherever they stand (``--out``, ``-o/--output``, an instance file, ``--seed``, ``--set``,
``--dry-run``, ``--no-progress``, ``--workers``, the sweep's options, the training data's source).

Each helper adds its option as the command's own ``add_argument`` did, same flags, type, default, metavar
and help (a command passes its own words where they differ), so ``--help`` and what a command reads stay as
they were. Not a sub-command module: :mod:`envengineer.cli` registers the others, which import this one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envengineer.argtypes import nonneg_int, pos_int

#: The help of a positional instance file that may also name the packaged benchmark.
INSTANCES_HELP = "instance file; 'benchmark' for the packaged one ('benchmark-v1' for v1)"


def command(
    sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], Any], **kw: Any
) -> argparse.ArgumentParser:
    """The parser of command ``name`` (``help``, ``description`` ... as ``add_parser`` takes them), run by
    ``func``."""
    p = sub.add_parser(name, **kw)
    p.set_defaults(func=func)
    return p


def add_out(p: argparse.ArgumentParser, help: str, **kw: Any) -> None:
    """``--out DIR``, a folder (``default`` or ``required`` in ``kw``)."""
    p.add_argument("--out", type=Path, help=help, **kw)


def add_output(p: argparse.ArgumentParser, help: str) -> None:
    """``-o/--output FILE``, required: the file a command writes."""
    p.add_argument("-o", "--output", type=Path, required=True, help=help)


def add_instances(p: argparse.ArgumentParser, help: str = INSTANCES_HELP) -> None:
    """The positional instance file a command reads."""
    p.add_argument("instances", type=Path, help=help)


def add_seed(p: argparse.ArgumentParser, help: str, default: int | None = 0) -> None:
    """``--seed N``, an integer >= 0."""
    p.add_argument("--seed", type=nonneg_int, default=default, help=help)


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable): fields to override, in ``args.set``."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the plan and its cost; run nothing")


def add_no_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_workers(p: argparse.ArgumentParser) -> None:
    """``--workers N``: processes that build a set."""
    p.add_argument("--workers", type=pos_int, default=None, help="processes (default: 2)")


def add_sweep_options(p: argparse.ArgumentParser, where: str) -> None:
    """``--seeds``, ``--executor``, ``--lanes``, ``--address``: one run per seed into ``where``
    (``run`` and ``suite``; :mod:`envengineer.sweep`)."""
    p.add_argument(
        "--seeds",
        metavar="SEEDS",
        help=f"one run per seed, e.g. 0-4 or 0,2,5 (seeds as --seed sets them), into {where}; a stopped "
        "sweep resumes with the same command (docs/loop.md, Sweeps on Ray)",
    )
    p.add_argument(
        "--executor",
        choices=("sequential", "ray"),
        default="sequential",
        help="sequential: the runs in lanes side by side on this machine's cores (default); ray: every run "
        "one Ray task with the CPUs and GPUs it asks for (pip install 'envengineer[ray]')",
    )
    p.add_argument(
        "--lanes",
        metavar="N",
        help="with the sequential executor: N runs at once, each in its own process with its share of the "
        "cores as torch and BLAS threads (default: one lane per core for CPU runs; 1: one run after "
        "another in this process with every core)",
    )
    p.add_argument(
        "--address", metavar="ADDR", help="with --executor ray: the Ray cluster to attach to (default: local)"
    )


def add_data_source(p: argparse.ArgumentParser, note: str = "") -> None:
    """``--round ROUND.yaml`` or ``--instances FILE``, one required (``train``, ``sft``, ``teach``)."""
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--round", type=Path, metavar="ROUND.yaml", help="round configuration to generate from")
    data.add_argument(
        "--instances",
        type=Path,
        metavar="FILE",
        help=f"train on these solved instances instead (.jsonl[.gz]{note})",
    )


def add_exclude(p: argparse.ArgumentParser) -> None:
    """``--exclude FILE`` (repeatable): boards that must not be trained on (``train``, ``sft``, ``teach``)."""
    p.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="instance file whose boards must not be trained on (repeatable), e.g. a run's "
        "validation_set.jsonl or a benchmark file; with --round the packaged benchmark's boards are "
        "always excluded, with --instances the file's instances on these boards are dropped",
    )
