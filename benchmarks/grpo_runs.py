"""GRPO runs from a warm-start, for ``bench_grpo.py`` and ``bench_teach.py``: the variants, their presets,
the training boards, one run, and runs in lanes of processes.

A library module (no ``__main__``): it imports no script. ``bench_grpo.py`` has the commands that use it
(``sweep``, ``table``; ``warm`` and ``transfer`` in :mod:`grpo_warm` and :mod:`grpo_transfer`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.machine import THREAD_VARIABLES, in_workers, lane_threads, thread_env, usable_cpus
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round
from envengineer.mapf.instance import Instance


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
