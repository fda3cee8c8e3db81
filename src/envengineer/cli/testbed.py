"""Testbed commands: generate, solve, benchmark, score, show, play."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.argtypes import pos_float, pos_int
from envengineer.cli.options import add_instances, add_output, add_seed, add_workers, command
from envengineer.errors import ConfigError, InstanceFormatError


def register(sub: argparse._SubParsersAction) -> None:
    _register_generate(sub)
    _register_solve(sub)
    _register_benchmark(sub)
    _register_score(sub)
    _register_show(sub)
    _register_play(sub)


def _register_generate(sub: argparse._SubParsersAction) -> None:
    """`envengineer generate`: solved instances, one cell or a whole round configuration."""
    p = command(
        sub,
        "generate",
        cmd_generate,
        help="generate solved instances (one cell, or a whole round configuration)",
        description="Generate instances with exact optima. Either one cell (--agents/--size/--hole-ratio/"
        "--wait-ratio/-n) or a whole round configuration (--config ROUND.yaml).",
    )
    p.add_argument("--config", type=Path, help="a round configuration (YAML or JSON)")
    p.add_argument("--agents", type=pos_int, default=2, help="agents per instance (default 2)")
    p.add_argument("--size", type=pos_int, help="grid side n (an n x n grid)")
    p.add_argument("--hole-ratio", type=float, default=0.3, help="share of cells that are holes, in [0, 0.5]")
    p.add_argument(
        "--wait-ratio", type=float, default=0.5, help="share of instances that need a wait, in [0, 1]"
    )
    p.add_argument("-n", "--count", type=pos_int, default=100, help="instances to generate (with --size)")
    add_seed(p, "base seed (default 0)")
    p.add_argument("--split", default=None, help="seed split: train, validation, benchmark or custom")
    add_output(p, "output .jsonl (or .jsonl.gz)")


def _register_solve(sub: argparse._SubParsersAction) -> None:
    """`envengineer solve`: the exact optima of an instance file."""
    p = command(
        sub,
        "solve",
        cmd_solve,
        help="fill in (or check) the exact optima of an instance file",
        description="Solve every instance exactly; fills optimal_soc, optimal_makespan, "
        "shortest_sum and needs_wait. Instances that already carry optima are checked.",
    )
    add_instances(p, "instance file (.jsonl or .jsonl.gz); ids are free-form")
    add_output(p, "solved instance file to write")
    p.add_argument(
        "--node-budget", type=pos_int, default=None, help="solver node budget per instance (default 30,000)"
    )
    p.add_argument(
        "--time-limit",
        type=pos_float,
        default=60.0,
        metavar="SECONDS",
        help="give up on an instance after this many seconds, whatever budget is left (default 60)",
    )


def _register_benchmark(sub: argparse._SubParsersAction) -> None:
    """`envengineer benchmark build|validation|info`."""
    p = sub.add_parser(
        "benchmark",
        help="build the benchmark or a validation set, or show their facts",
        description="The fixed 3,150-instance benchmark (SPEC §4): rebuild it byte for byte, build a "
        "validation set of its shape that shares no board with it, or print where the packaged copy lies and "
        "its hash. Two versions ship: v2 (the default) keeps every solvable draw, v1 only the draws the "
        "solver settles within its default budget (docs/testbed.md, 'The benchmark').",
    )
    version = argparse.ArgumentParser(add_help=False)
    version.add_argument(
        "--version",
        dest="benchmark_version",
        default=None,
        metavar="V",
        help="benchmark version, v1 or v2 (default v2)",
    )
    bsub = p.add_subparsers(
        dest="benchmark_command", metavar="ACTION", required=True, help="build, validation or info"
    )
    b = command(
        bsub, "build", cmd_benchmark_build, parents=[version], help="rebuild the 3,150-instance benchmark"
    )
    add_output(b, "instance file to write; v2 also writes NAME-plans.jsonl next to it (see docs/testbed.md)")
    add_workers(b)
    b = command(
        bsub,
        "validation",
        cmd_benchmark_validation,
        parents=[version],
        help="build a validation set of the benchmark's shape, disjoint from it, with its keep rule",
    )
    add_output(b, "instance file to write")
    b.add_argument("--per-cell", type=pos_int, default=None, help="instances per cell and subset (default 4)")
    add_seed(b, "seed (default: the project's validation seed)", default=None)
    add_workers(b)
    command(
        bsub,
        "info",
        cmd_benchmark_info,
        parents=[version],
        help="where the packaged benchmark lies, its hash and shape",
    )


def _register_score(sub: argparse._SubParsersAction) -> None:
    """`envengineer score`: the paper's table for a responses file."""
    p = command(
        sub,
        "score",
        cmd_score,
        help="score a responses file: the paper's table",
        description='Score responses ({"id": ..., "response": "..."} per line) against instances.',
    )
    add_instances(p, "instance file (.jsonl); 'benchmark' for the packaged one ('benchmark-v1' for v1)")
    p.add_argument("responses", type=Path, help='responses file: {"id": ..., "response": "..."} per line')
    p.add_argument("--json", type=Path, dest="json_out", help="write verdicts and the table as JSON here")


