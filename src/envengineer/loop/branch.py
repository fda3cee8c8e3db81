"""Branch rounds: the counterfactual of a round.

``envengineer branch RUN --round K --config NAME=ROUND.yaml [--config ...] --out DIR`` takes the state of
the finished run in ``RUN`` before its round ``K`` (its warm-start and start validation, rounds ``0 .. K-1``
with their configurations, data, checkpoints and validations) and trains round ``K`` once per given
configuration, with the run's learner, seeds and settings, then validates each branch on the run's
validation boards. A branch is a run of its own in ``DIR/NAME``:

- the stages before round ``K`` are copied from ``RUN`` through the checks ``--resume`` and
  ``--share-from`` make (:class:`envengineer.loop.integrity.Verifier`: a damaged file stops the copy; each
  copy is hashed again and must match the source's ledger), so the branch starts from exactly the run's
  round ``K - 1`` checkpoint;
- round ``K``'s ``config`` stage writes the given configuration: its map sizes must be in the run's space
  and its ``num_agents`` and ``num_samples`` the run's; it is used as written, not projected, so that the
  run's own configuration trains exactly as the run trained it; ``data``, ``train`` and ``validation``
  then run as the run's own round ``K`` ran, with the same seeds. A branch given the run's own
  configuration (``RUN/round_0K/config.applied.yaml``) therefore reproduces the run's round ``K`` to the byte.

A branch may instead ask an engineer (``--engineer NAME=EXPERIMENT.yaml``: that file's ``engineer``
section, a rule, a random draw or an LLM) for round ``K``'s configuration, from the run's own state before
round ``K``, as the loop asks its engineer; the experiment file given as the run's own
(``RUN/experiment.yaml``) then reproduces the run's round ``K`` where its engineer is deterministic.

``DIR/branches.json`` records, per branch, its name, configuration, valid and optimal rates, per-size rates,
and the paired difference to the run's own round ``K`` (mean and 95 % percentile-bootstrap interval over
boards, :func:`envengineer.loop.report_data.paired_gain`) when the run finished round ``K``. Every figure is
also given on two fixed halves of the validation boards (:func:`half_of`, by a hash of the board's id):
``select`` to choose among branches, ``report`` to report the choice on boards that did not make it.

Branches run one after another, or ``lanes`` at a time in worker processes, each on its share of the cores.
A stopped branch set resumes with the same command: finished branches are read back, a branch stopped
midway continues from its ledger. ``DIR`` belongs to one run and one round: a branch folder made from
another run, another round or another configuration file's content is refused.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envengineer.errors import ConfigError
from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.fingerprint import check_share
from envengineer.loop.integrity import Verifier, check_experiment
from envengineer.loop.rundir import EXPERIMENT, RunDir, atomic_write_json, file_digest, read_json
from envengineer.loop.runner import LoopRunner, planned_stages
from envengineer.loop.state import RoundState, StageResult
from envengineer.mapf.config import ConfigSpace, RoundConfig

log = logging.getLogger(__name__)

BRANCHES = "branches.json"
#: Each branch folder's record of what it branches from (checked when the branch set resumes).
ORIGIN = "branch.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class BranchSpec:
    """One branch: its name and where round K's configuration comes from.

    ``kind="config"`` (``--config NAME=ROUND.yaml``): the configuration in the file. ``kind="engineer"``
    (``--engineer NAME=EXPERIMENT.yaml``): the engineer of that experiment file (its ``engineer`` section:
    a rule, a random draw, an LLM) asked as the loop asks it, from the run's own state before round K.
    """

    name: str
    path: Path
    kind: Literal["config", "engineer"] = "config"

    @classmethod
    def parse(cls, text: str, kind: Literal["config", "engineer"] = "config") -> BranchSpec:
        """``NAME=PATH`` as a spec.

        >>> BranchSpec.parse("uniform=cfg/u.yaml")
        BranchSpec(name='uniform', path=PosixPath('cfg/u.yaml'), kind='config')
        """
        option, what = ("--config", "ROUND.yaml") if kind == "config" else ("--engineer", "EXPERIMENT.yaml")
        name, sep, path = text.partition("=")
        if not sep or not path:
            raise ConfigError(f"{option} {text!r}: write NAME={what} (a name, '=', a file)")
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"{option} {text!r}: the name {name!r} must be letters, digits, '_', '.' or '-' "
                "(at most 64, starting with a letter or digit); it names the branch's folder"
            )
        return cls(name, Path(path), kind)


def half_of(instance_id: str) -> str:
    """``"select"`` or ``"report"``: a validation board's half, fixed by a hash of its id.

    >>> half_of("val-2a-5x5-0003") in ("select", "report")
    True
    """
    return "select" if hashlib.sha256(instance_id.encode()).digest()[0] % 2 == 0 else "report"


def check_source(
    run_dir: str | Path, k: int, *, allow_fingerprint_change: bool = False
) -> tuple[RunDir, Experiment, dict[str, Any] | None]:
    """The run in ``run_dir``, its experiment and what a branch records of a fingerprint change let
    through (None: none), if it finished every stage before round ``k`` under today's code and presets
    (:func:`envengineer.loop.fingerprint.check_share`; ``allow_fingerprint_change`` lets a change through).

    Raises:
        ConfigError: no run there, ``k`` is not one of its rounds, a stage before round ``k`` is not
            finished, or what computed those stages is not what computes a branch today.
        DamagedRunError: its ``experiment.yaml`` changed since it ran, or a file a stage before round
            ``k`` wrote is damaged.
    """
    src = RunDir(run_dir)
    if not src.experiment_path.is_file():
        raise ConfigError(f"{src.root}: no run there ({EXPERIMENT} missing)")
    check_experiment(src)
    exp = load_experiment(src.experiment_path)
    if not 0 <= k < exp.rounds:
        raise ConfigError(f"--round {k}: the run in {src.root} has rounds 0 to {exp.rounds - 1}")
    if exp.scripted or not exp.trains:
        raise ConfigError(f"{src.root}: its policy does not train; a branch round would change nothing")
    lines, done, verifier = src.entries(), src.done(), Verifier(src)
    to_copy: list[int] = []
    for key in stages_before(exp, k):
        entry = done.get(key)
        if entry is None:
            label = key[1] if key[0] is None else f"round {key[0]} {key[1]}"
            raise ConfigError(
                f"{src.root}: {label} is not finished; finish it first "
                f"(`envengineer run --resume {src.root}`)"
            )
        verifier.usable(entry)  # raises DamagedRunError: a branch never starts from a damaged stage
        to_copy.append(lines.index(entry))
    note = check_share(src, to_copy, exp, None, allow=allow_fingerprint_change, option="branch")
    return src, exp, note


def stages_before(exp: Experiment, k: int) -> list[tuple[int | None, str]]:
    """The stages a run finishes before round ``k``'s configuration, in order."""
    planned = planned_stages(exp)
    return planned[: planned.index((k, "config"))]


