"""Loop commands: run, report, compare, demo."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from envengineer.cli.options import (
    add_dry_run,
    add_no_progress,
    add_out,
    add_overrides,
    add_sweep_options,
    command,
)
from envengineer.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """The loop's commands: run, report, compare, suite, demo."""
    _register_run(sub)
    _register_report(sub)
    _register_compare(sub)
    _register_suite(sub)
    _register_demo(sub)


def _register_run(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "run",
        cmd_run,
        help="run an experiment: rounds of data -> training (the experiment's training.learner) -> "
        "validation -> engineer, then the benchmark",
        description="Run the environment-engineer loop of an experiment file into a run directory, or "
        "continue a stopped run with --resume DIR. The run directory is the lab notebook (docs/loop.md).",
    )
    p.add_argument("experiment", nargs="?", type=Path, help="experiment YAML (not needed with --resume)")
    add_out(p, "run directory (default: runs/NAME)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR where it stopped")
    p.add_argument(
        "--redo-damaged",
        action="store_true",
        help="with --resume: run a finished stage again when a file it wrote was changed, truncated or "
        "deleted, and run from their start the stages whose files no ledger line vouches for (a deleted "
        "ledger); old files go to DIR/set_aside/N (default: stop and name the file)",
    )
    add_overrides(p, "override a field, e.g. --set rounds=1 --set engineer.kind=fixed (repeatable)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="one seed of an arm: sets seeds.data, seeds.training and seeds.evaluation (the round-0 "
        "configuration's seeds.config stays; --set of those seeds as well is refused) and names the run "
        "NAME-sSEED; compare groups such runs",
    )
    p.add_argument(
        "--report-to",
        metavar="TRACKERS",
        help="trackers for TRL's logs and the loop's metrics, e.g. tensorboard or tensorboard,wandb "
        "(sets training.report_to; docs/integrations.md)",
    )
    p.add_argument(
        "--share-from",
        type=Path,
        metavar="DIR",
        help="take the stages before the engineer is first asked (warm-start, starting validation, round "
        "0) from the finished run in DIR, an arm of the same seed that differs only in its engineer "
        "(docs/loop.md, Comparing runs and arms of seeds)",
    )
    p.add_argument(
        "--allow-fingerprint-change",
        action="store_true",
        help="with --share-from or --resume: go on although the code, presets or held-out sets that "
        "computed the stages differ from today's (default: refuse, naming them); the run records it in "
        "fingerprint.json (docs/loop.md)",
    )
    add_dry_run(p)
    add_sweep_options(p, "OUT/NAME-sSEED (--out: the parent folder, default runs)")  # envengineer.sweep
    p.add_argument("--no-report", action="store_true", help="do not write report.md at the end")
    add_no_progress(p)
    p.add_argument("--schema", action="store_true", help="print the experiment file's JSON schema and exit")


def _register_report(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "report",
        cmd_report,
        help="write report.md and PNG figures for a run directory",
        description="Render a run directory (finished or not) as report.md with PNG figures: the benchmark "
        "table, data allocation and ratios per round, validation failures, learning curves, the engineer's "
        "rationales.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    add_out(p, "folder for report.md and figures/ (default: the run directory)")


def _register_compare(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "compare",
        cmd_compare,
        help="several runs side by side: tables, arms of seeds with mean and spread, figures",
        description="Put run directories side by side: compare.md (benchmark Sum per agent count, parse %, "
        "tokens per answer, the last validation, pooled valid % per wait subset; runs that differ only in "
        "their seeds grouped into arms with mean ± std [min-max] per cell and Sum; each arm's learning "
        "curve, mean and 95 % interval over its seeds), compare.png, allocation.png and curves.png. Stopped "
        "runs show what they have.",
    )
    p.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR", help="run directories to compare")
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=DIR,DIR,...",
        help="an explicit arm of runs (repeatable); default: runs whose experiments differ only in seeds",
    )
    p.add_argument(
        "--mixed-arms",
        action="store_true",
        help="let an --arm pool runs of different experiments or of different scored sets, and --against "
        "compare arms scored on different sets (their difference left out, each arm's sets named); "
        "default: refused, naming what differs",
    )
    p.add_argument(
        "--against",
        metavar="ARM",
        help="reference arm: each other arm's difference to it with a 95%% bootstrap interval (only arms "
        "validated and benchmarked on the reference's sets, compared by ids and board hashes)",
    )
    add_out(p, "output folder (default runs/compare)", default=Path("runs/compare"))


def _register_suite(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "suite",
        cmd_suite,
        help="run every experiment file of a folder, each distinct run once (plan and cost with --dry-run)",
        description="Read the experiment files of a folder (e.g. experiments/gpu, the paper's whole set), "
        "group files that describe the same run under different names (main-self, ablation-v6, "
        "engineer-self, details-bookkeeping), print the plan and its cost, and run each distinct run once "
        "into OUT/NAME; the other names become links to it (OUT/suite.json records the mapping).",
    )
    p.add_argument("folder", type=Path, metavar="FOLDER", help="folder of experiment files")
    add_out(p, "parent of the run directories (runs)", default=Path("runs"))
    add_dry_run(p)
    p.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="run only this file or run (repeatable)"
    )
    add_overrides(p, "override a field in every run")
    p.add_argument(
        "--redo",
        action="store_true",
        help="start a run again whose directory holds another experiment than its file describes now "
        "(the old directory is moved to NAME.replaced-TIME); default: refuse and name the fields",
    )
    add_no_progress(p)
    add_sweep_options(p, "OUT/NAME-sSEED")