def _register_show(sub: argparse._SubParsersAction) -> None:
    """`envengineer show`: one instance as text."""
    p = command(
        sub,
        "show",
        cmd_show,
        help="print one instance as text (and its prompt)",
        description="Print one instance as text (its optima, the grid, the agents' starts and goals) and, "
        "with --prompt, the exact prompt a model sees.",
    )
    add_instances(p)
    p.add_argument("--index", type=int, default=0, help="0-based line index (default 0)")
    p.add_argument("--id", dest="instance_id", help="select by id instead of index")
    p.add_argument("--prompt", action="store_true", help="also print the model prompt")


def _register_play(sub: argparse._SubParsersAction) -> None:
    """`envengineer play`: a scripted policy's responses."""
    p = command(
        sub,
        "play",
        cmd_play,
        help="write a scripted policy's responses for an instance file",
        description="Answer every instance with a scripted reference policy, as a responses file for "
        "`envengineer score`: optimal (the solver's plan), greedy (each agent's own shortest path, ignoring "
        "the others) or random.",
    )
    add_instances(p)
    p.add_argument(
        "--policy", choices=("optimal", "greedy", "random"), default="optimal", help="default optimal"
    )
    add_seed(p, "seed of the random policy (default 0)")
    add_output(p, "responses file to write (.jsonl)")