def branch_config(spec: BranchSpec, exp: Experiment, space: ConfigSpace) -> RoundConfig:
    """The configuration in ``spec.path``, if it is legal as a round of the run; else a ConfigError."""
    config = RoundConfig.load(spec.path)
    if (config.num_agents, config.num_samples) != (exp.num_agents, exp.samples_per_round):
        raise ConfigError(
            f"{spec.path}: num_agents {config.num_agents} and num_samples {config.num_samples}; the run "
            f"sets {exp.num_agents} and {exp.samples_per_round}, and a branch changes the sizes' knobs only"
        )
    unknown = sorted(set(config.sizes) - set(space.sizes))
    if unknown:
        raise ConfigError(
            f"{spec.path}: map sizes {unknown} are not in the run's space {list(space.sizes)}; drop them"
        )
    return config


def run_branches(
    source: str | Path,
    k: int,
    specs: Sequence[BranchSpec],
    out: str | Path,
    *,
    lanes: int = 1,
    components: Components | None = None,
    allow_fingerprint_change: bool = False,
) -> dict[str, Any]:
    """Train round ``k`` of the run in ``source`` once per spec into ``out/NAME``; write and return
    ``out/branches.json`` (see the module docstring).

    ``components`` (tests) runs the branches in this process whatever ``lanes`` says;
    ``allow_fingerprint_change`` branches from a run computed by other code or presets (each branch's
    ``fingerprint.json`` records it).
    """
    names = [s.name for s in specs]
    if not specs:
        raise ConfigError("give at least one --config NAME=ROUND.yaml or --engineer NAME=EXPERIMENT.yaml")
    if len(set(names)) != len(names):
        raise ConfigError(f"branch names repeat ({', '.join(sorted(names))}); give each its own")
    src, exp, note = check_source(source, k, allow_fingerprint_change=allow_fingerprint_change)
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: a file, not a folder")
    jobs = [_Job(str(src.root), k, s, str(out_dir / s.name), note, allow_fingerprint_change) for s in specs]
    for spec in specs:  # refused before any branch trains: a folder of another run or another configuration
        _check_folder(src, exp, k, spec, out_dir / spec.name)
    if components is not None or lanes <= 1 or len(jobs) == 1:
        results = [_one_branch(job, components) for job in jobs]
    else:
        from envengineer.machine import in_workers, lane_threads

        workers = min(lanes, len(jobs))
        for job in jobs:
            job.threads = lane_threads(workers)
        results = list(in_workers(_lane, jobs, workers, [1.0] * len(jobs)))
    own = _own_round(src, k)
    record = {
        "source": str(src.root),
        "experiment": exp.name,
        "round": k,
        "own": rates(own) if own is not None else None,
        "branches": [_summary(r, own) for r in results],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / BRANCHES, record)
    return record


