"""Each round's heavy stages as their own processes: training (GRPO, SFT, the SFT warm-start) and GPU
evaluation.

The loop itself stays one process (one ledger writer, one engineer). With ``launch.stages: subprocess``
(``auto`` picks it for multi-process, accelerate/DeepSpeed or vLLM experiments) a training round is::

    accelerate launch --config_file CFG --num_processes N -m envengineer.cli train \\
        --instances ROUND/train/instances.jsonl.gz --out ROUND/train --grpo PRESET --epochs E --seed S ...

(``torchrun --standalone --nproc_per_node N -m envengineer.cli train ...`` without an accelerate config,
``python -m envengineer.cli train ...`` for one process; ``envengineer.cli sft ... --preset PRESET`` for
``training.learner: sft``), and a vLLM evaluation is
``python -m envengineer.loop.stages evaluate ...``. Every stage returns its GPU memory when its process
exits, which an in-process vLLM engine never does. A stage whose process fails is started again
``launch.retries`` times (training restarts the round; evaluation resumes its ``responses.jsonl``); then
the loop stops with a one-line error, and ``envengineer run --resume`` continues from the ledger.

The stage's stdout and stderr go to ``OUT/stage.log`` (the last lines are quoted when it fails).

Decision (docs/loop.md): on a CPU the stages stay in the loop's process by default: a subprocess pays
the start-up (imports of torch, transformers and TRL, the model load) once more per stage, and there is no
GPU memory to return. ``launch.stages: subprocess`` runs the same path on a CPU (the tests do, with
2 processes under torchrun).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.loop.experiment import Experiment, LaunchSettings
from envengineer.mapf.instance import Instance, save_instances

log = logging.getLogger(__name__)

#: Lines of a failed stage's log quoted in the error.
_TAIL_LINES = 15


class StageFailed(EnvEngineerError):
    """A stage's process exited non-zero on every attempt."""


# -- decisions ---------------------------------------------------------------------------------------------
def uses_subprocesses(exp: Experiment) -> bool:
    """Whether training runs as launched subprocesses (``launch.stages``, ``auto`` resolved)."""
    launch = exp.launch
    if launch.stages != "auto":
        return launch.stages == "subprocess"
    return bool(
        launch.processes > 1
        or launch.accelerate_config
        or launch.deepspeed_config
        or launch.launcher in ("accelerate", "torchrun")
        or exp.evaluation.backend == "vllm"
    )


def evaluates_in_subprocess(exp: Experiment) -> bool:
    """Whether validation and benchmark answers come from a subprocess (``launch.evaluation`` resolved)."""
    if exp.scripted:
        return False
    if exp.launch.evaluation != "auto":
        return exp.launch.evaluation == "subprocess"
    return uses_subprocesses(exp) and exp.evaluation.backend == "vllm"


def engineer_backend(exp: Experiment) -> str:
    """The backend an LLM engineer uses in the loop's process.

    When evaluation runs in a subprocess because its backend is vLLM, the loop's own process must not start
    a vLLM engine (it would hold its GPU memory through the next training round); the engineer's few answers
    per run then come from the ``hf`` backend, which returns its memory when released.
    """
    if exp.evaluation.backend == "vllm" and evaluates_in_subprocess(exp):
        return "hf"
    return exp.evaluation.backend


def launcher(launch: LaunchSettings) -> str:
    """The launcher actually used: ``accelerate``, ``torchrun`` or ``python``.

    >>> launcher(LaunchSettings(processes=2)), launcher(LaunchSettings()), launcher(
    ...     LaunchSettings(accelerate_config="configs/accelerate/zero3.yaml"))
    ('torchrun', 'python', 'accelerate')
    """
    if launch.launcher != "auto":
        return launch.launcher
    if launch.accelerate_config or launch.deepspeed_config:
        return "accelerate"
    return "torchrun" if launch.processes > 1 else "python"


def check_launch(exp: Experiment) -> list[str]:
    """Problems with ``launch`` that the schema cannot see (preflight): missing files, wrong combinations."""
    launch = exp.launch
    problems: list[str] = []
    for key in ("accelerate_config", "deepspeed_config"):
        value = getattr(launch, key)
        if value and not Path(value).is_file():
            problems.append(
                f"launch.{key}: {value} is not a file (paths are relative to the working directory)"
            )
    kind = launcher(launch)
    if launch.deepspeed_config and kind != "accelerate":
        problems.append(f"launch.deepspeed_config needs launcher 'accelerate', not {kind!r}")
    if kind == "python" and launch.processes > 1:
        problems.append(f"launch.processes={launch.processes} needs launcher 'torchrun' or 'accelerate'")
    if launch.stages == "inprocess" and (launch.processes > 1 or kind != "python"):
        problems.append(
            "launch.stages 'inprocess' runs one process; drop processes/launcher or use subprocess"
        )
    if uses_subprocesses(exp) and exp.training.learner == "teach":
        problems.append(
            "training.learner 'teach' runs in the loop's process (a CPU learner for small policies); "
            "set launch.stages to inprocess or use learner 'grpo' or 'sft'"
        )
    if uses_subprocesses(exp) and kind != "python":
        module = {"accelerate": "accelerate", "torchrun": "torch"}[kind]
        import importlib.util

        if importlib.util.find_spec(module) is None:
            problems.append(f"launch: the {kind} launcher needs {module}; pip install 'envengineer[train]'")
    return problems


