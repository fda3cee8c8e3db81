"""Training commands: ``envengineer train`` (one GRPO round) and ``envengineer sft`` (warm-start).

Both generate the round's instances from a round configuration, train, and write a checkpoint folder that
``envengineer eval`` and the next round load. Torch and TRL are imported only when a command runs.

Under ``accelerate launch`` run the module directly (it takes the same arguments, ``train`` by default)::

    accelerate launch --config_file configs/accelerate/zero3.yaml -m envengineer.cli.train \\
        --model Qwen/Qwen3-4B --round round.yaml --out runs/r0
    accelerate launch -m envengineer.cli.train sft --round round.yaml --out runs/sft
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envengineer.argtypes import nonneg_int, pos_float, pos_int

if TYPE_CHECKING:
    from envengineer.training.grpo import TrainResult

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="one GRPO training round on a round configuration (TRL GRPOTrainer)",
        description="Generate the round's training instances from ROUND.yaml, train one GRPO round with "
        "the testbed's reward and save OUT/checkpoint (weights + tokenizer), OUT/metrics.json and "
        "OUT/manifest.jsonl. Hyper-parameters come from a GRPO preset (--grpo): the shipped grpo-cpu "
        "without a GPU, grpo-gpu with one.",
    )
    _common(p)
    p.add_argument(
        "--grpo",
        default=None,
        metavar="GRPO.yaml",
        help="GRPO preset: a YAML file or a shipped name (grpo-cpu, grpo-gpu); default: by hardware",
    )
    p.add_argument(
        "--reward-shape",
        choices=("graded", "sparse", "dense"),
        default=None,
        help="override the preset's reward",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "sft",
        help="supervised warm-start on the solver's optimal plans (TRL SFTTrainer)",
        description="Generate the round's instances from ROUND.yaml and fine-tune the model on their "
        "optimal answers, so a small model learns the answer format before GRPO. Writes OUT/checkpoint "
        "and OUT/metrics.json.",
    )
    _common(p)
    p.add_argument(
        "--preset",
        default=None,
        metavar="SFT.yaml",
        help="SFT preset: a YAML file or a shipped name (sft-cpu, sft-gpu); default: by hardware",
    )
    p.set_defaults(func=cmd_sft)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=None,
        help="hub id or local folder (e.g. Qwen/Qwen3-4B for the GPU preset); default: the embedded "
        "SmolLM2-135M",
    )
    add_data_source(p, "; what the round loop launches")
    p.add_argument(
        "--epochs", type=pos_float, default=None, help="epochs over the round's data (overrides the preset)"
    )
    p.add_argument("--seed", type=nonneg_int, default=0, help="training seed (default 0)")
    p.add_argument(
        "--data-seed", type=nonneg_int, default=None, help="seed of the instance generator (default: --seed)"
    )
    p.add_argument("--max-steps", type=pos_int, default=None, help="stop after this many optimizer steps")
    p.add_argument(
        "--report-to",
        metavar="TRACKERS",
        help="TRL's trackers, e.g. tensorboard or tensorboard,wandb (overrides the preset's report_to)",
    )
    add_exclude(p)
    p.add_argument("--out", type=Path, required=True, help="output folder")


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


def held_out_hashes(files: Sequence[Path], *, benchmark: bool = True) -> frozenset[str]:
    """Board hashes no training instance may have: every ``--exclude`` file's and, with ``benchmark``,
    the packaged benchmark's."""
    from envengineer.mapf.benchmark import load_benchmark
    from envengineer.mapf.instance import load_instances

    hashes = {i.board_hash() for i in load_benchmark()} if benchmark else set()
    for path in files:
        hashes |= {i.board_hash() for i in load_instances(path)}
    return frozenset(hashes)


def drop_held_out(instances: list, hashes: frozenset[str], source: Path) -> list:
    """``instances`` without those on a held-out board, with a log line saying how many were dropped.

    Raises:
        InstanceFormatError: every instance is on a held-out board.
    """
    from envengineer.errors import InstanceFormatError

    kept = [i for i in instances if i.board_hash() not in hashes]
    dropped = len(instances) - len(kept)
    log.warning(
        "%s: dropped %d of %d instances whose boards are in an --exclude file",
        source, dropped, len(instances),
    )  # fmt: skip
    if not kept:
        raise InstanceFormatError(f"{source}: every instance is on a held-out board; nothing to train on")
    return kept


