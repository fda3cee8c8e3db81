"""The tasks of a sweep: one per distinct run x seed, each with its run directory and resources.

A task names the experiment file, the ``--set`` overrides as written on the command line, the seed (or
none), the run's name and its run directory, so that any executor can run it the way ``envengineer run``
does: in this process (:class:`~envengineer.sweep.executors.SequentialExecutor`) or as ``envengineer run``
in a subprocess of a Ray task (:class:`~envengineer.sweep.executors.RayExecutor`). Both load the
experiment with the same overrides, so the run directories are equal.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import SEED_LIMIT, Experiment, load_experiment, parse_override
from envengineer.loop.rundir import RunDir
from envengineer.loop.seeds import with_seed

#: More seeds than this in one sweep is a typo (``0-10000``), not an experiment.
MAX_SEEDS = 1000
#: GPU training presets and SFT presets have ``gpu`` in their names (``gpu``, ``gpu-thinking``, ``sft-gpu``).
_GPU_WORD = re.compile(r"(^|[^a-z])gpu([^a-z]|$)")


@dataclass(frozen=True)
class SweepTask:
    """One run of a sweep: what to run, where, and what it asks the scheduler for."""

    name: str
    file: Path
    run_dir: Path
    seed: int | None = None
    sets: tuple[str, ...] = ()
    report: bool = True
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def overrides(self) -> dict[str, Any]:
        """The overrides ``envengineer run FILE --set ... --seed N`` applies, with the name fixed."""
        out = with_seed(dict(parse_override(s) for s in self.sets), self.seed, option="--seeds")
        out["name"] = self.name
        return out

    def experiment(self) -> Experiment:
        return load_experiment(self.file, self.overrides())

    def finished(self) -> bool:
        """The run's benchmark is in its ledger (and its report written, when one is asked for)."""
        rd = RunDir(self.run_dir)
        if not rd.ledger_path.exists() or not rd.is_done(None, "benchmark"):
            return False
        return not self.report or (self.run_dir / "report.md").exists()


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``; ``"0,2,5"`` and mixes (``"0-2,7"``) too; in the order given.

    >>> parse_seeds("0-2,7")
    [0, 1, 2, 7]
    """
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d{1,30})(?:\s*-\s*(\d{1,30}))?", part)
        if not m:
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range (e.g. 0-4 or 0,2,5)")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi >= SEED_LIMIT:
            raise ConfigError(f"--seeds {text!r}: seed {hi} is too large; seeds lie in [0, {SEED_LIMIT - 1}]")
        if hi < lo:
            raise ConfigError(f"--seeds {text!r}: the range {part} runs backwards; write {hi}-{lo}")
        if len(seeds) + hi - lo + 1 > MAX_SEEDS:
            raise ConfigError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
        seeds.extend(range(lo, hi + 1))
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ConfigError(f"--seeds {text!r} names seed {twice[0]} twice; each seed is one run")
    return seeds


def is_gpu_run(exp: Experiment) -> bool:
    """Whether the run needs GPUs: vLLM evaluation or a GPU training or warm-start preset."""
    if exp.scripted:
        return False
    presets = [str(exp.training.preset)]
    if exp.warm_start.enabled:
        presets.append(str(exp.warm_start.preset))
    return exp.evaluation.backend == "vllm" or any(_GPU_WORD.search(Path(p).stem.lower()) for p in presets)


def resources(exp: Experiment) -> tuple[float, float]:
    """``(num_cpus, num_gpus)`` a run asks for: one CPU, or per training process one CPU and one GPU."""
    if is_gpu_run(exp):
        n = float(exp.launch.processes)
        return n, n
    return 1.0, 0.0


def make_task(
    file: str | Path,
    run_dir: str | Path,
    *,
    name: str,
    seed: int | None,
    sets: Sequence[str] = (),
    report: bool = True,
    aliases: Sequence[str] = (),
) -> SweepTask:
    """A task whose resources come from its experiment (loaded once here, so a bad file fails early)."""
    task = SweepTask(
        name=name,
        file=Path(file).resolve(),
        run_dir=Path(os.path.abspath(run_dir)),
        seed=seed,
        sets=tuple(sets),
        report=report,
        aliases=tuple(aliases),
    )
    cpus, gpus = resources(task.experiment())
    return SweepTask(**{**task.__dict__, "num_cpus": cpus, "num_gpus": gpus})


#: The longest run name (a folder name under ``runs/``).
MAX_NAME = 120


def fit_name(stem: str, tail: str = "") -> str:
    """``stem + tail`` within :data:`MAX_NAME` characters; a stem that must be cut keeps a hash of what was
    cut off, and the tail (a seed suffix) always stays, so that two runs never share a name by the cut.

    >>> name = fit_name("a" * 200, "-s1")
    >>> len(name), name.endswith("-s1"), name != fit_name("a" * 199 + "b", "-s1")
    (120, True, True)
    """
    if len(stem) + len(tail) <= MAX_NAME:
        return stem + tail
    import hashlib

    digest = hashlib.sha256(stem.encode()).hexdigest()[:8]
    return stem[: MAX_NAME - len(tail) - len(digest) - 1].rstrip("-_.") + "-" + digest + tail


def seeded_name(name: str, seed: int | None) -> str:
    """``NAME-sSEED`` (the name ``envengineer run --seed`` gives and ``compare`` groups into arms)."""
    return name if seed is None else fit_name(name, f"-s{seed}")


def file_tasks(
    file: str | Path,
    seeds: Sequence[int],
    out: str | Path,
    *,
    name: str,
    sets: Sequence[str] = (),
    report: bool = True,
) -> list[SweepTask]:
    """One task per seed of one experiment file, ``NAME-sSEED`` into ``OUT/NAME-sSEED``.

    ``name`` is the run's name without the seed: what ``envengineer run FILE --set ...`` calls it.
    """
    names = [seeded_name(name, s) for s in seeds]
    return [
        make_task(file, Path(out) / n, name=n, seed=s, sets=sets, report=report)
        for n, s in zip(names, seeds, strict=True)
    ]


def suite_tasks(
    runs: Sequence[Any], seeds: Sequence[int] | None, out: str | Path, *, sets: Sequence[str] = ()
) -> list[SweepTask]:
    """One task per distinct suite run (:func:`envengineer.loop.suite.suite_plan`) and seed.

    Without seeds each run goes to ``OUT/NAME`` as ``envengineer suite`` runs it; with seeds to
    ``OUT/NAME-sSEED``, the other files' names becoming ``ALIAS-sSEED``.
    """
    tasks = []
    for r in runs:
        file = r.files[r.file_names.index(r.name)]
        for s in seeds if seeds is not None else [None]:
            name = seeded_name(r.name, s)
            aliases = [seeded_name(a, s) for a in r.aliases]
            tasks.append(make_task(file, Path(out) / name, name=name, seed=s, sets=sets, aliases=aliases))
    return tasks


def check_unique(tasks: Sequence[SweepTask]) -> None:
    """Two tasks never write one run directory: the same directory (or run name) twice is an error."""
    seen: dict[Path, SweepTask] = {}
    for t in tasks:
        key = Path(os.path.realpath(t.run_dir))
        if key in seen:
            raise ConfigError(
                f"two runs of the sweep would write {t.run_dir} ({seen[key].name} and {t.name}); "
                "give them other names or seeds"
            )
        seen[key] = t


def check_existing(task: SweepTask) -> None:
    """A run directory that already holds a run must hold this run (then the sweep resumes it)."""
    path = task.run_dir / "experiment.yaml"
    if not path.exists():
        return
    if load_experiment(path) != task.experiment():
        raise ConfigError(
            f"{task.run_dir} holds another run than {task.name} of {task.file.name} would write; "
            "move it away or choose another --out"
        )
