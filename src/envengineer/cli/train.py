"""Training commands: ``envengineer train`` (one GRPO round) and ``envengineer sft`` (warm-start).

Both generate the round's instances from a round configuration (or read them, ``--instances``), train, and
write a checkpoint folder that ``envengineer eval`` and the next round load. Torch and TRL are imported only
when a command runs.

Every command that trains (these two and ``envengineer teach``) goes one way from its arguments to its
trainer, whichever the data source: :func:`data_source` reads ``--round`` or ``--instances`` and
``--exclude``, :func:`checked_preset` the preset with ``--report-to``, :meth:`DataSource.load` generates
the round when there is one, and one call hands every option to the trainer.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envengineer.argtypes import nonneg_int, pos_float, pos_int
from envengineer.cli.options import add_data_source, add_exclude, add_out, add_seed, command

if TYPE_CHECKING:
    from envengineer.mapf.config import RoundConfig
    from envengineer.mapf.instance import Instance
    from envengineer.training.grpo import TrainResult

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "train",
        cmd_train,
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

    p = command(
        sub,
        "sft",
        cmd_sft,
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
    add_seed(p, "training seed (default 0)")
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
    add_out(p, "output folder", required=True)


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
    """``instances`` without those on a held-out board, with a log line saying how many were dropped
    (when there were held-out boards to drop, i.e. an ``--exclude`` file, or something was dropped).

    Raises:
        InstanceFormatError: every instance is on a held-out board.
    """
    from envengineer.errors import InstanceFormatError

    kept = [i for i in instances if i.board_hash() not in hashes]
    dropped = len(instances) - len(kept)
    if dropped or hashes:  # said when --exclude was given or something went, never "dropped 0" unasked
        log.warning(
            "%s: dropped %d of %d instances whose boards are in an --exclude file",
            source, dropped, len(instances),
        )  # fmt: skip
    if not kept:
        raise InstanceFormatError(f"{source}: every instance is on a held-out board; nothing to train on")
    return kept


@dataclass(frozen=True)
class DataSource:
    """The data source of a training command, read and checked but not yet generated: the instances of
    ``--instances`` without those on an ``--exclude`` board, or the configuration of ``--round`` with the
    boards its generator must not draw (the packaged benchmark's and every ``--exclude`` file's) and the
    generator's seed."""

    instances: list[Instance] | None = None
    config: RoundConfig | None = None
    exclude: frozenset[str] = frozenset()
    seed: int = 0

    def load(self, out: Path) -> tuple[list[Instance], float]:
        """The training instances and the seconds their generation took (0 for ``--instances``); a round
        is generated here and recorded in ``out`` (``manifest.jsonl``, ``round.yaml``)."""
        if self.config is None:
            return list(self.instances or []), 0.0
        from envengineer.training.grpo import generate_round_data

        return generate_round_data(self.config, out, seed=self.seed, exclude=self.exclude)


def check_out_dir(out: Path) -> None:
    """Refuse an output folder that cannot be written before any work: a file, a path under a file, or a
    folder where no file can be created (a read-only place such as ``/proc``). Creates the folder.

    Raises:
        ConfigError: with the path and what to give instead.
    """
    import os

    from envengineer.errors import ConfigError

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a folder; give a new or existing folder")
    probe = out / f".envengineer-write-check-{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: cannot write there ({exc.strerror or exc}); give a folder you can write to"
        ) from None


def data_source(args: argparse.Namespace) -> DataSource:
    """What :func:`add_data_source` and :func:`add_exclude` parsed, read before anything costly: a bad
    file is a one-line error even without the training extra. The generator's seed is ``--data-seed``
    where the command has one and it is given, else ``--seed``."""
    from envengineer.mapf.config import RoundConfig

    if args.instances is not None:  # the caller's own data: only --exclude files are held out of it
        instances = drop_held_out(
            solved_instances(args.instances), held_out_hashes(args.exclude, benchmark=False), args.instances
        )
        return DataSource(instances=instances)
    config = RoundConfig.load(args.round)
    exclude = held_out_hashes(args.exclude)
    log.info("excluding %d held-out boards by hash: the generator draws none of them", len(exclude))
    data_seed = getattr(args, "data_seed", None)
    return DataSource(config=config, exclude=exclude, seed=args.seed if data_seed is None else data_seed)


def checked_preset(given: str | None, report_to: str | None, kind: str) -> Any:
    """The trainer's preset: ``given`` (else the shipped one for this hardware) with ``--report-to``'s
    trackers, checked against TRL before any board is generated. Checks the training extra first."""
    from envengineer.integrations.trackers import preset_with_report_to
    from envengineer.training.grpo import require_train_deps
    from envengineer.training.presets import load_preset

    require_train_deps()
    preset = load_preset(preset_with_report_to(_preset_source(given, kind), report_to, kind), kind)
    preset.trl_options()  # fail on a bad preset before spending time on generation
    return preset


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
    from envengineer.training.grpo import train_round

    return _train(train_round, args, "grpo", args.grpo, reward_shape=args.reward_shape)


def cmd_sft(args: argparse.Namespace) -> int:
    from envengineer.training.sft import sft

    return _train(sft, args, "sft", args.preset)


def _train(trainer: Any, args: argparse.Namespace, kind: str, preset: str | None, **options: Any) -> int:
    """The one call of ``trainer`` (``train_round`` or ``sft``) with the data source's instances, the
    checked ``kind`` preset and every option ``train`` and ``sft`` share; ``options``: the command's own."""
    check_out_dir(args.out)
    source = data_source(args)
    checked = checked_preset(preset, args.report_to, kind)
    instances, generate_s = source.load(args.out)
    result = trainer(
        args.model,
        instances,
        out_dir=args.out,
        seed=args.seed,
        preset=checked,
        epochs=args.epochs,
        max_steps=args.max_steps,
        _generate_seconds=generate_s,
        **options,
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