# -- commands ----------------------------------------------------------------------------------------------
def round_command(exp: Experiment) -> str:
    """The ``envengineer`` subcommand of a launched round: ``sft`` for learner sft, else ``train``."""
    return "sft" if exp.training.learner == "sft" else "train"


def launch_prefix(launch: LaunchSettings) -> list[str]:
    """The launcher part of a training command, up to and including ``-m``."""
    kind = launcher(launch)
    if kind == "python":
        return [sys.executable, "-m"]
    if kind == "torchrun":
        return [_script("torchrun"), "--standalone", "--nproc_per_node", str(launch.processes), "-m"]
    cmd = [_script("accelerate"), "launch"]
    if launch.accelerate_config:
        cmd += ["--config_file", launch.accelerate_config]
    if launch.deepspeed_config:
        cmd += ["--use_deepspeed", "--deepspeed_config_file", launch.deepspeed_config]
    cmd += ["--num_processes", str(launch.processes)]
    if not launch.accelerate_config and launch.processes > 1:
        cmd += ["--multi_gpu"] if _has_gpu() else []
    return [*cmd, "-m"]


def train_command(
    exp: Experiment,
    kind: str,
    *,
    model: str | None,
    instances: Path,
    out_dir: Path,
    preset: str,
    seed: int,
    epochs: float | None = None,
    max_steps: int | None = None,
) -> list[str]:
    """``[launcher...] -m envengineer.cli train|sft --instances F --out D ...`` for one round."""
    cmd = [*launch_prefix(exp.launch), "envengineer.cli", kind, "--instances", str(instances)]
    cmd += ["--out", str(out_dir), "--grpo" if kind == "train" else "--preset", preset, "--seed", str(seed)]
    if model is not None:
        cmd += ["--model", model]
    if epochs is not None:
        cmd += ["--epochs", _number(epochs)]
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    return cmd


def eval_command(
    experiment_file: Path, *, model: str | None, instances: Path, out_dir: Path, seed: int
) -> list[str]:
    """``python -m envengineer.loop.stages evaluate ...``: one process; vLLM spreads over GPUs itself."""
    cmd = [sys.executable, "-m", "envengineer.loop.stages", "evaluate", "--experiment", str(experiment_file)]
    cmd += ["--instances", str(instances), "--out", str(out_dir), "--seed", str(seed)]
    if model is not None:
        cmd += ["--model", model]
    return cmd