@dataclass
class _Job:
    """One branch to train (picklable: lanes run it in a worker process)."""

    source: str
    k: int
    spec: BranchSpec
    folder: str
    note: dict[str, Any] | None  # the source's fingerprint change let through, recorded in the branch
    allow: bool
    threads: int | None = None


def _lane(job: _Job) -> dict[str, Any]:
    """One branch in a worker process, torch held to the lane's threads."""
    try:
        import torch

        torch.set_num_threads(job.threads or 1)
    except ImportError:
        pass
    return _one_branch(job, None)


def _one_branch(job: _Job, components: Components | None) -> dict[str, Any]:
    src, spec, dst, k = RunDir(job.source), job.spec, RunDir(job.folder), job.k
    exp = load_experiment(src.experiment_path)
    if not dst.experiment_path.exists():
        runner = _start_branch(job, exp, components)
    else:
        runner = LoopRunner.resume(dst.root, components=components, allow_fingerprint_change=job.allow)
    runner.start_stages()
    for r in range(k):
        runner._round(r)
    if spec.kind == "config":
        config = branch_config(spec, exp, runner.space)
        runner._round(k, lambda state: _given(runner, state, spec, config))
    else:
        runner._round(k, lambda state: _asked(runner, state, spec))
    state = runner.rounds[k]
    return {
        "name": spec.name,
        "kind": spec.kind,
        "folder": str(dst.root),
        "config": state.config.model_dump(mode="json") if state.config is not None else None,
        "scores": state.validation or {},
    }


def _start_branch(job: _Job, exp: Experiment, components: Components | None) -> LoopRunner:
    """A new branch folder: the run's experiment, its origin, and the stages before round K copied; a
    copy that fails leaves no half-made branch behind."""
    import shutil

    from envengineer.loop.fingerprint import record_share
    from envengineer.loop.share import copy_stages

    src, dst = RunDir(job.source), RunDir(job.folder)
    fresh = not dst.root.exists()
    runner = LoopRunner.start(exp, dst.root, components=components)
    try:
        atomic_write_json(dst.root / ORIGIN, _origin(src, job.k, job.spec))
        copied = copy_stages(src, dst, stages_before(exp, job.k))
        if job.note is not None and copied:
            record_share(dst, job.note, len(copied))  # the copied stages' fingerprint, not today's
    except BaseException:
        if fresh:
            shutil.rmtree(dst.root, ignore_errors=True)
        raise
    return runner


def _asked(loop: LoopRunner, state: RoundState, spec: BranchSpec) -> StageResult:
    """A branch's ``config`` stage asked of the engineer of the experiment file in ``spec.path``, as the
    loop asks its own (request, projection, trust region and records alike)."""
    from envengineer.loop.stages import config

    if state.index == 0:
        raise ConfigError(f"--engineer {spec.name}: round 0 has no engineer; branch round 0 with --config")
    engineer = load_experiment(spec.path).engineer
    mine = loop.exp
    loop.exp = mine.model_copy(update={"engineer": engineer})  # both validated; round K's config alone
    try:
        return config.run(loop, state)
    finally:
        loop.exp = mine


