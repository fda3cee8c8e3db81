"""The round loop (SPEC §5): configuration → data → GRPO round → validation → engineer → next round.

Round ``r``:

1. ``config`` — round 0 uses the random default ``round0_config(seeds.round0)`` (``seeds.config``, else
   the data seed); a later round asks the engineer, which reads the validation results of the rounds so
   far, and applies its projected proposal.
2. ``data`` — ``generate_round`` from the configuration, never drawing a validation or benchmark board.
3. ``train`` — one training round (``training.learner``: GRPO by default, SFT on the solver's plans, or
   teach) from the previous round's checkpoint (round 0: the starting model).
4. ``validation`` — the round's checkpoint on the validation set.

After the last round the final checkpoint is evaluated on the benchmark. The engineer therefore proposes
after every round but the last (the paper: after rounds 0 and 1 of 3).

Every stage writes its files atomically, then one ledger line (:mod:`envengineer.loop.rundir`). A resumed
run skips the stages in the ledger and rebuilds its state (configurations, checkpoints, history) from the
files, so a run killed at any point continues without redoing or duplicating anything; an evaluation killed
midway resumes its responses file.

What each stage does is its own module under :mod:`envengineer.loop.stages`; the parts that do the real
work are injectable (:class:`envengineer.loop.components.Components`), so tests run the loop with fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.loop.components import Components, complete_components, release_shared_backend
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.fingerprint import check_resume, write_start
from envengineer.loop.integrity import DamagedRunError, Verifier, check_experiment
from envengineer.loop.plan import preflight
from envengineer.loop.rundir import FINAL_STAGES, ROUND_STAGES, RunDir, atomic_write_text
from envengineer.loop.sets import check_sets, full_benchmark, select_benchmark, validation_set
from envengineer.loop.stages import benchmark, config, data, train, validation, warm_start
from envengineer.loop.state import RoundState, StageResult
from envengineer.mapf.config import RoundConfig, round0_config
from envengineer.mapf.instance import Instance

log = logging.getLogger(__name__)


class LoopRunner:
    """Runs (or resumes) one experiment in one run directory.

    Args:
        experiment: The resolved experiment.
        run_dir: Where the lab notebook lives.
        components: Real or fake parts; missing ones come from :func:`default_components`.
        progress: Show a tqdm bar over the run's stages (round, stage, ETA).
        redo_damaged: On resume, run a finished stage again when a file it wrote is damaged (changed,
            truncated, missing) instead of stopping (:mod:`envengineer.loop.integrity`).
    """

    def __init__(
        self,
        experiment: Experiment,
        run_dir: str | Path,
        *,
        components: Components | None = None,
        progress: bool = False,
        redo_damaged: bool = False,
    ) -> None:
        self.exp = experiment
        self.rd = RunDir(run_dir)
        self.verifier = Verifier(self.rd, redo_damaged=redo_damaged)
        self.comps = complete_components(components, experiment, self.rd.root)
        self.progress = progress
        self.space = self.comps.space
        self.rounds: list[RoundState] = []
        self._validation: list[Instance] | None = None
        self._benchmark: list[Instance] | None = None
        self._exclude: frozenset[str] | None = None
        self._round0: RoundConfig | None = None
        self.warm_checkpoint: str | None = None
        self._bar: Any = None

    # -- entry points ---------------------------------------------------------------------------------
    @classmethod
    def start(cls, experiment: Experiment, run_dir: str | Path, **kw: Any) -> LoopRunner:
        """A new run; refuses a directory that already holds a run (use :meth:`resume`)."""
        rd = RunDir(run_dir)
        if rd.experiment_path.exists() or rd.ledger_path.exists():
            raise ConfigError(
                f"{rd.root} already holds a run; continue it with `envengineer run --resume {rd.root}` "
                "or choose another --out"
            )
        leftovers = [p for key in planned_stages(experiment) for p in rd.stage_outputs(*key)]
        if leftovers:  # a new run would resume answers it did not give
            raise ConfigError(
                f"{rd.root} holds outputs of an earlier run ({rd.rel(leftovers[0])}) but no "
                f"{rd.experiment_path.name}; choose another --out, or remove them"
            )
        comps = kw.get("components")
        preflight(experiment, own_engineer=comps is not None and comps.engineer_factory is not None)
        rd.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(rd.experiment_path, experiment.to_yaml())
        write_start(rd, experiment)  # what computes its stages (envengineer.loop.fingerprint)
        return cls(experiment, run_dir, **kw)

    @classmethod
    def resume(cls, run_dir: str | Path, **kw: Any) -> LoopRunner:
        """Continue the run in ``run_dir`` from its resolved ``experiment.yaml`` and ledger."""
        rd = RunDir(run_dir)
        if not rd.experiment_path.exists():
            raise ConfigError(
                f"{rd.root} holds no run ({rd.experiment_path.name} missing); start one with "
                "`envengineer run EXPERIMENT.yaml --out DIR`"
            )
        if kw.get("redo_damaged"):
            rd.repair_ledger()  # a damaged line: keep what precedes it, redo the stages after it
        rd.entries()  # a damaged ledger is refused before anything else is read
        check_experiment(rd)  # the experiment is frozen: an edited file is refused
        exp = load_experiment(rd.experiment_path)
        check_resume(rd, exp, planned_stages(exp), allow=kw.pop("allow_fingerprint_change", False))
        return cls(exp, run_dir, **kw)

    @property
    def round0(self) -> RoundConfig:
        if self._round0 is None:
            self._round0 = round0_config(
                self.exp.seeds.round0,
                self.space,
                num_agents=self.exp.num_agents,
                num_samples=self.exp.samples_per_round,
            )
        return self._round0

    @property
    def start_model(self) -> str | None:
        """The model of round 0: the scripted policy, the warm-start checkpoint or the experiment's model."""
        if self.exp.policy:
            return self.exp.policy
        if self.warm_checkpoint is not None:
            return self.warm_checkpoint
        return self.exp.model

    def run(self) -> dict[str, Any]:
        """Run every stage not yet in the ledger; returns the final benchmark summary."""
        exp = self.exp
        planned = planned_stages(exp)
        self.verifier.check_unvouched(planned)  # outputs the ledger does not vouch for: refused or set aside
        done = self.rd.done()
        total = len(planned)
        already = len(done)
        if already:
            log.info("resuming %s: %d of %d stages already finished", self.rd.root, already, total)
        self._bar = _progress_bar(total, already, self.progress, exp.name)
        try:
            check_sets(self.exp, self.validation_set if exp.rounds > 0 else [], self.benchmark_set)
            self.start_stages()
            for r in range(exp.rounds):
                self._round(r)
            summary = self._final()
        finally:
            release_shared_backend()
            if self._bar is not None:
                self._bar.close()
        return summary

    def start_stages(self) -> None:
        """The stages before round 0: the warm-start and the starting model's validation, where planned."""
        if self.exp.warm_start.enabled and not self.exp.scripted:
            self._stage(
                None,
                "warm_start",
                lambda: warm_start.run(self),
                lambda e: setattr(self, "warm_checkpoint", e.info["checkpoint"]),
            )
        if self.exp.validation.start:
            self._stage(None, "start_validation", lambda: validation.run_start(self), lambda e: None)

    # -- one round ------------------------------------------------------------------------------------
    def _round(self, r: int, choose: Callable[[RoundState], StageResult] | None = None) -> None:
        """Round ``r``'s stages; ``choose`` writes its configuration instead of round 0's default or the
        engineer (a branch round, :mod:`envengineer.loop.branch`)."""
        state = RoundState(index=r)
        self.rounds.append(state)
        state.model_in = self.rounds[r - 1].checkpoint if r > 0 else self.start_model
        pick = (lambda: choose(state)) if choose is not None else (lambda: config.run(self, state))
        self._stage(r, "config", pick, lambda e: config.load(self, state, e))
        self._stage(r, "data", lambda: data.run(self, state), lambda e: None)
        self._stage(r, "train", lambda: train.run(self, state), lambda e: train.load(self, state, e))
        self._stage(
            r, "validation", lambda: validation.run(self, state), lambda e: validation.load(self, state)
        )

    def _stage(
        self,
        r: int | None,
        stage: str,
        run: Callable[[], StageResult],
        load: Callable[[Any], None],
    ) -> None:
        entry = old = self.rd.done().get((r, stage))
        label = f"round {r}/{self.exp.rounds - 1} {stage}" if r is not None else stage
        if entry is not None and not self.verifier.usable(entry):
            entry = None  # damaged (redo_damaged) or built on a redone stage: run it again
        if entry is not None:
            try:
                load(entry)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                if isinstance(exc, EnvEngineerError):
                    raise
                raise DamagedRunError(
                    f"{self.rd.ledger_path}: the line of {label} does not hold what the stage recorded "
                    f"({type(exc).__name__}: {str(exc)[:80]}); restore the ledger"
                ) from None
            log.debug("%s: finished earlier, skipped", label)
            return
        if self._bar is not None:
            self._bar.set_postfix_str(label)
        log.info("%s: %s", self.exp.name, label)
        t0 = time.perf_counter()
        out = run()
        paths, info = out[0], out[1]
        status = out[2] if len(out) > 2 else "done"  # type: ignore[misc]
        new = self.rd.record(
            r, stage, seconds=time.perf_counter() - t0, paths=paths, info=info, status=status
        )
        if old is not None:
            self.verifier.redone(old, new)
        if self._bar is not None:
            self._bar.update(1)

    # final --------------------------------------------------------------------------------------------
    def _final(self) -> dict[str, Any]:
        model = self.rounds[-1].checkpoint if self.rounds else self.start_model
        keep: dict[str, Any] = {}
        self._stage(
            None, "benchmark", lambda: benchmark.run(self, model, keep), lambda e: benchmark.load(self, keep)
        )
        return keep["scores"]["summary"]

    # the fixed sets -----------------------------------------------------------------------------------
    @property
    def validation_set(self) -> list[Instance]:
        """The validation set, built once per run and kept in ``validation_set.jsonl`` (resume reuses it)."""
        if self._validation is None:
            self._validation = validation_set(
                self.exp, self.rd, self.verifier, self._full_benchmark(), self.progress
            )
        return self._validation

    @property
    def benchmark_set(self) -> list[Instance]:
        """The benchmark, or the part ``benchmark_per_cell`` and ``benchmark_limit`` keep (CPU scale)."""
        if self._benchmark is None:
            ev = self.exp.evaluation
            self._benchmark = select_benchmark(
                self._full_benchmark(), ev.benchmark_per_cell, ev.benchmark_limit
            )
        return self._benchmark

    def _full_benchmark(self) -> list[Instance]:
        return full_benchmark(self.exp)

    @property
    def exclude(self) -> frozenset[str]:
        """Board hashes no training instance may have: the validation set and the whole benchmark."""
        if self._exclude is None:
            self._exclude = frozenset(i.board_hash() for i in self.validation_set) | frozenset(
                i.board_hash() for i in self._full_benchmark()
            )
        return self._exclude


