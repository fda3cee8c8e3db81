"""Loop commands: run, report, compare, demo."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from envengineer.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run an experiment: rounds of data -> GRPO -> validation -> engineer, then the benchmark",
        description="Run the environment-engineer loop of an experiment file into a run directory, or "
        "continue a stopped run with --resume DIR. The run directory is the lab notebook (docs/loop.md).",
    )
    p.add_argument("experiment", nargs="?", type=Path, help="experiment YAML (not needed with --resume)")
    p.add_argument("--out", type=Path, help="run directory (default: runs/NAME)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR where it stopped")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. --set rounds=1 --set engineer.kind=fixed (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and its cost; run nothing")
    p.add_argument("--no-report", action="store_true", help="do not write report.md at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--schema", action="store_true", help="print the experiment file's JSON schema and exit")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "report",
        help="write report.md and PNG figures for a run directory",
        description="Render a run directory (finished or not) as report.md with PNG figures: the benchmark "
        "table, data allocation and ratios per round, validation failures, learning curves, the engineer's "
        "rationales.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    p.add_argument("--out", type=Path, help="folder for report.md and figures/ (default: the run directory)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "compare",
        help="several runs side by side: one table and one figure",
        description="Put run directories side by side: compare.md (benchmark Sum per agent count, the last "
        "validation) and compare.png. Stopped runs show what they have.",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories to compare")
    p.add_argument(
        "--out", type=Path, default=Path("runs/compare"), help="output folder (default runs/compare)"
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "demo",
        help="the whole loop on a CPU with the embedded model (10 min on 2 idle cores), then the report",
        description="Three short rounds of the self-engineer loop with the embedded SmolLM2-135M: GRPO, "
        "validation, the model writing its own next configuration, the benchmark subset, the report.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory (default runs/demo)")
    p.add_argument("--resume", action="store_true", help="continue a stopped demo in --out")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its cost; run nothing")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a demo setting")
    p.set_defaults(func=cmd_demo)


# -- commands ---------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from envengineer.loop.experiment import Experiment, load_experiment, parse_override

    if args.schema:
        print(json.dumps(Experiment.model_json_schema(), indent=2))
        return 0
    overrides = dict(parse_override(s) for s in args.set)
    if args.resume:
        if args.experiment is not None or overrides:
            raise ConfigError(
                "--resume continues a run exactly as it was started; drop the experiment file "
                "and --set options"
            )
        if args.dry_run:
            exp = load_experiment(args.resume / "experiment.yaml")
            _print_plan(exp, args.resume)
            return 0
        return _execute(
            None, args.resume, resume=True, report=not args.no_report, progress=not args.no_progress
        )
    if args.experiment is None:
        raise ConfigError("name an experiment file (e.g. experiments/cpu/main-self.yaml) or use --resume DIR")
    exp = load_experiment(args.experiment, overrides)
    out = args.out or Path("runs") / exp.name
    if args.dry_run:
        _print_plan(exp, out)
        return 0
    return _execute(exp, out, resume=False, report=not args.no_report, progress=not args.no_progress)


def cmd_demo(args: argparse.Namespace) -> int:
    from envengineer.loop.experiment import DEMO, Experiment, parse_override, set_dotted

    data = json.loads(json.dumps(DEMO))
    for s in args.set:
        key, value = parse_override(s)
        set_dotted(data, key, value)
    exp = Experiment.from_dict(data, where="demo")
    if args.dry_run:
        _print_plan(exp, args.out)
        return 0
    if args.resume:
        return _execute(None, args.out, resume=True, report=True, progress=True)
    return _execute(exp, args.out, resume=False, report=True, progress=True)


def cmd_report(args: argparse.Namespace) -> int:
    from envengineer.loop.report import write_report

    path = write_report(args.run_dir, out=args.out)
    print(f"report: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from envengineer.loop.compare import compare_runs

    path = compare_runs(args.run_dirs, out=args.out)
    print(path.read_text(encoding="utf-8"))
    print(f"written: {path} and {path.with_name('compare.png')}")
    return 0


# -- helpers ----------------------------------------------------------------------------------------------
def _execute(exp: object, out: Path, *, resume: bool, report: bool, progress: bool) -> int:
    from envengineer.loop.report import benchmark_table_md
    from envengineer.loop.rundir import read_json
    from envengineer.loop.runner import run_experiment

    t0 = time.perf_counter()
    summary = run_experiment(exp, out, resume=resume, progress=progress and sys.stderr.isatty())  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    scores = read_json(out / "benchmark" / "scores.json")
    print(benchmark_table_md(scores, title=f"benchmark: {out}"))
    print(
        f"\nvalid {summary['valid']:.2f} % / optimal {summary['optimal']:.2f} %"
        f" over {summary['n']} instances; "
        f"{seconds / 60:.1f} min"
    )
    if report:
        try:
            from envengineer.loop.report import write_report

            print(f"report: {write_report(out)}")
        except ImportError as exc:
            print(f"no report ({exc.name} missing; install the train extra), see {out}", file=sys.stderr)
    return 0


def _print_plan(exp: object, out: Path) -> None:
    from envengineer.loop.experiment import plan

    p = plan(exp)  # type: ignore[arg-type]
    steps = p["grpo_steps_per_round"]
    print(f"experiment {p['name']} -> {out}")
    print(f"  model:       {p['model']}")
    print(f"  rounds:      {p['rounds']}  ({p['training']})")
    print(f"  engineer:    {p['engineer']}, {p['engineer_calls']} proposal(s); context {p['context']}")
    print(
        f"  training:    {p['training_instances']} instances, "
        + (
            f"{p['grpo_steps']} GRPO steps ({steps} per round, "
            f"{p['grpo_batch'].get('prompts_per_step')} prompt(s) x {p['grpo_batch'].get('num_generations')} "
            "completions per step)"
            if steps is not None
            else "GRPO steps unknown (training preset not readable)"
        )
    )
    if p["warm_start"]:
        w = p["warm_start"]
        print(f"  warm start:  {w['instances']} instances, {w['steps']} SFT steps ({w['preset']})")
    print(
        f"  evaluation:  {p['validation_instances']} validation instances per round, "
        f"{p['benchmark_instances']} benchmark instances"
    )
    print(
        f"  responses:   {p['eval_responses']} (at most {p['eval_tokens_upper_bound']:,} generated tokens at "
        f"{p['max_new_tokens']} per response)"
    )
    _print_stages(exp, out)
    if p["cpu_seconds"] is None:
        print("  time:        no estimate (rates are measured for the embedded model and CPU presets only)")
    else:
        minutes = p["cpu_seconds"] / 60
        print(
            f"  time:        about {minutes:.0f} min on 2 idle CPU cores (rates measured for the embedded "
            "model; docs/benchmarks.md)"
        )


def _print_stages(exp: object, out: Path) -> None:
    from envengineer.loop.stages import evaluates_in_subprocess, launcher, planned_commands, uses_subprocesses

    trains = uses_subprocesses(exp)  # type: ignore[arg-type]
    evals = evaluates_in_subprocess(exp)  # type: ignore[arg-type]
    if not (trains or evals):
        print("  stages:      training and evaluation in this process (launch.stages: inprocess or auto)")
        return
    where = [f"training via {launcher(exp.launch)} x {exp.launch.processes}" if trains else ""]  # type: ignore[attr-defined]
    where.append("evaluation in its own process" if evals else "evaluation in this process")
    print(f"  stages:      {', '.join(w for w in where if w)}; commands:")
    for label, cmd in planned_commands(exp, out):  # type: ignore[arg-type]
        print(f"    {label}: {cmd}")