def _given(loop: LoopRunner, state: RoundState, spec: BranchSpec, config: RoundConfig) -> StageResult:
    """A branch's ``config`` stage: the given configuration, recorded as the loop records one."""
    from envengineer.loop.rundir import atomic_write_text

    d = loop.rd.round_dir(state.index)
    source = f"branch:{spec.name}"
    projection = {
        "source": source,
        "raw": {"file": str(spec.path), "sha256": file_digest(spec.path)},
        "changes": [],
        "errors": [],
        "fell_back": False,
        "config": config.model_dump(mode="json"),
    }
    atomic_write_json(d / "proposal.raw.json", projection["raw"])
    atomic_write_json(d / "projection.json", projection)
    atomic_write_text(d / "config.applied.yaml", config.to_yaml())
    state.config, state.source = config, source
    return (
        {"config": d / "config.applied.yaml", "projection": d / "projection.json"},
        {"source": source},
    )


def _origin(src: RunDir, k: int, spec: BranchSpec) -> dict[str, Any]:
    return {
        "source": str(src.root.resolve()),
        "experiment_sha256": file_digest(src.experiment_path),
        "round": k,
        "name": spec.name,
        "kind": spec.kind,
        "config_sha256": file_digest(spec.path),
    }


def _check_folder(src: RunDir, exp: Experiment, k: int, spec: BranchSpec, folder: Path) -> None:
    """Refuse a branch folder that holds something other than this branch of this run."""
    if not spec.path.is_file():
        raise ConfigError(f"--{spec.kind} {spec.name}={spec.path}: no such file")
    dst = RunDir(folder)
    if not dst.experiment_path.exists():
        if folder.exists() and any(folder.iterdir()):
            raise ConfigError(f"{folder}: not empty and holds no branch; choose another --out")
        return
    try:
        origin = read_json(folder / ORIGIN)
    except (OSError, ValueError):
        origin = None
    mine = _origin(src, k, spec)
    if not isinstance(origin, dict) or any(origin.get(f) != mine[f] for f in mine):
        differs = [f for f in mine if origin.get(f) != mine[f]] if isinstance(origin, dict) else [ORIGIN]
        raise ConfigError(
            f"{folder}: holds a branch of another run, round or configuration ({', '.join(differs)} "
            "differ); choose another --out"
        )


def _own_round(src: RunDir, k: int) -> dict[str, Any] | None:
    """The run's own round ``k`` validation scores, read through the resume checks; None when unfinished."""
    from envengineer.loop.integrity import verified_scores

    entry = src.done().get((k, "validation"))
    if entry is None:
        return None
    scores, problem = verified_scores(src, entry, src.round_dir(k) / "validation" / "scores.json")
    if problem:
        raise ConfigError(f"{src.root}: round {k}'s validation cannot be read ({problem})")
    return scores


def rates(scores: dict[str, Any]) -> dict[str, Any]:
    """Overall, per-size and per-half valid and optimal rates (percent) of a validation's verdicts."""
    rows = [v for v in scores.get("verdicts") or [] if isinstance(v, dict) and "id" in v]
    out: dict[str, Any] = {"all": _pct(rows)}
    for half in ("select", "report"):
        out[half] = _pct([v for v in rows if half_of(str(v["id"])) == half])
    sizes: dict[str, Any] = {}
    for agents, row in (scores.get("table") or {}).items():
        for n, cell in (row.get("sizes") or {}).items():
            sizes[f"{agents}x{n}"] = {"valid": cell.get("valid"), "optimal": cell.get("optimal")}
    out["per_size"] = sizes
    return out


def _pct(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    if not n:
        return {"n": 0, "valid": None, "optimal": None}
    return {
        "n": n,
        "valid": round(100.0 * sum(bool(v.get("valid")) for v in rows) / n, 2),
        "optimal": round(100.0 * sum(bool(v.get("optimal")) for v in rows) / n, 2),
    }


def _summary(result: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    from envengineer.loop.report_data import paired_gain

    scores = result["scores"]
    out = {k: result[k] for k in ("name", "kind", "folder", "config")}
    out.update(rates(scores))
    if own is not None:
        out["vs_own"] = {"all": paired_gain(own, scores)}
        for half in ("select", "report"):
            out["vs_own"][half] = paired_gain(on_half(own, half), on_half(scores, half))
    return out


def on_half(scores: dict[str, Any], half: str) -> dict[str, Any]:
    """``scores`` cut to the verdicts of one half of the boards (:func:`half_of`)."""
    return {"verdicts": [v for v in scores.get("verdicts") or [] if half_of(str(v.get("id"))) == half]}
