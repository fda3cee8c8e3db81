"""GRPO on the small policy, measured: does a round improve the warm-start, and which settings do?

Four commands:

``warm``      trains one warm-start (``policy init`` + ``sft-small``) on 2- and 3-agent boards and scores it
              (``bench_grpo_warm.py``).
``sweep``     runs GRPO variants x seeds from that warm-start and scores each result greedily on a fixed
              held-out validation set; prints per variant the mean gain over the warm-start in valid and
              optimal points with a 95 % bootstrap interval over seeds, plus the sampled diagnostics. The
              runs go in lanes: one process per core at a time, each on its share of the cores as torch
              and BLAS threads (``--lanes 1``: one after another in this process).
``table``     the sweep table of several ``sweep --json`` files.
``transfer``  does a gain carry to boards never trained on? One variant x seeds (in lanes), each scored
              on its own training boards and three held-out sets as paired gains with 95 % intervals
              (``bench_grpo_transfer.py``). ``--boards N`` trains on N boards cycled over the steps'
              prompts, 0 a fresh board per prompt; ``--variant sft-same-boards`` is the supervised
              control: the same boards learnt from the solver's plans (:data:`SFT_CONTROLS`).

The held-out set is benchmark-shaped (``build_validation_set``: wait subsets 25/50/75 %, hole ratio
uniform in [0, 0.5], seeds disjoint from the benchmark): two agents, sizes 3-8, ``--per-cell`` boards per
size and subset (16: 288 boards), and the same set for every variant and seed. Training boards exclude
it by board hash. Decoding for scoring is greedy (the evaluation's temperature 0).

Usage::

    python benchmarks/bench_grpo.py warm --out runs/bench-grpo/warm
    python benchmarks/bench_grpo.py sweep --warm runs/bench-grpo/warm/sft/checkpoint \\
        --variants preset,sparse-drgrpo --seeds 0,1,2 --steps 150 --json runs/bench-grpo/sweep.json
    python benchmarks/bench_grpo.py transfer --warm runs/bench-grpo/warm/sft/checkpoint \\
        --variant preset --seeds 0,1,2 --steps 150 --boards 300 --json runs/bench-grpo/transfer.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.loop.intervals import LEVEL, RESAMPLES, SEED, bootstrap_mean
from envengineer.machine import THREAD_VARIABLES, in_workers, lane_threads, thread_env, usable_cpus
from envengineer.mapf.benchmark import build_validation_set
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_cell, generate_round
from envengineer.mapf.instance import Instance
from envengineer.mapf.prompt import build_messages
from envengineer.mapf.validator import validate


def sparse_drgrpo(lr: float = 1e-4, *, refills: int = 0, guided: bool = False, **grpo: Any) -> dict[str, Any]:
    """The paper's sparse reward with Dr. GRPO (no per-group std scaling, no length bias), sampled at
    temperature 1 unless ``grpo`` says otherwise; ``refills`` > 0 turns on DAPO's dynamic sampling,
    ``guided`` solver guidance."""
    return {
        "guidance": {"enabled": guided},
        "reward_shape": "sparse",
        "grpo": {
            "learning_rate": lr,
            "temperature": 1.0,
            "loss_type": "dr_grpo",
            "scale_rewards": "none",
            **grpo,
        },
        "dynamic_sampling": {"enabled": True, "max_refills": refills} if refills else {"enabled": False},
    }


#: GRPO variants: overrides of the shipped grpo-small preset (top-level keys and the ``grpo:`` section).
VARIANTS: dict[str, dict[str, Any]] = {
    # the preset as shipped before solver guidance: graded reward, DAPO loss, std-scaled, temperature 1,
    # lr 1e-4
    "old": {
        "guidance": {"enabled": False},
        "reward_shape": "graded",
        "grpo": {"learning_rate": 1e-4, "temperature": 1.0, "loss_type": "dapo", "scale_rewards": "group"},
        "dynamic_sampling": {"enabled": False},
    },
    # the shipped preset, whatever it is now
    "preset": {},
    "sparse-drgrpo": sparse_drgrpo(),
    # ... sampled at 0.7: a policy closer to the greedy one that is evaluated
    "sparse-drgrpo-t07": sparse_drgrpo(temperature=0.7),
    # ... and DAPO's dynamic sampling: zero-variance groups replaced by fresh ones
    "sparse-drgrpo-t07-dyn": sparse_drgrpo(temperature=0.7, refills=4),
    "sparse-drgrpo-t07-dyn-lr3e-4": sparse_drgrpo(3e-4, temperature=0.7, refills=4),
    # ... anchored to the round's starting policy by a KL penalty (TRL keeps a reference copy)
    "sparse-drgrpo-beta": sparse_drgrpo(beta=0.04),
    # ... with a KL anchor strong enough to matter: a KL of about 0.1 costs 0.03 a token, against
    # advantages of order 0.5 (at 0.04 the anchor is about a hundredth of them)
    "sparse-drgrpo-kl03": sparse_drgrpo(beta=0.3),
    # ... and three times the rate: with the drift held by the anchor, does a larger step find signal?
    "sparse-drgrpo-kl03-lr3e-4": sparse_drgrpo(3e-4, beta=0.3),
    # four times the prompts per step (32 x 8): a less noisy gradient for about the same wall time per step
    "big-lr1e-4": sparse_drgrpo(per_device_train_batch_size=256),
    "big-lr3e-5": sparse_drgrpo(3e-5, per_device_train_batch_size=256),
    # lower learning rates with a short warm-up: Adam's first steps move every weight by about the rate,
    # whatever the gradient's signal-to-noise (10 steps at 1e-4 already cost 2.8 optimal points)
    "lr3e-5": sparse_drgrpo(3e-5, warmup_steps=10),
    "lr3e-5-t07": sparse_drgrpo(3e-5, temperature=0.7, warmup_steps=10),
    "lr1e-5-t07": sparse_drgrpo(1e-5, temperature=0.7, warmup_steps=10),
    # many small steps: the seeds' spread of where the weights drift shrinks only with the number of samples
    # (the drift's signal-to-noise ratio does not depend on the learning rate), so a long round at a low
    # rate, with or without a KL anchor that pulls the noise back towards the warm-start
    "long-lr2e-5": sparse_drgrpo(2e-5, warmup_steps=20),
    "long-lr2e-5-beta": sparse_drgrpo(2e-5, warmup_steps=20, beta=0.04),
    # solver guidance: a group with no optimal sample gets the solver's plan as its last member, so the
    # boards the policy cannot solve teach it too (envengineer.training.guidance)
    "guided": sparse_drgrpo(guided=True),
    "guided-kl03": sparse_drgrpo(beta=0.3, guided=True),
    # ... at 3x the rate: the guided runs' KL from the warm-start stays at 0.01-0.03 in 50 steps
    "guided-lr3e-4": sparse_drgrpo(3e-4, guided=True),
    "sparse-dapo-t07-dyn": {
        "guidance": {"enabled": False},
        "reward_shape": "sparse",
        "grpo": {"learning_rate": 1e-4, "temperature": 0.7, "loss_type": "dapo", "scale_rewards": "group"},
        "dynamic_sampling": {"enabled": True, "max_refills": 4},
    },
}


#: Supervised controls: a GRPO variant's boards (``--steps`` x 8 prompts) learnt from the solver's plans by
#: ``sft-small``'s trainer at GRPO's rate, step count and prompts per step, in random order. Beside a
#: ``guided`` run it says what imitating the same boards alone does.
SFT_CONTROLS: dict[str, dict[str, Any]] = {
    "sft-same-boards": {
        "length_group_batches": None,
        "sft": {"learning_rate": 1e-4, "lr_scheduler_type": "constant", "warmup_steps": 0},
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warm", help="train and score one warm-start")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--size", default="tiny")
    w.add_argument("--agents", default="2,3", help="agent counts of the warm-start data (equal shares)")
    w.add_argument("--sizes", default="3,4,5,6")
    w.add_argument("--samples", type=int, default=48000)
    w.add_argument("--steps", type=int, default=2000)
    w.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("sweep", help="GRPO variants x seeds from one warm-start")
    s.add_argument("--variants", default="old,sparse-drgrpo")
    x = sub.add_parser("transfer", help="one variant x seeds: gains on trained-on and held-out boards")
    x.add_argument("--variant", default="preset", choices=[*VARIANTS, *SFT_CONTROLS])
    x.add_argument("--train-eval", type=int, default=288, help="trained-on boards scored (at most)")
    for q in (s, x):
        q.add_argument("--warm", type=Path, required=True, help="the warm-start checkpoint folder")
        q.add_argument("--seeds", default="0,1,2")
        q.add_argument("--steps", type=int, default=150)
        q.add_argument("--sizes", default="3,4,5,6,7,8", help="training sizes (uniform data ratio)")
        q.add_argument("--hole-ratio", type=float, default=0.25)
        q.add_argument("--wait-ratio", type=float, default=0.5)
        q.add_argument("--agents", default="2", help="agent counts of the training boards (equal shares)")
        q.add_argument(
            "--max-completion-length",
            type=int,
            default=None,
            help="GRPO's completion budget and every scored answer's (default: grpo-small's for training "
            "and sft-small's for scoring, so that every plan the warm-start learned fits)",
        )
        q.add_argument(
            "--boards",
            type=int,
            default=0,
            help="distinct training boards, cycled over steps x prompts per step (0: a fresh one per prompt)",
        )
        q.add_argument("--out", type=Path, default=Path("runs/bench-grpo"))
        q.add_argument("--json", type=Path, default=None)
        q.add_argument(
            "--lanes",
            type=int,
            default=0,
            help="runs at once, each in its own process (0: one per core; 1: one after another here)",
        )
    x.set_defaults(out=Path("runs/bench-grpo/transfer"))  # apart from the sweep's runs of the same name
    for q in (w, s, x):
        q.add_argument("--per-cell", type=int, default=16, help="held-out boards per size and subset")
        q.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t = sub.add_parser("table", help="the sweep table of several --json files (runs in parallel processes)")
    t.add_argument("files", type=Path, nargs="+")
    return p.parse_args(argv)


def held_out(per_cell: int, agents: int = 2, max_size: int = 8) -> list[Instance]:
    """The fixed held-out set: ``agents`` agents, sizes 3..``max_size``, ``per_cell`` boards per size and
    wait subset (25/50/75 % need a wait).

    One agent never needs a wait: ``3 * per_cell`` boards per size, none waiting, from one seed
    (``bench_warm_start.py`` draws its sets here too, so the two scripts score the same boards).
    """
    if agents == 1:
        return [
            inst
            for n in range(3, max_size + 1)
            for inst in generate_cell(
                num_agents=1,
                size=n,
                count=3 * per_cell,
                wait_count=0,
                seed=20261205,
                split="validation",
                id_prefix=f"1agent_{n}x{n}",
            )
        ]
    return build_validation_set(per_cell, agents=(agents,), min_size=3, max_size=max_size, workers=1)


def answer_tokens() -> int:
    """The scored answers' budget unless ``--max-completion-length``: ``sft-small``'s, the longest target a
    warm-start learns to write (an answer ends at its end token, so the budget only lets a long one end)."""
    from envengineer.training.presets import load_preset

    return load_preset("sft-small", "sft").max_completion_length


def answer(model: str, instances: list[Instance], max_new_tokens: int | None = None) -> list[str]:
    """Greedy answers of a checkpoint, in the compact prompt style the small policy records."""
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    backend = HFBackend(model, device="cpu")
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens or answer_tokens())
    texts: list[str] = []
    for lo in range(0, len(instances), 64):
        conversations = [build_messages(i, style="compact") for i in instances[lo : lo + 64]]
        texts += [c.text for c in backend.generate(conversations, params)]
    return texts


def score(instances: list[Instance], texts: list[str]) -> dict[str, Any]:
    """Per-board valid/optimal flags and the rates per size."""
    verdicts = [validate(i, t) for i, t in zip(instances, texts, strict=True)]
    valid = np.array([v.valid for v in verdicts], dtype=float)
    optimal = np.array([v.optimal for v in verdicts], dtype=float)
    sizes = np.array([i.size for i in instances])
    per_size = {int(n): round(100 * float(valid[sizes == n].mean()), 1) for n in sorted(set(sizes.tolist()))}
    return {
        "valid": valid,
        "optimal": optimal,
        "valid_pct": round(100 * float(valid.mean()), 2),
        "optimal_pct": round(100 * float(optimal.mean()), 2),
        "valid_by_size": per_size,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if getattr(args, "threads", 0):
        import torch

        torch.set_num_threads(args.threads)
    if args.command == "warm":
        from bench_grpo_warm import cmd_warm  # the subcommands of their own module, which import this one

        return cmd_warm(args)
    if args.command == "transfer":
        from bench_grpo_transfer import cmd_transfer

        return cmd_transfer(args)
    return {"sweep": cmd_sweep, "table": cmd_table}[args.command](args)


def variant_preset(name: str, steps: int, max_completion_length: int | None = None) -> dict[str, Any]:
    """The grpo-small preset with a variant's overrides, ``steps`` optimizer steps and a light probe
    (``max_completion_length``: the preset's unless given, for a format with a longer scratchpad)."""
    from envengineer.training.presets import load_preset

    # a supervised control draws the preset's boards
    preset = overridden(load_preset("grpo-small", "grpo"), VARIANTS.get(name, {}))
    preset["grpo"].update(max_steps=steps, report_to="none", disable_tqdm=True, logging_steps=10)
    if max_completion_length:
        preset["max_completion_length"] = max_completion_length
    preset["probe"] = {**preset["probe"], "every": max(steps // 3, 1), "per_cell": 1}
    return preset


def overridden(preset: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset as a mapping with ``overrides``: a section (a mapping) is updated key by key, any other
    key replaced."""
    merged = preset.model_dump(mode="json")
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def train_data(
    prompts: int,
    sizes: list[int],
    hole: float,
    wait: float,
    seed: int,
    exclude: frozenset[str],
    agents: Sequence[int] = (2,),
) -> list:
    """``prompts`` training boards over ``sizes`` (uniform data ratio), agent counts in equal shares
    (one agent never waits), shuffled together so that every step mixes them. Two agents alone are the
    boards of the earlier tables, seed for seed."""
    boards: list[Instance] = []
    for k, a in enumerate(agents):
        share = prompts // len(agents) + (k < prompts % len(agents))
        config = RoundConfig.model_validate(
            {
                "sizes": {
                    n: {"data_ratio": 1.0, "hole_ratio": hole, "wait_ratio": wait if a > 1 else 0.0}
                    for n in sizes
                },
                "num_agents": a,
                "num_samples": share,
            }
        )
        boards += generate_round(config, 1000 + seed + 7919 * k, split="train", exclude=exclude)
    if len(agents) > 1:
        np.random.default_rng(seed).shuffle(boards)
    return boards


def cycled(boards: list[Instance], prompts: int) -> list[Instance]:
    """``prompts`` training prompts that repeat ``boards`` in order (passes over the same boards).

    >>> cycled(["a", "b"], 5)
    ['a', 'b', 'a', 'b', 'a']
    """
    return [boards[i % len(boards)] for i in range(prompts)]


def per_step(preset: dict[str, Any]) -> int:
    """Prompts per optimizer step: the batch's completions over the group size."""
    return preset["grpo"]["per_device_train_batch_size"] // preset["grpo"]["num_generations"]


def training_boards(
    args: argparse.Namespace, preset: dict[str, Any], seed: int, exclude: frozenset[str]
) -> list[Instance]:
    """A run's prompts, steps x prompts per step: ``--boards`` boards cycled, or (0) a fresh board each."""
    sizes = [int(s) for s in args.sizes.split(",")]
    prompts = args.steps * per_step(preset)
    agents = [int(a) for a in args.agents.split(",")]
    boards = train_data(
        args.boards or prompts, sizes, args.hole_ratio, args.wait_ratio, seed, exclude, agents
    )
    return cycled(boards, prompts)


def train_one(
    args: argparse.Namespace, variant: str, seed: int, exclude: frozenset[str]
) -> tuple[Any, list[Instance], float]:
    """One GRPO round from ``--warm``: its result, the prompts it was given, and its minutes."""
    from envengineer.training.grpo import train_round

    preset = variant_preset(variant, args.steps, args.max_completion_length)
    instances = training_boards(args, preset, seed, exclude)
    t0 = time.perf_counter()
    out = args.out / f"{variant}-s{seed}"
    if variant in SFT_CONTROLS:
        result = train_control(args, variant, instances, per_step(preset), out, seed)
    else:
        result = train_round(str(args.warm), instances, out_dir=out, preset=preset, seed=seed)
    return result, instances, (time.perf_counter() - t0) / 60


def train_control(
    args: argparse.Namespace, variant: str, instances: list[Instance], batch: int, out: Path, seed: int
) -> Any:
    """A supervised control (:data:`SFT_CONTROLS`): ``sft-small`` on the run's boards, ``batch`` a step."""
    from envengineer.training.presets import load_preset
    from envengineer.training.sft import sft

    preset = overridden(load_preset("sft-small", "sft"), SFT_CONTROLS[variant])
    preset["sft"].update(per_device_train_batch_size=batch, report_to="none", disable_tqdm=True)
    return sft(str(args.warm), instances, out_dir=out, preset=preset, seed=seed, max_steps=args.steps)


def run_one(
    args: argparse.Namespace, variant: str, seed: int, validation: list, warm: dict
) -> dict[str, Any]:
    """One ``sweep`` run: train, score the result on the held-out set, and the round's diagnostics."""
    result, _, minutes = train_one(args, variant, seed, frozenset(i.board_hash() for i in validation))
    after = score(validation, answer(str(result.checkpoint), validation, args.max_completion_length))
    history = result.metrics["log_history"]
    entropy = [e["entropy"] for e in history if "entropy" in e]
    zero = [e["frac_reward_zero_std"] for e in history if "frac_reward_zero_std" in e]
    return {
        "variant": variant,
        "seed": seed,
        "minutes": round(minutes, 2),
        "valid_pct": after["valid_pct"],
        "optimal_pct": after["optimal_pct"],
        "valid_by_size": after["valid_by_size"],
        "gain_valid": round(after["valid_pct"] - warm["valid_pct"], 2),
        "gain_optimal": round(after["optimal_pct"] - warm["optimal_pct"], 2),
        "entropy_first_last": [round(entropy[0], 3), round(entropy[-1], 3)] if entropy else None,
        "zero_std_first_last": [round(zero[0], 3), round(zero[-1], 3)] if zero else None,
        "probe": result.metrics["probe"]["rows"],
        "sampled": result.metrics["sampled"],
    }


def cmd_sweep(args: argparse.Namespace) -> int:
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        print(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    validation = held_out(args.per_cell)
    warm = score(validation, answer(str(args.warm), validation, args.max_completion_length))
    print(
        f"# {len(validation)} held-out boards; warm-start {args.warm}: valid {warm['valid_pct']} % "
        f"optimal {warm['optimal_pct']} % by size {warm['valid_by_size']}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    jobs = [(variant, seed, validation, warm) for variant in variants for seed in seeds]
    for row in finished_runs(args, run_one, jobs):
        runs.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("probe", "sampled")}), flush=True)
        if args.json:
            record = {
                "args": {k: str(v) for k, v in vars(args).items()},
                "warm": _public(warm),
                "runs": runs,
            }
            args.json.write_text(json.dumps(record, indent=2) + "\n")
    print_table(runs, variants)
    return 0


def finished_runs(
    args: argparse.Namespace, work: Callable[..., dict[str, Any]], jobs: list[tuple]
) -> Iterator[dict[str, Any]]:
    """The rows ``work(args, *job)`` of the runs in the jobs' order, in lanes of processes or in this process.

    Two torch processes that each take every core lose most of their time to each other; one thread per
    core each runs them side by side at nearly full speed. The lanes are the project's pool (spawned:
    :func:`envengineer.machine.in_workers`), its workers started under :func:`lane_threads_set`."""
    lanes = min(args.lanes or usable_cpus(), len(jobs))
    if lanes <= 1:
        for job in jobs:
            yield work(args, *job)
        return
    threads = args.threads or lane_threads(lanes)
    print(f"# {len(jobs)} runs in {lanes} lanes of {threads} thread(s)", flush=True)
    with lane_threads_set(threads):
        yield from in_workers(partial(_in_lane, work, args, threads), jobs, lanes, [1.0] * len(jobs))


@contextlib.contextmanager
def lane_threads_set(threads: int) -> Iterator[None]:
    """The thread variables at ``threads`` (:func:`thread_env`) inside, as they were after: a spawned
    worker starts with this environment (numpy loads OpenBLAS before any job runs), while this process
    has set up its own thread pools already."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(thread_env(threads))
    try:
        yield
    finally:
        for name in THREAD_VARIABLES:
            del os.environ[name]
        os.environ.update({name: value for name, value in saved.items() if value is not None})


def _in_lane(work: Callable[..., Any], args: argparse.Namespace, threads: int, job: tuple) -> Any:
    """One run in a lane: torch on the lane's threads (as its environment says), warnings logged."""
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.WARNING)
    return work(args, *job)


def print_table(runs: list[dict[str, Any]], variants: list[str]) -> None:
    """Per variant: mean rates, the mean gains with a 95 % bootstrap interval over seeds, minutes per run."""
    print(
        "\n| variant | seeds | valid % | optimal % | gain valid (95 % CI) | gain optimal (95 % CI) "
        "| min/run |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in variants:
        rows = [r for r in runs if r["variant"] == variant]
        gv = _ci(bootstrap_mean([r["gain_valid"] for r in rows]))
        go = _ci(bootstrap_mean([r["gain_optimal"] for r in rows]))
        print(
            f"| {variant} | {len(rows)} | {np.mean([r['valid_pct'] for r in rows]):.1f} "
            f"| {np.mean([r['optimal_pct'] for r in rows]):.1f} "
            f"| {gv} | {go} "
            f"| {np.mean([r['minutes'] for r in rows]):.1f} |"
        )


def cmd_table(args: argparse.Namespace) -> int:
    runs: list[dict[str, Any]] = []
    warms = set()
    for path in args.files:
        record = json.loads(path.read_text())
        warms.add(json.dumps(record["warm"], sort_keys=True))
        runs += record["runs"]
    if len(warms) > 1:  # gains against different warm-starts or held-out sets do not pool
        print("the files score different warm-starts or held-out sets; not pooled", file=sys.stderr)
        return 2
    print_table(runs, list(dict.fromkeys(r["variant"] for r in runs)))
    return 0


def paired_gain(
    before: Sequence[Sequence[float]],
    after: Sequence[Sequence[float]],
    *,
    shared_boards: bool,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """The mean gain ``after - before`` in points over seeds and boards, with a 95 % bootstrap interval.

    ``before[s]`` and ``after[s]`` are seed ``s``'s per-board flags (0/1), paired by position. A seed's
    gain is the mean of its boards' differences; the gain is the mean over seeds. Each resample draws the
    seeds with replacement and the boards with replacement: with ``shared_boards`` (every seed scored the
    same boards, the held-out sets) one draw of board indices serves all seeds, so a board's pairing holds
    across them; otherwise (each seed's own training boards) each drawn seed draws its own boards. One
    seed: no interval (``low``/``high`` None), as :func:`_ci` prints it.

    >>> g = paired_gain([[0, 0, 1], [0, 0, 1]], [[1, 0, 1], [1, 1, 1]], shared_boards=True)
    >>> g["per_seed"], g["mean"], g["warm_pct"], g["after_pct"]
    ([33.33, 66.67], 50.0, 33.33, 83.33)
    """
    diffs = [100 * (np.asarray(a, float) - np.asarray(b, float)) for b, a in zip(before, after, strict=True)]
    per_seed = [float(d.mean()) for d in diffs]
    out = {
        "seeds": len(diffs),
        "boards": [len(d) for d in diffs],
        "warm_pct": round(100 * float(np.mean([np.mean(b) for b in before])), 2),
        "after_pct": round(100 * float(np.mean([np.mean(a) for a in after])), 2),
        "per_seed": [round(g, 2) for g in per_seed],
        "mean": round(float(np.mean(per_seed)), 2),
        "low": None,
        "high": None,
    }
    if len(diffs) > 1:
        rng = np.random.default_rng(seed)
        means = (
            _shared_resamples(diffs, resamples, rng)
            if shared_boards
            else _own_resamples(diffs, resamples, rng)
        )
        low, high = np.percentile(means, [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2])
        out.update(low=round(float(low), 2), high=round(float(high), 2))
    return out


def _shared_resamples(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resampled gains: seeds drawn, and one board draw for all of them (as counts per seed and board)."""
    d = np.stack(diffs)  # seeds x boards
    seeds, boards = d.shape
    w_seed = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=resamples) / seeds
    w_board = rng.multinomial(boards, np.full(boards, 1 / boards), size=resamples) / boards
    return ((w_seed @ d) * w_board).sum(axis=1)


def _own_resamples(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resampled gains: seeds drawn, and each drawn seed's boards drawn from its own (independently)."""
    seeds = len(diffs)
    pick = rng.integers(0, seeds, size=(resamples, seeds))
    total = np.zeros(resamples)
    for slot in range(seeds):
        for s, d in enumerate(diffs):
            rows = pick[:, slot] == s
            counts = rng.multinomial(len(d), np.full(len(d), 1 / len(d)), size=int(rows.sum()))
            total[rows] += counts @ d / len(d)
    return total / seeds


def _ci(b: dict[str, Any]) -> str:
    """A bootstrap mean as ``+m [low, high]`` (no interval from a single seed)."""
    if b["low"] is None:
        return f"{b['mean']:+.1f} [one seed]"
    return f"{b['mean']:+.1f} [{b['low']:+.1f}, {b['high']:+.1f}]"


def _public(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in ("valid", "optimal")}


if __name__ == "__main__":
    sys.exit(main())
