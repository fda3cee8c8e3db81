"""A suite: every experiment file of a folder, each distinct run once.

Several files of the paper's set describe the same run under different names: ``main-self``,
``ablation-v6``, ``engineer-self`` and ``details-bookkeeping`` are all the self-engineer with context V6 and
bookkeeping training details. :func:`suite_plan` reads a folder's experiment files, groups the files whose
experiments are equal apart from ``name`` and ``description`` (comparing what a run does: the engineer's
resolved context switches rather than how they are written, no engineer settings for runs that never
ask one), and returns one entry per distinct run with the files it stands for and its planned cost.
``envengineer suite DIR --dry-run`` prints it; without ``--dry-run`` each distinct run runs once into
``OUT/NAME`` and every other file's name becomes a symbolic link to it (``OUT/suite.json`` records the
mapping), so ``envengineer compare OUT/gpu-ablation-v6 ...`` reads the shared run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.plan import plan

log = logging.getLogger(__name__)
_MISSING = object()


@dataclass
class SuiteRun:
    """One distinct run of a suite and the experiment files that describe it."""

    experiment: Experiment
    files: list[Path]
    file_names: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def aliases(self) -> list[str]:
        """The names of the other files' experiments (they point at this run)."""
        return [n for n in self.file_names if n != self.name]


def run_key(exp: Experiment) -> str:
    """What makes two experiments the same run: everything but name and description, normalised.

    The engineer's context is compared by its resolved switches (``V6`` and ``{variant: V6, T:
    bookkeeping}`` are one context); a non-LLM engineer has no context; a run without an engineer call
    (fewer than two rounds) has no engineer settings at all.
    """
    data = exp.model_dump(mode="json")
    data.pop("name", None)
    data.pop("description", None)
    eng = data.get("engineer", {})
    if not exp.engineer_rounds:
        data.pop("engineer", None)
    elif exp.engineer.is_llm:
        eng["context"] = exp.engineer.context.switches()
    else:
        eng.pop("context", None)
    return json.dumps(data, sort_keys=True, default=str)


def content_hash(exp: Experiment) -> str:
    """A short hash of :func:`run_key`: the run's identity in ``suite.json``."""
    return hashlib.sha256(run_key(exp).encode("utf-8")).hexdigest()[:16]


def differing_keys(a: Experiment, b: Experiment) -> list[str]:
    """The dotted fields in which two experiments that are different runs differ, sorted (as written;
    the normalised run keys where only those differ).

    >>> differing_keys(Experiment(name="x", rounds=1), Experiment(name="y", rounds=2))
    ['rounds']
    """

    def flat(data: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(data, dict) and data:
            return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): data}

    def diff(da: dict[str, Any], db: dict[str, Any]) -> list[str]:
        fa, fb = flat(da), flat(db)
        return sorted(k for k in fa.keys() | fb.keys() if fa.get(k, _MISSING) != fb.get(k, _MISSING))

    if run_key(a) == run_key(b):
        return []
    free = ("name", "description")
    written = diff(*({k: v for k, v in e.model_dump(mode="json").items() if k not in free} for e in (a, b)))
    return written or diff(json.loads(run_key(a)), json.loads(run_key(b)))


