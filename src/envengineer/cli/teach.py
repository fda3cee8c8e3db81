"""``envengineer teach``: continue a warm-started policy on the solver's labels of its own answers.

The learner is :mod:`envengineer.training.teach` (DAgger with the exact solver as teacher); its settings
are :class:`~envengineer.training.teach.TeachSettings`, each one an option here.
"""

from __future__ import annotations

import argparse
import logging
import math
from typing import Any

from envengineer.argtypes import pos_float, pos_int
from envengineer.cli.options import add_data_source, add_exclude, add_out, add_seed, command

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "teach",
        cmd_teach,
        help="continue a policy on the exact solver's labels of its own answers (DAgger)",
        description="The policy answers the round's boards; the solver keeps the longest prefix of each "
        "answer that an optimal plan begins with and writes that plan; the policy learns it from its "
        "first mistake on. Writes OUT/checkpoint and OUT/metrics.json (docs/training.md).",
    )
    p.add_argument(
        "--model",
        required=True,
        help="checkpoint folder (e.g. a warm-start's OUT/checkpoint), or a name sft accepts: "
        "policy:trainee, policy:SIZE, embedded",
    )
    add_data_source(p)
    add_exclude(p)
    p.add_argument(
        "--minutes",
        type=pos_float,
        default=None,
        help="wall time, checked inside each roll-in too (default 5)",
    )
    p.add_argument("--max-steps", type=pos_int, default=None, help="optimizer steps: the schedule's length")
    p.add_argument(
        "--temperature",
        type=nonneg_float,
        default=None,
        help="roll-in temperature, a finite number >= 0 (default 0: greedy)",
    )
    p.add_argument("--learning-rate", type=pos_float, default=None, help="peak learning rate (default 5e-4)")
    add_seed(p, "seed of the learner and the generator")
    add_out(p, "output folder", required=True)


def nonneg_float(text: str) -> float:
    """A finite number >= 0 (a temperature), or argparse's one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def settings_of(args: argparse.Namespace) -> Any:
    """The :class:`~envengineer.training.teach.TeachSettings` of the options given; a bad value is one
    line naming the option (never pydantic's multi-line report)."""
    from pydantic import ValidationError

    from envengineer.errors import ConfigError
    from envengineer.training.teach import TeachSettings

    given = {
        "minutes": args.minutes,
        "max_steps": args.max_steps,
        "temperature": args.temperature,
        "learning_rate": args.learning_rate,
    }
    try:
        return TeachSettings(seed=args.seed, **{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        option = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "a setting"
        raise ConfigError(f"{option} {err.get('input')!r}: {err['msg'].lower()}; see --help") from None


def cmd_teach(args: argparse.Namespace) -> int:
    from envengineer.cli.train import check_out_dir, data_source
    from envengineer.training.grpo import require_train_deps
    from envengineer.training.teach import teach

    check_out_dir(args.out)  # before any work: a file or read-only place fails now, not after the run
    settings = settings_of(args)
    source = data_source(args)  # the round's generator seed is --seed
    require_train_deps()
    instances, _seconds = source.load(args.out)
    metrics = teach(args.model, instances, out_dir=args.out, settings=settings)
    last = metrics["history"][-1] if metrics["history"] else {}
    stopped = f"  stopped: {metrics['stopped']}" if "stopped" in metrics else ""
    print(
        f"steps: {metrics['steps']}  roll-ins: {metrics['rollins']}  seconds: {metrics['seconds']:.1f}"
        + stopped
    )
    if last.get("rollin_valid") is not None:
        print(f"last roll-in: valid {last['rollin_valid']:.3f}  optimal {last['rollin_optimal']:.3f}")
    print(f"checkpoint: {metrics['checkpoint']}")
    return 0