def run_experiment(
    experiment: Experiment | None,
    run_dir: str | Path,
    *,
    resume: bool = False,
    components: Components | None = None,
    progress: bool = False,
    redo_damaged: bool = False,
    share_from: str | Path | None = None,
    allow_fingerprint_change: bool = False,
) -> dict[str, Any]:
    """Start (or resume) a run; returns the benchmark summary. See :class:`LoopRunner`.

    ``share_from``: a new run takes the stages before the engineer is first asked from the run there
    (:mod:`envengineer.loop.share`). ``allow_fingerprint_change``: share, or resume, although what
    computed the stages differs from today's code and presets; the run records it
    (:mod:`envengineer.loop.fingerprint`).
    """
    if resume:
        if share_from is not None:
            raise ConfigError("--share-from starts a new run; a resumed run already has its stages")
        runner = LoopRunner.resume(
            run_dir,
            components=components,
            progress=progress,
            redo_damaged=redo_damaged,
            allow_fingerprint_change=allow_fingerprint_change,
        )
        if experiment is not None and experiment != runner.exp:
            raise ConfigError(
                f"{run_dir}: the experiment differs from the run's experiment.yaml; resume "
                "without an experiment file, or start a new run with --out"
            )
    else:
        if experiment is None:
            raise ConfigError("a new run needs an experiment file")

        def start() -> LoopRunner:
            return LoopRunner.start(experiment, run_dir, components=components, progress=progress)

        if share_from is None:
            runner = start()
        else:  # refused before the new run's folder is written; a failed copy leaves nothing behind
            from envengineer.loop.share import start_shared

            planned = planned_stages(experiment)
            allow = allow_fingerprint_change
            runner = start_shared(
                share_from, run_dir, experiment, planned, start, allow_fingerprint_change=allow
            )
    return runner.run()


# -- helpers ----------------------------------------------------------------------------------------------
def planned_stages(exp: Experiment) -> list[tuple[int | None, str]]:
    """Every stage of the experiment as ``(round, stage)``, in the order :meth:`LoopRunner.run` runs them."""
    first: list[tuple[int | None, str]] = []
    if exp.warm_start.enabled and not exp.scripted:
        first.append((None, "warm_start"))
    if exp.validation.start:
        first.append((None, "start_validation"))
    rounds = [(r, stage) for r in range(exp.rounds) for stage in ROUND_STAGES]
    return [*first, *rounds, *((None, stage) for stage in FINAL_STAGES)]


def _progress_bar(total: int, initial: int, enabled: bool, name: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="stage", dynamic_ncols=True)