def prepare_run_dir(run: SuiteRun, run_dir: Path, *, redo: bool = False) -> bool:
    """Whether ``run_dir`` holds this run to resume (True) or is free for a new one (False).

    A run directory made from another experiment than the suite's files now describe (a file edited
    since) is refused, naming the fields that differ; with ``redo`` it is moved aside to
    ``NAME.replaced-TIME`` and the run starts again.

    Raises:
        ConfigError: the directory holds another experiment's run and ``redo`` is off.
    """
    recorded_path = run_dir / "experiment.yaml"
    if not recorded_path.exists():
        return False
    keys = differing_keys(load_experiment(recorded_path), run.experiment)
    if not keys:
        return True
    if not redo:
        raise ConfigError(
            f"{run_dir} was run from another experiment than {', '.join(str(f) for f in run.files)} "
            f"describe now ({', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''} differ); rerun the suite "
            "with --redo to start that run again, or give the file a new name"
        )
    aside = run_dir.with_name(f"{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.rename(aside)
    log.warning(
        "%s was run from another experiment (%s differ): moved to %s", run_dir, ", ".join(keys), aside
    )
    return False


def suite_files(folder: str | Path) -> list[Path]:
    """The experiment files of a folder: ``*.yaml`` without the shared bases (names starting with ``_``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder of experiment files (e.g. experiments/gpu)")
    files = sorted(p for p in folder.glob("*.yaml") if not p.name.startswith("_"))
    if not files:
        raise ConfigError(f"{folder} holds no experiment files (*.yaml)")
    return files


def suite_plan(
    files: Sequence[str | Path], overrides: dict[str, Any] | None = None, *, only: Sequence[str] = ()
) -> list[SuiteRun]:
    """One :class:`SuiteRun` per distinct experiment among ``files``, in file order.

    The run is named after its ``main-*`` file where one of the group is, else its first file. ``only``
    keeps the runs any of whose files' stems or experiment names are listed.
    """
    groups: dict[str, SuiteRun] = {}
    named: dict[str, tuple[str, Path]] = {}  # experiment name -> (run key, first file)
    for f in map(Path, files):
        exp = load_experiment(f, overrides)
        key = run_key(exp)
        first = named.setdefault(exp.name, (key, f))
        if first[0] != key:
            raise ConfigError(
                f"{first[1]} and {f} both name their experiment {exp.name!r} but describe different runs "
                f"({', '.join(differing_keys(load_experiment(first[1], overrides), exp)[:5])} differ); "
                "give one of them another name"
            )
        if key in groups:
            g = groups[key]
            if f.stem.startswith("main-") and not any(x.stem.startswith("main-") for x in g.files):
                g.experiment = exp
            g.files.append(f)
            g.file_names.append(exp.name)
        else:
            groups[key] = SuiteRun(exp, [f], [exp.name])
    runs = list(groups.values())
    if only:
        wanted = set(only)
        runs = [r for r in runs if wanted & ({f.stem for f in r.files} | set(r.file_names))]
        if not runs:
            raise ConfigError(f"--only {sorted(wanted)} names no file of the suite")
    for r in runs:
        r.plan = plan(r.experiment)
    return runs


def suite_totals(runs: Sequence[SuiteRun], files: int) -> dict[str, Any]:
    """What the suite costs in all, and what running every file on its own would have cost."""
    grpo = sum(r.plan["grpo_steps"] or 0 for r in runs)
    responses = sum(r.plan["eval_responses"] for r in runs)
    seconds = [r.plan["cpu_seconds"] for r in runs]
    return {
        "files": files,
        "runs": len(runs),
        "repeats_saved": sum(len(r.files) - 1 for r in runs),
        "grpo_steps": grpo,
        "sft_steps": sum(r.plan.get("sft_steps") or 0 for r in runs),
        "eval_responses": responses,
        "training_instances": sum(r.plan["training_instances"] for r in runs),
        "engineer_calls": sum(r.plan["engineer_calls"] for r in runs),
        "eval_tokens": sum(r.plan["eval_tokens_upper_bound"] for r in runs),
        "grpo_steps_without_dedup": sum((r.plan["grpo_steps"] or 0) * len(r.files) for r in runs),
        "cpu_seconds": None if any(s is None for s in seconds) else sum(seconds),
    }


def link_aliases(run: SuiteRun, out: Path) -> list[Path]:
    """Make ``out/ALIAS`` a symbolic link to ``out/NAME`` for every other file of the run."""
    made = []
    for alias in run.aliases:
        link = out / alias
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise ConfigError(f"{link} exists and is not a link to {run.name}; move it away first")
        link.symlink_to(run.name, target_is_directory=True)
        made.append(link)
    return made


def write_suite_record(runs: Sequence[SuiteRun], out: Path) -> Path:
    """``out/suite.json``: per distinct run its directory, files and aliases."""
    out.mkdir(parents=True, exist_ok=True)
    record = [
        {
            "run": r.name,
            "key": content_hash(r.experiment),
            "dir": str(out / r.name),
            "files": [str(f) for f in r.files],
            "aliases": r.aliases,
        }
        for r in runs
    ]
    path = out / "suite.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
