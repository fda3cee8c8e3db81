"""Several runs side by side: tables in the paper's comparison shapes, arms of seeds, and figures.

``compare_runs([RUN_A, RUN_B, ...], out=DIR)`` writes ``DIR/compare.md``, ``DIR/compare.png`` and
``DIR/allocation.png``:

* one row per run: the benchmark's Sum column (valid / optimal %) per agent count (SPEC §4), their mean,
  the benchmark's parse %, tokens per answer and the validation of the run's last round;
* the pooled valid / optimal % per wait subset, ``wr_025`` / ``wr_050`` / ``wr_075`` (the paper's Table 5
  shape), for the benchmark and the last validation;
* **arms**: runs of one experiment with different seeds are grouped, and every (agents, size) cell and
  every Sum gets mean ± std [min–max] over the arm's runs, for the benchmark and the last validation,
  so that a difference between curricula can be told from noise;
* ``compare.png``: the benchmark Sums as grouped bars and the validation valid % per round as lines;
  ``allocation.png``: each run's data allocation across map sizes per round, side by side (Fig. 7).

How runs are grouped into arms: by default two runs are in one arm when their experiments are the same
except for the seeds ``--seed`` sets (``seeds.data``, ``training``, ``evaluation``; ``seeds.config``, the
round-0 configuration's, must match), ``name`` and ``description``; the arm is named after the runs'
common name with a trailing seed suffix (``-s1``, ``_seed2``, ``-3``) removed. ``arms={"NAME": [DIR,
...]}`` (``--arm NAME=DIR,DIR``) names arms explicitly instead; runs not named in any arm are then arms of
their own. An
explicit arm holds runs of one experiment too: runs that differ in anything but those seeds, ``name`` and
``description`` are refused from one arm, naming the fields, unless ``mixed=True`` (``--mixed-arms``). So
are an arm whose runs were scored on different sets and, with ``against``, an arm not scored on the
reference's set (:mod:`envengineer.loop.scored_sets`: sets compared by ids and board hashes).

The pieces: :mod:`~envengineer.loop.compare_arms` groups the runs into arms,
:mod:`~envengineer.loop.compare_checks` counts a run once and refuses what cannot be pooled,
:mod:`~envengineer.loop.compare_tables` writes the tables and :mod:`~envengineer.loop.compare_figures` the
figures; their public names are importable from here too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.compare_arms import (
    ARM_FREE_FIELDS,
    Arm,
    arm_key,
    arm_label,
    differing_fields,
    group_arms,
    mixed_arms,
    parse_arm,
)
from envengineer.loop.compare_checks import checked_pairing, drop_copies, shared_seeds, unique_runs
from envengineer.loop.compare_figures import (
    allocation_figure,
    arm_curves,
    compare_figure,
    curves_figure,
    curves_markdown,
)
from envengineer.loop.compare_tables import (
    arm_statistics,
    arms_markdown,
    comparison_markdown,
    comparison_rows,
    spread,
    subsets_markdown,
)
from envengineer.loop.intervals import arm_intervals, intervals_markdown
from envengineer.loop.proposals import proposal_counts, proposals_markdown
from envengineer.loop.rundir import atomic_write_json, atomic_write_text
from envengineer.loop.scored_sets import SPLITS, sets_markdown
from envengineer.loop.scored_sets import split_scores as _scores_of

__all__ = [
    "ARM_FREE_FIELDS",
    "Arm",
    "arm_key",
    "arm_label",
    "arm_statistics",
    "arms_markdown",
    "checked_pairing",
    "compare_runs",
    "comparison_markdown",
    "comparison_rows",
    "differing_fields",
    "drop_copies",
    "group_arms",
    "mixed_arms",
    "parse_arm",
    "shared_seeds",
    "spread",
    "subsets_markdown",
    "unique_runs",
]

log = logging.getLogger(__name__)


def compare_runs(
    run_dirs: Sequence[str | Path],
    *,
    out: str | Path,
    arms: Mapping[str, Sequence[str | Path]] | None = None,
    against: str | None = None,
    mixed: bool = False,
) -> Path:
    """Write ``compare.md``, ``compare.json``, ``compare.png`` and ``allocation.png`` into ``out``; returns
    the Markdown path.

    Args:
        run_dirs: The run directories (finished or not). Directories named in ``arms`` are added when
            missing here; a directory given twice (or a link to it, or a copy of it) counts once, and so
            does a run of an arm with the same experiment, seeds and scores as another (:func:`drop_copies`).
        out: The output folder.
        arms: Explicit arms, ``{name: [run dirs]}``; None groups runs by experiment without the seeds.
        against: The reference arm: every other arm's difference to it, with its bootstrap interval.
        mixed: Accept explicit arms whose runs are different experiments, and arms scored on different
            sets (``--mixed-arms``); they are pooled as asked and named in the warnings, and a difference
            between scores on different sets is left out.

    Raises:
        ConfigError: no run, a directory that holds no run, ``against`` names no arm, an explicit arm
            holds different experiments or an arm's runs (or an arm and ``against``) were scored on
            different sets, and ``mixed`` is off.
    """
    dirs = [Path(d) for d in run_dirs]
    for members in (arms or {}).values():
        for d in members:
            if Path(d).resolve() not in {x.resolve() for x in dirs}:
                dirs.append(Path(d))
    if not dirs:
        raise ConfigError("compare needs at least one run directory")
    runs, notes = unique_runs(dirs)
    grouped = group_arms(runs, arms)
    if against is not None and against not in {a.name for a in grouped}:
        raise ConfigError(f"--against {against!r} is not an arm; the arms are {[a.name for a in grouped]}")
    mixtures = mixed_arms(grouped)
    if mixtures and not mixed:
        raise ConfigError(
            f"{mixtures[0]}; an arm holds runs of one experiment: give each experiment its own --arm, or "
            "pass --mixed-arms to pool them anyway"
        )
    grouped, copies = drop_copies(grouped)
    pooled = {id(r) for a in grouped for r in a.runs}
    runs = [r for r in runs if id(r) in pooled]
    pair = checked_pairing(grouped, against, mixed)
    notes += copies + mixtures + shared_seeds(grouped) + pair.mixtures + pair.notes
    damaged = [f"{r.root}: {d}" for r in runs for d in r.damaged]
    for note in notes + damaged:
        log.warning("%s", note)
    agents, rows = comparison_rows(runs)
    intervals = _intervals(grouped, against, pair.unpaired)
    out = Path(out)
    fig = compare_figure(agents, rows, out / "compare.png")
    alloc = allocation_figure(runs, out / "allocation.png")
    curves, curves_text = _curves(grouped, out)
    text = "# Comparison\n\n" + _notes_markdown(notes, damaged) + comparison_markdown(agents, rows) + "\n"
    subsets = subsets_markdown(rows)
    if subsets:
        text += "\n## Per wait subset\n\n" + subsets + "\n"
    if any(len(a.runs) > 1 for a in grouped) or arms:
        text += "\n" + arms_markdown(grouped, mixed=bool(mixtures)) + "\n"
    text += "\n" + sets_markdown(pair) + "\n\n" + intervals_markdown(intervals) + "\n"
    text += curves_text + "\n" + proposals_markdown(grouped)
    text += _figures_markdown(fig, alloc)
    record = {
        "runs": rows,
        "arms": {a.name: [str(r.root) for r in a.runs] for a in grouped},
        "intervals": intervals,
        "sets": pair.to_json(),
        "proposals": {a.name: proposal_counts(a.runs) for a in grouped},
        "curves": curves,
        "warnings": notes,
        "damaged": damaged,
    }
    atomic_write_json(out / "compare.json", record)
    return atomic_write_text(out / "compare.md", text)


def _figures_markdown(fig: Path, alloc: Path | None) -> str:
    text = f"\n![comparison]({fig.name})\n"
    if alloc is not None:
        text += f"\n![data allocation per round, side by side]({alloc.name})\n"
    return text


def _intervals(
    arms: Sequence[Arm], against: str | None, unpaired: Mapping[tuple[str, str], str]
) -> dict[str, Any]:
    """Each arm's intervals and its difference to ``against``; an unpaired (arm, split) gets none."""
    scores = {a.name: {w: [s for s in (_scores_of(r, w) for r in a.runs) if s] for w in SPLITS} for a in arms}
    return arm_intervals(scores, against, set(unpaired))


def _curves(arms: Sequence[Arm], out: Path) -> tuple[dict[str, Any], str]:
    """The arms' learning curves over seeds, their figure in ``out`` and their Markdown section."""
    curves = arm_curves({a.name: a.runs for a in arms})
    png = curves_figure(curves, out / "curves.png")
    if png is None:
        return curves, ""
    return curves, "\n" + curves_markdown(curves) + f"\n![learning curves per arm]({png.name})\n"


def _notes_markdown(notes: Sequence[str], damaged: Sequence[str]) -> str:
    text = ""
    if notes:
        text += "**Warnings:**\n\n" + "".join(f"- {n}\n" for n in notes) + "\n"
    if damaged:
        text += "**Damaged scores, left out:**\n\n" + "".join(f"- {d}\n" for d in damaged) + "\n"
    return text