# -- commands ---------------------------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    from envengineer.mapf.config import RoundConfig
    from envengineer.mapf.generator import check_fit, counts_for, generate_cell, generate_round
    from envengineer.mapf.instance import save_instances
    from envengineer.mapf.solver import MAX_BOARD_SIZE

    _check_output_file(args.output)
    if args.config is not None:
        config = RoundConfig.load(args.config)
        instances = generate_round(config, args.seed, split=args.split or "train", progress=True)
    else:
        if args.size is None:
            raise ConfigError(
                "give --size N (with --agents, --hole-ratio, --wait-ratio, -n) or --config ROUND.yaml"
            )
        _check_range("--size", args.size, 2, MAX_BOARD_SIZE)
        _check_range("--agents", args.agents, 1, 16)
        _check_range("--hole-ratio", args.hole_ratio, 0.0, 0.5)
        _check_range("--wait-ratio", args.wait_ratio, 0.0, 1.0)
        _check_range("-n", args.count, 1, 10_000_000)
        check_fit(args.size, args.agents)
        instances = generate_cell(
            num_agents=args.agents,
            size=args.size,
            count=args.count,
            wait_count=counts_for(args.count, args.wait_ratio),
            seed=args.seed,
            split=args.split or "custom",
            hole_ratio=args.hole_ratio,
            unique=False,
        )
    save_instances(instances, args.output)
    waits = sum(bool(i.needs_wait) for i in instances)
    print(f"wrote {len(instances)} instances ({waits} need a wait) to {args.output}")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from envengineer.errors import SolverBudgetExceeded, UnsolvableInstance
    from envengineer.mapf.instance import load_instances, save_instances
    from envengineer.mapf.solver import solve_instance

    _check_output_file(args.output)  # before the work, not after it
    instances = load_instances(args.instances)
    kw: dict[str, Any] = {"time_limit": args.time_limit}
    if args.node_budget is not None:
        kw["node_budget"] = args.node_budget
    out, mismatches, failed = [], 0, 0
    for inst in tqdm(instances, desc="solving", unit="inst"):
        try:
            sol = solve_instance(inst, **kw)
        except (UnsolvableInstance, SolverBudgetExceeded) as exc:
            print(f"{inst.id}: {exc}", file=sys.stderr)
            failed += 1
            out.append(inst)
            continue
        if inst.solved and (inst.optimal_soc, inst.optimal_makespan) != (sol.soc, sol.makespan):
            print(
                f"{inst.id}: file says SoC {inst.optimal_soc} / makespan {inst.optimal_makespan}, "
                f"solver finds {sol.soc} / {sol.makespan}",
                file=sys.stderr,
            )
            mismatches += 1
        out.append(
            inst.with_optimum(
                optimal_soc=sol.soc, optimal_makespan=sol.makespan, shortest_sum=sol.shortest_sum
            )
        )
    save_instances(out, args.output)
    print(
        f"solved {len(out) - failed} of {len(out)} instances -> {args.output}"
        + (f"; {mismatches} stated optima were wrong (corrected)" if mismatches else "")
        + (f"; {failed} unsolved (left without optima)" if failed else "")
    )
    return 1 if failed or mismatches else 0


def cmd_benchmark_build(args: argparse.Namespace) -> int:
    from envengineer.mapf import benchmark as bm
    from envengineer.mapf.instance import save_instances

    v = _benchmark_version(args)
    _check_output_file(args.output)
    plans: dict = {}
    instances = bm.build_benchmark(version=v.name, workers=args.workers, progress=True, plans=plans)
    save_instances(instances, args.output)
    same = "the packaged hash" if bm.sha256_file(args.output) == v.sha256 else "NOT the packaged hash"
    print(
        f"wrote {len(instances)} instances of benchmark {v.name} to {args.output} "
        f"(sha256 {bm.sha256_file(args.output)}, {same})"
    )
    if v.plans_file is not None:
        plans_out = bm.save_plans(plans, instances, bm.plans_file_for(args.output))
        print(f"wrote the plans of {len(plans)} boards beyond the solver's default budget to {plans_out}")
    return 0


def cmd_benchmark_validation(args: argparse.Namespace) -> int:
    from envengineer.mapf import benchmark as bm
    from envengineer.mapf.instance import save_instances

    version = _benchmark_version(args).name
    _check_output_file(args.output)
    instances = bm.build_validation_set(
        per_cell=args.per_cell or bm.VALIDATION_PER_CELL,
        seed=args.seed if args.seed is not None else bm.VALIDATION_SEED,
        workers=args.workers,
        progress=True,
        version=version,
    )
    save_instances(instances, args.output)
    print(f"wrote {len(instances)} validation instances to {args.output}")
    return 0