def _register_demo(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "demo",
        cmd_demo,
        help="the whole loop on a CPU with a small policy that learns (about 8 min on 2 idle cores), then "
        "the report",
        description="The small-policy loop: the packaged trainee (a 1M-parameter policy supervised on the "
        "solver's plans), three supervised rounds on the solver's plans of the engineer's boards, the "
        "embedded SmolLM2-135M writing the next rounds' configurations from the validation failures, the "
        "benchmark, the report. --smollm2 runs the SmolLM2 self-engineer demo instead.",
    )
    add_out(p, "run directory (default runs/demo)", default=Path("runs/demo"))
    p.add_argument("--resume", action="store_true", help="continue a stopped demo in --out")
    add_dry_run(p)
    add_overrides(p, "override a demo setting")
    p.add_argument(
        "--smollm2",
        action="store_true",
        help="the SmolLM2-135M self-engineer demo instead (experiments/cpu/demo-smollm2.yaml, ~10 min)",
    )


# -- commands ---------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from envengineer.loop.experiment import Experiment, load_experiment, parse_override

    if args.schema:
        print(json.dumps(Experiment.model_json_schema(), indent=2))
        return 0
    if args.share_from is not None and (_sweeping(args) or args.resume):
        raise ConfigError("--share-from starts one new run (not with --resume or --seeds)")
    if args.allow_fingerprint_change and (_sweeping(args) or (args.share_from is None and not args.resume)):
        raise ConfigError(
            "--allow-fingerprint-change applies to one run with --share-from DIR or --resume DIR"
        )
    if _sweeping(args):
        from envengineer.sweep.commands import run_sweep_command

        return run_sweep_command(args, override_name)
    from envengineer.loop.seeds import with_seed

    overrides = with_seed(dict(parse_override(s) for s in args.set), args.seed)
    if args.report_to is not None:
        overrides["training.report_to"] = args.report_to
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
            None,
            args.resume,
            resume=True,
            report=not args.no_report,
            progress=not args.no_progress,
            redo_damaged=args.redo_damaged,
            allow_fingerprint_change=args.allow_fingerprint_change,
        )
    if args.redo_damaged:
        raise ConfigError("--redo-damaged applies to --resume DIR only")
    if args.experiment is None:
        raise ConfigError("name an experiment file (e.g. experiments/cpu/main-self.yaml) or use --resume DIR")
    exp = load_experiment(args.experiment, overrides)
    if overrides and "name" not in overrides:
        exp = load_experiment(args.experiment, {**overrides, "name": override_name(exp.name, overrides)})
    out = args.out or Path("runs") / exp.name
    if args.dry_run:
        if args.share_from is not None:  # the checks the run makes before it writes anything
            from envengineer.loop.runner import planned_stages
            from envengineer.loop.share import check_source

            allow = args.allow_fingerprint_change
            check_source(
                args.share_from, exp, planned_stages(exp), target=out, allow_fingerprint_change=allow
            )
        _print_plan(exp, out)
        return 0
    return _execute(
        exp,
        out,
        resume=False,
        report=not args.no_report,
        progress=not args.no_progress,
        share_from=args.share_from,
        allow_fingerprint_change=args.allow_fingerprint_change,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from envengineer.loop.demo import DEMO, DEMO_SMOLLM2
    from envengineer.loop.experiment import Experiment, parse_override, set_dotted

    data = json.loads(json.dumps(DEMO_SMOLLM2 if args.smollm2 else DEMO))
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
    from envengineer.loop.compare import compare_runs, parse_arm

    arms = dict(parse_arm(a) for a in args.arm)
    path = compare_runs(
        args.run_dirs, out=args.out, arms=arms or None, against=args.against, mixed=args.mixed_arms
    )
    print(path.read_text(encoding="utf-8"))
    written = [path.with_name(n) for n in ("compare.json", "compare.png", "allocation.png", "curves.png")]
    print(f"written: {path}, " + ", ".join(str(p) for p in written if p.exists()))
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    from envengineer.loop.experiment import parse_override
    from envengineer.loop.plan import preflight
    from envengineer.loop.suite import (
        link_aliases,
        prepare_run_dir,
        suite_files,
        suite_plan,
        suite_totals,
        write_suite_record,
    )

    overrides = dict(parse_override(s) for s in args.set)
    files = suite_files(args.folder)
    runs = suite_plan(files, overrides, only=args.only)
    totals = suite_totals(runs, len(files))
    print(
        f"suite {args.folder}: {totals['files']} experiment files, {totals['runs']} distinct runs"
        + (f" (--only {', '.join(args.only)})" if args.only else "")
        + f", {totals['repeats_saved']} repeats skipped -> {args.out}/NAME"
    )
    print("| run | files | rounds | engineer | training steps | responses | time on 2 CPU cores |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        p = r.plan
        files_text = ", ".join(f.stem for f in r.files)
        print(
            f"| {r.name} | {files_text} | {p['rounds']} | {_engineer_text(p)} | "
            f"{_steps_text(p)} | {p['eval_responses']} | {_minutes(p['cpu_seconds'])} |"
        )
    known = [r.plan["cpu_seconds"] for r in runs if r.plan["cpu_seconds"] is not None]
    unknown = len(runs) - len(known)
    print(
        f"total: {totals['grpo_steps']:,} GRPO steps (each file on its own: "
        f"{totals['grpo_steps_without_dedup']:,}), "
        + (f"{totals['sft_steps']:,} SFT steps, " if totals["sft_steps"] else "")
        + f"{totals['training_instances']:,} training instances, "
        f"{totals['eval_responses']:,} evaluation responses (at most {totals['eval_tokens']:,} generated "
        f"tokens), {totals['engineer_calls']} engineer calls"
    )
    print(
        (f"time: about {sum(known) / 60:.0f} min on 2 CPU cores" if known else "time: no estimate")
        + (
            f"; {unknown} run(s) without an estimate (rates are measured on CPU for the embedded model and "
            "policy:tiny only: GPU presets, other models and remote engineers have none)"
            if unknown
            else ""
        )
    )
    sweeping = _sweeping(args)
    if args.dry_run and not sweeping:
        return 0
    for r in runs:
        preflight(r.experiment)
        if not args.redo:
            prepare_run_dir(r, args.out / r.name)  # a stale run is refused before any run starts
    if sweeping:
        from envengineer.sweep.commands import suite_sweep_command

        return suite_sweep_command(args, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    write_suite_record(runs, args.out)
    for r in runs:
        run_dir = args.out / r.name
        resume = prepare_run_dir(r, run_dir, redo=args.redo)
        print(f"\n== {r.name} ({'resuming' if resume else 'starting'}) -> {run_dir}")
        _execute(
            None if resume else r.experiment,
            run_dir,
            resume=resume,
            report=True,
            progress=not args.no_progress,
        )
        for link in link_aliases(r, args.out):
            print(f"   {link} -> {r.name}")
    return 0


def override_name(name: str, overrides: dict) -> str:
    """The run name after ``--set`` overrides, so that runs of one file with other settings differ.

    Seeds that all get one value add ``-sVALUE`` (what ``compare`` strips to group an arm); any other
    override adds ``-LASTKEY-VALUE`` (only letters, digits, ``.``, ``_`` and ``-`` kept).

    >>> override_name("cpu-main-self", {"engineer.kind": "fixed"})
    'cpu-main-self-kind-fixed'
    >>> override_name("cpu-main-fixed", {"seeds.data": 2, "seeds.training": 2})
    'cpu-main-fixed-s2'
    """
    from envengineer.sweep.tasks import fit_name

    parts = []
    tail = ""
    seeds = {k: v for k, v in overrides.items() if str(k).startswith("seeds.")}
    others = {k: v for k, v in overrides.items() if k not in seeds}
    for key, value in others.items():
        parts.append(f"{str(key).rsplit('.', 1)[-1]}-{value}")
    if seeds:
        values = {str(v) for v in seeds.values()}
        if len(values) == 1:
            tail = "-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"s{values.pop()}")  # kept whatever the length
        else:
            parts += [f"{str(k).rsplit('.', 1)[-1]}-{v}" for k, v in seeds.items()]
    suffix = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts))
    return fit_name(f"{name}-{suffix}".rstrip("-_.") if suffix else name, tail)


def _minutes(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.0f} min"


def _engineer_text(p: dict) -> str:
    if not p["engineer_calls"]:
        return f"none ({p['rounds']} round(s): no proposal)"
    return f"{p['engineer']} ({p['engineer_calls']} calls)"


# -- helpers ----------------------------------------------------------------------------------------------
def _sweeping(args: argparse.Namespace) -> bool:
    """Whether ``run`` or ``suite`` goes through the sweep (:mod:`envengineer.sweep`)."""
    sweep_options = (args.seeds, args.address, args.lanes)
    return args.executor != "sequential" or any(o is not None for o in sweep_options)


def _execute(
    exp: object,
    out: Path,
    *,
    resume: bool,
    report: bool,
    progress: bool,
    redo_damaged: bool = False,
    share_from: Path | None = None,
    allow_fingerprint_change: bool = False,
) -> int:
    from envengineer.loop.report import benchmark_table_md
    from envengineer.loop.rundir import read_json
    from envengineer.loop.runner import run_experiment

    t0 = time.perf_counter()
    summary = run_experiment(
        exp,  # type: ignore[arg-type]
        out,
        resume=resume,
        progress=progress and sys.stderr.isatty(),
        redo_damaged=redo_damaged,
        share_from=share_from,
        allow_fingerprint_change=allow_fingerprint_change,
    )
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
    from envengineer.loop.plan import plan, preflight

    preflight(exp)  # type: ignore[arg-type]  # the checks `run` makes: a plan `run` would reject is an error
    p = plan(exp)  # type: ignore[arg-type]
    steps = p["grpo_steps_per_round"]
    print(f"experiment {p['name']} -> {out}")
    print(f"  model:       {p['model']}")
    print(f"  rounds:      {p['rounds']}  ({p['training'] if p['rounds'] else 'evaluation only'})")
    if p["engineer_calls"]:
        print(f"  engineer:    {p['engineer']}, {p['engineer_calls']} proposal(s); context {p['context']}")
        if p["engineer_answers"] != p["engineer_calls"]:  # engineer.screen: several answers a call
            print(
                f"  screen:      {p['engineer_answers']} engineer answers; their probe boards are among the "
                "responses below"
            )
    else:
        print(f"  engineer:    none ({p['rounds']} round(s): no proposal is asked for)")
    if not p["rounds"]:
        print("  training:    none")
    else:
        _print_training(p, steps)
    trackers = getattr(getattr(exp, "training", None), "report_to", None)
    if trackers:
        print(f"  trackers:    {', '.join(trackers)} (TRL's logs; TensorBoard also gets the loop's metrics)")
    if p["warm_start"]:
        w = p["warm_start"]
        print(f"  warm start:  {w['instances']} instances, {w['steps']} SFT steps ({w['preset']})")
    print(
        (
            f"  evaluation:  {p['validation_instances']} validation instances per round, "
            if p["rounds"]
            else "  evaluation:  no validation (no round), "
        )
        + f"{p['benchmark_instances']} benchmark instances"
    )
    print(
        f"  responses:   {p['eval_responses']} (at most {p['eval_tokens_upper_bound']:,} generated tokens at "
        f"{p['max_new_tokens']} per response)"
    )
    _print_stages(exp, out)
    if p["cpu_seconds"] is None:
        print(
            "  time:        no estimate (rates are measured for the embedded model and policy:tiny with "
            "their CPU presets only)"
        )
    else:
        minutes = p["cpu_seconds"] / 60
        print(
            f"  time:        about {minutes:.0f} min on 2 idle CPU cores (measured rates; docs/benchmarks.md)"
        )


def _steps_text(p: dict) -> str:
    """A plan's training steps for the suite's table: ``N GRPO``, ``N SFT`` (learner sft) or ``teach``."""
    if p["training"] == "SFT":
        return f"{p['sft_steps']} SFT"
    return "teach" if p["training"] == "teach" else f"{p['grpo_steps']} GRPO"


def _instances(p: dict) -> str:
    """``"14400 instances of 2 and 3 agents"``: the rounds' boards and their agent counts."""
    counts = [str(a) for a in p["training_agents"]]
    agents = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
    return f"{p['training_instances']} instances of {agents} agents"


def _print_training(p: dict, steps: int | None) -> None:
    if p["training"] == "SFT":
        sft = p["sft_steps_per_round"]
        print(
            f"  training:    {_instances(p)}, "
            + (
                f"{p['sft_steps']} SFT steps on the solver's plans ({sft} per round)"
                if sft is not None
                else "SFT steps unknown (training preset not readable)"
            )
        )
        return
    if p["training"] == "teach":
        print(
            f"  training:    {_instances(p)}, the solver teaches the policy on its own "
            "answers (learner teach)"
        )
        return
    print(
        f"  training:    {_instances(p)}, "
        + (
            f"{p['grpo_steps']} GRPO steps ({steps} per round, "
            f"{p['grpo_batch'].get('prompts_per_step')} prompt(s) x {p['grpo_batch'].get('num_generations')} "
            "completions per step)"
            if steps is not None
            else "GRPO steps unknown (training preset not readable)"
        )
    )


def _print_stages(exp: object, out: Path) -> None:
    from envengineer.loop.launch import evaluates_in_subprocess, launcher, planned_commands, uses_subprocesses

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
