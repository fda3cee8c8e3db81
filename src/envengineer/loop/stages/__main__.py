"""The stage worker ``python -m envengineer.loop.stages evaluate ...`` (started by :mod:`..launch`)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m envengineer.loop.stages evaluate --experiment F --instances F --out D --seed S``.

    ``--model M`` names the checkpoint (default: the embedded model). Answers and scores the instances with
    the experiment's evaluation settings (resuming ``responses.jsonl``) and writes ``OUT/scores.json``.
    Errors are the command line's one-line errors.
    """
    import argparse

    from envengineer.argtypes import nonneg_int
    from envengineer.errors import describe_error

    p = argparse.ArgumentParser(prog="python -m envengineer.loop.stages", description=main.__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("evaluate", help="answer and score an instance file with the experiment's settings")
    e.add_argument("--experiment", type=Path, required=True, help="the run's experiment.yaml")
    e.add_argument("--instances", type=Path, required=True, help="instance file")
    e.add_argument("--out", type=Path, required=True, help="output folder (responses.jsonl, scores.json)")
    e.add_argument("--seed", type=nonneg_int, required=True, help="sampling seed")
    e.add_argument("--model", default=None, help="checkpoint or hub id (default: the embedded model)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from envengineer.loop.components import _default_evaluator
        from envengineer.loop.experiment import load_experiment
        from envengineer.loop.rundir import atomic_write_json
        from envengineer.mapf.instance import load_instances

        exp = load_experiment(args.experiment)
        report = _default_evaluator(
            args.model, load_instances(args.instances), out_dir=args.out, experiment=exp, seed=args.seed,
            progress=False,
        )  # fmt: skip
        scores = report.to_json() if hasattr(report, "to_json") else dict(report)
        atomic_write_json(args.out / "scores.json", scores)
    except Exception as exc:
        message, code = describe_error(exc)
        print(f"envengineer stage: error: {message}", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