def run_stage(cmd: Sequence[str], *, log_path: Path, retries: int, what: str) -> None:
    """Run ``cmd`` (stdout and stderr to ``log_path``) until it succeeds, at most ``1 + retries`` times.

    Raises:
        StageFailed: every attempt exited non-zero; the message quotes the log's last lines.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for attempt in range(1, retries + 2):
        log.info("%s: %s (attempt %d, log %s)", what, shlex.join(cmd), attempt, log_path)
        t0 = time.perf_counter()
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"\n### attempt {attempt}: {shlex.join(cmd)}\n")
            fh.flush()
            code = subprocess.run(
                list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=env, check=False
            ).returncode
        if code == 0:
            log.info("%s: done in %.1f s", what, time.perf_counter() - t0)
            return
        log.warning("%s: exit code %d on attempt %d; last lines:\n%s", what, code, attempt, _tail(log_path))
    raise StageFailed(
        f"{what} failed {retries + 1} time(s) (exit code {code}); see {log_path} (last line: "
        f"{_tail(log_path, 1) or 'none'}); fix the cause and continue with `envengineer run --resume`"
    )


# -- the loop's components ---------------------------------------------------------------------------------
def preset_argument(preset: Any, out: Path) -> str:
    """A preset as a stage's command line takes it: a name or path as given; a preset object (the one
    ``training.report_to`` makes, its trackers written in) as a YAML file in ``out``, defaults written out."""
    if isinstance(preset, str | Path):
        return str(preset)
    from envengineer.training.presets import preset_to_yaml

    path = out / "preset.in.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(preset_to_yaml(preset), encoding="utf-8")
    return str(path)


class SubprocessTrainer:
    """A :class:`~envengineer.loop.runner.Trainer` that launches ``envengineer.cli train`` per round."""

    kind = "train"

    def __init__(self, exp: Experiment) -> None:
        self.exp = exp

    def __call__(
        self,
        model: str | None,
        instances: Sequence[Instance],
        *,
        out_dir: Path,
        preset: str,
        seed: int,
        max_steps: int | None,
        epochs: float | None = None,
    ) -> dict[str, Any]:
        out = Path(out_dir)
        data = save_instances(instances, out / "instances.jsonl.gz")
        cmd = train_command(
            self.exp, self.kind, model=model, instances=data, out_dir=out,
            preset=preset_argument(preset, out), seed=seed, epochs=epochs, max_steps=max_steps,
        )  # fmt: skip
        run_stage(cmd, log_path=out / "stage.log", retries=self.exp.launch.retries, what=f"{self.kind} {out}")
        from envengineer.loop.rundir import read_json

        metrics = read_json(out / "metrics.json")
        return {
            "checkpoint": metrics.get("checkpoint", str(out / "checkpoint")),
            "steps": metrics.get("steps", 0),
            "seconds": metrics.get("seconds", 0.0),
            "metrics": {**metrics, "command": shlex.join(cmd)},
        }


class SubprocessWarmStarter(SubprocessTrainer):
    """Supervised fine-tuning as ``envengineer.cli sft`` in its own process(es): the warm-start, and each
    round of ``training.learner: sft``."""

    kind = "sft"


class SubprocessEvaluator:
    """An :class:`~envengineer.loop.runner.Evaluator` answering in ``python -m envengineer.loop.stages``."""

    def __init__(self, experiment_file: Path, retries: int) -> None:
        self.experiment_file = experiment_file
        self.retries = retries

    def __call__(
        self,
        model: str | None,
        instances: Sequence[Instance],
        *,
        out_dir: Path,
        experiment: Experiment,
        seed: int,
        progress: bool,
    ) -> dict[str, Any]:
        out = Path(out_dir)
        data = save_instances(instances, out / "instances.jsonl.gz")
        cmd = eval_command(self.experiment_file, model=model, instances=data, out_dir=out, seed=seed)
        run_stage(cmd, log_path=out / "stage.log", retries=self.retries, what=f"evaluation {out}")
        from envengineer.loop.rundir import read_json

        return read_json(out / "scores.json")


def subprocess_components(exp: Experiment, run_dir: Path) -> dict[str, Any]:
    """The components the experiment runs as subprocesses (field names of :class:`.components.Components`)."""
    out: dict[str, Any] = {}
    if uses_subprocesses(exp):
        out["trainer"] = SubprocessTrainer(exp)
        out["sft_trainer"] = SubprocessWarmStarter(exp)
        out["warm_starter"] = SubprocessWarmStarter(exp)
    if evaluates_in_subprocess(exp):
        out["evaluator"] = SubprocessEvaluator(Path(run_dir) / "experiment.yaml", exp.launch.retries)
    return out


# -- the dry run -------------------------------------------------------------------------------------------
def planned_commands(exp: Experiment, run_dir: Path) -> list[tuple[str, str]]:
    """``(label, command)`` of every stage process a run launches, exactly as it will launch them.

    Seeds and paths are the run's own (checkpoints are ``round_NN/train/checkpoint``); only the model of a
    cached warm-start may differ (the cache's copy).
    """
    from envengineer.loop.rundir import RunDir
    from envengineer.loop.seeds import round_seed

    rd = RunDir(run_dir)
    cmds: list[tuple[str, str]] = []
    model = exp.policy or exp.model
    if uses_subprocesses(exp) and exp.trains:
        if exp.warm_start.enabled:
            d = rd.root / "warm_start"
            cmd = train_command(
                exp, "sft", model=exp.model, instances=d / "instances.jsonl.gz", out_dir=d,
                preset=exp.warm_start.preset, seed=round_seed(exp.seeds.training, "warm_start", 0),
                max_steps=exp.warm_start.max_steps,
            )  # fmt: skip
            cmds.append(("warm start", shlex.join(cmd)))
            model = str(d / "checkpoint")
    for r in range(exp.rounds):
        d = rd.round_dir(r) / "train"
        if uses_subprocesses(exp) and exp.trains:
            cmd = train_command(
                exp, round_command(exp), model=model, instances=d / "instances.jsonl.gz", out_dir=d,
                preset=exp.training.preset, seed=round_seed(exp.seeds.training, "training", r),
                epochs=exp.epochs_per_round, max_steps=exp.training.max_steps,
            )  # fmt: skip
            cmds.append((f"round {r} train", shlex.join(cmd)))
            model = str(d / "checkpoint")
        if evaluates_in_subprocess(exp):
            v = rd.round_dir(r) / "validation"
            cmd = eval_command(
                rd.experiment_path, model=model, instances=v / "instances.jsonl.gz", out_dir=v,
                seed=round_seed(exp.seeds.evaluation, "validation", r),
            )  # fmt: skip
            cmds.append((f"round {r} validation", shlex.join(cmd)))
    if evaluates_in_subprocess(exp):
        b = rd.benchmark_dir
        cmd = eval_command(
            rd.experiment_path, model=model, instances=b / "instances.jsonl.gz", out_dir=b,
            seed=round_seed(exp.seeds.evaluation, "benchmark", 0),
        )  # fmt: skip
        cmds.append(("benchmark", shlex.join(cmd)))
    return cmds


def _script(name: str) -> str:
    """The console script ``name`` of this interpreter's environment (falling back to ``PATH``)."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"launch: the {name} command is not installed; pip install 'envengineer[train]'")
    return found


def _has_gpu() -> bool:
    from envengineer.training.grpo import gpu_available

    return gpu_available()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(x for x in text[-lines:] if x.strip())[-2000:]