def _preset_source(given: str | None, kind: str) -> str:
    from envengineer.training.grpo import gpu_available
    from envengineer.training.presets import default_preset_name

    if given is not None:
        return given
    gpu = gpu_available()
    name = default_preset_name(kind, gpu=gpu)  # type: ignore[arg-type]
    log.info("%s preset: %s (%s)", kind.upper(), name, "a GPU is present" if gpu else "no GPU found")
    return name


def cmd_train(args: argparse.Namespace) -> int:
    from envengineer.integrations.trackers import preset_with_report_to
    from envengineer.mapf.config import RoundConfig
    from envengineer.training.grpo import require_train_deps, train_round, train_round_from_config

    if args.instances is not None:  # the caller's own data: only --exclude files are held out of it
        instances = drop_held_out(
            solved_instances(args.instances), held_out_hashes(args.exclude, benchmark=False), args.instances
        )
        require_train_deps()
        result = train_round(
            args.model,
            instances,
            out_dir=args.out,
            seed=args.seed,
            preset=_preset_source(args.grpo, "grpo"),
            epochs=args.epochs,
            reward_shape=args.reward_shape,
            max_steps=args.max_steps,
        )
        _report(result)
        return 0
    config = RoundConfig.load(args.round)
    require_train_deps()
    exclude = held_out_hashes(args.exclude)
    log.info("excluding %d held-out boards by hash: the generator draws none of them", len(exclude))
    result = train_round_from_config(
        args.model,
        config,
        out_dir=args.out,
        seed=args.seed,
        data_seed=args.data_seed,
        preset=preset_with_report_to(_preset_source(args.grpo, "grpo"), args.report_to, "grpo"),
        epochs=args.epochs,
        reward_shape=args.reward_shape,
        exclude=exclude,
        max_steps=args.max_steps,
    )
    _report(result)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from envengineer.integrations.trackers import preset_with_report_to
    from envengineer.mapf.config import RoundConfig
    from envengineer.training.grpo import require_train_deps
    from envengineer.training.sft import sft, sft_from_config

    if args.instances is not None:  # the caller's own data: only --exclude files are held out of it
        instances = drop_held_out(
            solved_instances(args.instances), held_out_hashes(args.exclude, benchmark=False), args.instances
        )
        require_train_deps()
        result = sft(
            args.model,
            instances,
            out_dir=args.out,
            seed=args.seed,
            preset=_preset_source(args.preset, "sft"),
            epochs=args.epochs,
            max_steps=args.max_steps,
        )
        _report(result)
        return 0
    config = RoundConfig.load(args.round)
    require_train_deps()
    exclude = held_out_hashes(args.exclude)
    log.info("excluding %d held-out boards by hash: the generator draws none of them", len(exclude))
    result = sft_from_config(
        args.model,
        config,
        out_dir=args.out,
        seed=args.seed,
        data_seed=args.data_seed,
        preset=preset_with_report_to(_preset_source(args.preset, "sft"), args.report_to, "sft"),
        exclude=exclude,
        epochs=args.epochs,
        max_steps=args.max_steps,
    )
    _report(result)
    return 0


def solved_instances(path: Path) -> list:
    from envengineer.errors import InstanceFormatError
    from envengineer.mapf.instance import load_instances

    instances = load_instances(path)
    unsolved = [i.id for i in instances if not i.solved]
    if not instances or unsolved:
        raise InstanceFormatError(
            f"{path}: training needs solved instances ({len(unsolved)} of {len(instances)} have no optima); "
            f"run `envengineer solve {path} -o SOLVED.jsonl` first"
        )
    return instances


def _report(result: TrainResult) -> None:
    from envengineer.training.grpo import is_main_process

    if not is_main_process():
        return
    timing = result.metrics.get("timing", {})
    print(f"steps: {result.steps}  seconds: {result.seconds:.1f}")
    if timing.get("step_s_mean") is not None:
        share = timing.get("outside_model_share")
        print(f"seconds per step: {timing['step_s_mean']:.2f}  outside the model: {100 * (share or 0):.2f}%")
    print(f"checkpoint: {result.checkpoint}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m envengineer.cli.train [train|sft] ARGS``; ``train`` when none is named."""
    from envengineer.cli import main as cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("train", "sft"):
        args = ["train", *args]
    return cli_main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