def cmd_benchmark_info(args: argparse.Namespace) -> int:
    from envengineer.mapf import benchmark as bm

    v = _benchmark_version(args)
    path = bm.benchmark_path(v.name)
    rule = "solvable draws, all decided" if v.decide else "draws the solver settles within its default budget"
    print(
        f"version: {v.name} (keeps {rule}; versions {', '.join(bm.VERSIONS)}, default {bm.DEFAULT_VERSION})"
    )
    print(f"path:    {path}")
    found = bm.sha256_file(path) if path.exists() else f"missing: {bm.build_command(v.name, path)}"
    print(f"sha256:  {found} (expected {v.sha256})")
    print(
        f"shape:   agents {list(bm.AGENTS)}, sizes k..{bm.MAX_SIZE}, subsets {list(bm.SUBSETS)}, "
        f"{bm.PER_CELL} per cell and subset = {len(bm.cells()) * len(bm.SUBSETS) * bm.PER_CELL} instances"
    )
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from envengineer.mapf.scoring import load_responses, score

    instances = _load(args.instances)
    _require_solved(instances, args.instances)
    responses, tokens = load_responses(args.responses)
    report = score(instances, responses, tokens)
    print(report.markdown())
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report.to_json(), indent=1), encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from envengineer.mapf.prompt import build_prompt, render_board

    instances = _load(args.instances)
    if args.instance_id is not None:
        matches = [i for i in instances if i.id == args.instance_id]
        if not matches:
            raise InstanceFormatError(f"no instance with id {args.instance_id!r} in {args.instances}")
        inst = matches[0]
    else:
        if not 0 <= args.index < len(instances):
            raise InstanceFormatError(
                f"--index {args.index} is out of range; the file has {len(instances)} instances"
            )
        inst = instances[args.index]
    print(f"{inst.id}: {inst.size}x{inst.size}, {inst.num_agents} agents, hole ratio {inst.hole_ratio:.2f}")
    if inst.solved:
        print(
            f"optimal SoC {inst.optimal_soc}, optimal makespan {inst.optimal_makespan}, "
            f"shortest sum {inst.shortest_sum}, needs a wait: {inst.needs_wait}"
        )
    print(render_board(inst))
    if args.prompt:
        print("\n--- prompt ---")
        print(build_prompt(inst))
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from envengineer.mapf.policies import respond

    _check_output_file(args.output)
    instances = _load(args.instances)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as fh:
        for inst in instances:
            rng = np.random.default_rng(np.random.SeedSequence((args.seed, *_id_entropy(inst.id))))
            fh.write(json.dumps({"id": inst.id, "response": respond(args.policy, inst, rng)}) + "\n")
    print(f"wrote {len(instances)} {args.policy} responses to {args.output}")
    return 0


# -- helpers ----------------------------------------------------------------------------------------------
def _load(path: Path):
    from envengineer.mapf.benchmark import benchmark_name, load_benchmark
    from envengineer.mapf.instance import load_instances

    version = benchmark_name(str(path))
    return load_instances(path) if version is None else load_benchmark(version)


def _benchmark_version(args: argparse.Namespace) -> Any:
    """The ``--version`` given (``v2`` when none is): an empty or unknown name is refused, never read as
    the default."""
    from envengineer.mapf import benchmark as bm

    given = args.benchmark_version
    return bm.benchmark_version(bm.DEFAULT_VERSION if given is None else given)


def _check_output_file(path: Path) -> None:
    """Refuse an output file name that cannot be written before any work: a folder, a path under a file,
    or a folder where no file can be created (``/proc``, a read-only mount). The file's folder is made
    and a probe file created and removed there."""
    if path.is_dir():
        raise InstanceFormatError(f"{path}: is a directory; give a file name such as {path / 'out.jsonl'}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InstanceFormatError(f"{path}: {parent} is a file, not a folder; give another path")
            break
    probe = path.with_name(f".{path.name}.write-check-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise InstanceFormatError(
            f"{path}: cannot write there ({exc.strerror or exc}); give a path you can write to"
        ) from None


def _require_solved(instances, path: Path) -> None:
    unsolved = [i.id for i in instances if not i.solved]
    if unsolved:
        raise InstanceFormatError(
            f"{path}: {len(unsolved)} instances have no optima (e.g. {unsolved[0]!r}); "
            f"run `envengineer solve {path} -o SOLVED.jsonl` first"
        )


def _check_range(flag: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise ConfigError(f"{flag} {value} is out of range; use a value in [{lo}, {hi}]")


def _id_entropy(instance_id: str) -> tuple[int, ...]:
    """A stable integer tuple from an id (Python's str hash is salted per process)."""
    import hashlib

    return tuple(
        int.from_bytes(hashlib.sha256(instance_id.encode()).digest()[i : i + 4], "big") for i in (0, 4)
    )
