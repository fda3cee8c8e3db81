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
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.compare_figures import (
    allocation_figure,
    arm_curves,
    compare_figure,
    curves_figure,
    curves_markdown,
)
from envengineer.loop.intervals import arm_intervals, intervals_markdown
from envengineer.loop.proposals import proposal_counts, proposals_markdown
from envengineer.loop.report import RunRecord, load_run, parsed_share, subset_scores
from envengineer.loop.rundir import atomic_write_json, atomic_write_text
from envengineer.loop.scored_sets import SPLITS, Pairing, pairing, sets_markdown
from envengineer.loop.scored_sets import split_scores as _scores_of
from envengineer.loop.seeds import SEED_OPTION_KEYS

log = logging.getLogger(__name__)

_SEED_SUFFIX = re.compile(r"[-_.+](?:seed|s)?=?\d+$", re.I)
#: Experiment fields that do not make two runs different arms (the seeds are what an arm varies).
ARM_FREE_FIELDS = ("seeds", "name", "description")


def _shared_part(experiment: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment without what an arm may vary: its name, description and the seeds ``--seed`` sets.
    ``seeds.config`` (the round-0 configuration's) stays: runs from other starting configurations are
    other experiments, not seeds of one.

    >>> _shared_part({"name": "a-s1", "rounds": 2, "seeds": {"config": 0, "data": 1}})
    {'rounds': 2, 'seeds': {'config': 0}}
    """
    rest = {k: v for k, v in experiment.items() if k not in ARM_FREE_FIELDS}
    seeds = experiment.get("seeds")
    if isinstance(seeds, Mapping):
        kept = {k: v for k, v in seeds.items() if k not in SEED_OPTION_KEYS}
        if kept:
            rest["seeds"] = kept
    return rest


@dataclass
class Arm:
    """Runs of one experiment that differ only in their seeds."""

    name: str
    runs: list[RunRecord]


# -- per run -----------------------------------------------------------------------------------------------
def comparison_rows(runs: Sequence[RunRecord]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(agent counts, rows)``; each row: name, engineer, per-agents Sum, mean, last validation, subsets."""
    agents = sorted({a for r in runs if r.benchmark for a in r.benchmark["table"]}, key=int)
    rows = []
    for run in runs:
        bench = run.benchmark or {}
        table = bench.get("table", {})
        sums = {a: table[a]["sum"] for a in agents if a in table}
        val_rounds = [r for r in run.rounds if r.validation]
        last = val_rounds[-1].validation if val_rounds else None
        mean = None
        if sums:
            mean = {k: round(sum(s[k] for s in sums.values()) / len(sums), 2) for k in ("valid", "optimal")}
        rows.append(
            {
                "name": run.name,
                "root": str(run.root),
                "engineer": run.experiment.get("engineer", {}).get("kind"),
                "rounds": run.experiment.get("rounds"),
                "finished": run.finished,
                "sums": sums,
                "mean": mean,
                "parsed": parsed_share(bench) if bench else None,
                "tokens": bench.get("summary", {}).get("mean_tokens"),
                "validation_last": last["summary"] if last else None,
                "validation_curve": [
                    (r.index, r.validation["summary"]["valid"], r.validation["summary"]["optimal"])
                    for r in val_rounds
                ],
                "subsets": subset_scores(bench) if bench else {},
                "validation_subsets": subset_scores(last) if last else {},
                "benchmark_n": bench.get("summary", {}).get("n"),
            }
        )
    return agents, rows


def comparison_markdown(agents: list[str], rows: list[dict[str, Any]]) -> str:
    head = [
        "run", "engineer", "rounds", *[f"{a} agents" for a in agents], "mean", "parsed %", "tokens / answer",
        "last validation", "n",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row['name']}`", str(row["engineer"]), str(row["rounds"])]
        for a in agents:
            s = row["sums"].get(a)
            cells.append(f"{s['valid']:.2f} / {s['optimal']:.2f}" if s else "")
        cells.append(f"{row['mean']['valid']:.2f} / {row['mean']['optimal']:.2f}" if row["mean"] else "")
        cells.append(_fmt(row["parsed"]))
        cells.append(_fmt(row["tokens"], 1))
        v = row["validation_last"]
        cells.append(f"{v['valid']:.2f} / {v['optimal']:.2f}" if v else "")
        cells.append(str(row["benchmark_n"] or ("unfinished" if not row["finished"] else "")))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Benchmark Sum (unweighted mean over map sizes), valid % / optimal %, per agent count; `parsed %`: "
        "benchmark answers in which a plan could be read; `n`: benchmark instances scored.",
    ]
    return "\n".join(lines)


def subsets_markdown(rows: list[dict[str, Any]]) -> str:
    """Pooled valid / optimal % per wait subset, benchmark and last validation (the paper's Table 5)."""
    names = sorted({s for r in rows for key in ("subsets", "validation_subsets") for s in r[key]})
    if not names:
        return ""
    head = ["run", *[f"benchmark {s}" for s in names], *[f"validation {s}" for s in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"`{row['name']}`"]
        for key in ("subsets", "validation_subsets"):
            for s in names:
                c = row[key].get(s)
                cells.append(f"{c['valid']:.2f} / {c['optimal']:.2f}" if c else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Pooled over agents and sizes, valid % / optimal % per wait subset."]
    return "\n".join(lines)


# -- arms: several seeds per experiment --------------------------------------------------------------------
def arm_key(experiment: Mapping[str, Any]) -> str:
    """What two runs of one arm share: the experiment without the seeds ``--seed`` sets, name and
    description (:func:`_shared_part`)."""
    return json.dumps(_shared_part(experiment), sort_keys=True, default=str)


def arm_label(names: Sequence[str]) -> str:
    """The arm's name: the runs' common name, without a trailing seed suffix.

    >>> arm_label(["cpu-main-self-s0", "cpu-main-self-s1"]), arm_label(["fixed_seed2"]), arm_label(["v6"])
    ('cpu-main-self', 'fixed', 'v6')
    >>> arm_label(["cpu-a-s0", "cpu-b-s1"])
    'cpu'

    """
    stripped = {_SEED_SUFFIX.sub("", n) or n for n in names}
    if len(stripped) == 1:
        return stripped.pop()
    first, last = min(stripped), max(stripped)  # the common prefix of all is that of these two
    common = next((i for i, (x, y) in enumerate(zip(first, last, strict=False)) if x != y), len(first))
    prefix = first[:common].rstrip("-_.+")
    return prefix or sorted(stripped)[0]


def group_arms(
    runs: Sequence[RunRecord], explicit: Mapping[str, Sequence[str | Path]] | None = None
) -> list[Arm]:
    """Group runs into arms: explicitly by name, else by experiment content without the seeds.

    Raises:
        ConfigError: an explicit arm names a directory that is not among the compared runs.
    """
    arms: list[Arm] = []
    placed: set[int] = set()
    if explicit:
        by_root = {r.root.resolve(): i for i, r in enumerate(runs)}
        for name, dirs in explicit.items():
            members = []
            for d in dirs:
                i = by_root.get(Path(d).resolve())
                if i is None:
                    raise ConfigError(f"arm {name!r}: {d} is not one of the compared run directories")
                if i in placed:
                    raise ConfigError(f"arm {name!r}: {d} is already in another arm")
                placed.add(i)
                members.append(runs[i])
            arms.append(Arm(name, members))
        for i, r in enumerate(runs):
            if i not in placed:
                arms.append(Arm(r.name, [r]))
        return arms
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        groups.setdefault(arm_key(r.experiment), []).append(r)
    labels: dict[str, int] = {}
    for members in groups.values():
        label = arm_label([m.name for m in members])
        labels[label] = labels.get(label, 0) + 1
        arms.append(Arm(label if labels[label] == 1 else f"{label} ({labels[label]})", members))
    return arms


def differing_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The dotted fields in which two experiments differ, leaving out what an arm may vary (seeds, name).

    >>> differing_fields({"rounds": 2, "seeds": {"data": 0}}, {"rounds": 1, "seeds": {"data": 1}})
    ['rounds']
    >>> differing_fields({"seeds": {"config": 0, "data": 0}}, {"seeds": {"config": 3, "data": 1}})
    ['seeds.config']
    """

    def flat(data: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(data, Mapping) and data:
            return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): data}

    fa, fb = (flat(_shared_part(e)) for e in (a, b))
    missing = object()
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k, missing) != fb.get(k, missing))


def mixed_arms(arms: Sequence[Arm]) -> list[str]:
    """One line per arm whose runs are different experiments (not only other seeds), naming the fields."""
    out = []
    for arm in arms:
        if not arm.runs:
            continue
        first = arm.runs[0]
        other = next((r for r in arm.runs[1:] if arm_key(r.experiment) != arm_key(first.experiment)), None)
        if other is not None:
            fields = differing_fields(first.experiment, other.experiment)
            shown = ", ".join(fields[:6]) + (" ..." if len(fields) > 6 else "")
            out.append(
                f"arm {arm.name!r}: {first.root} and {other.root} are different experiments "
                f"({shown} differ), not seeds of one"
            )
    return out


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n - 1; None for one value), min, max and n.

    >>> spread([10.0, 20.0, 30.0])
    {'n': 3, 'mean': 20.0, 'std': 10.0, 'min': 10.0, 'max': 30.0}
    """
    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {
        "n": n,
        "mean": round(mean, 2),
        "std": None if std is None else round(std, 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def arm_statistics(arm: Arm, which: str) -> dict[str, Any]:
    """``{agents: {"sizes": {size: {valid: spread, optimal: spread}}, "sum": {...}}, "n_runs": n}``.

    ``which`` is ``benchmark`` or ``validation`` (each run's last validated round). Runs without those
    scores are left out (``n`` says how many runs a figure comes from).
    """
    scored = [s for s in (_scores_of(r, which) for r in arm.runs) if s]
    agents = sorted({a for s in scored for a in s.get("table", {})}, key=int)
    out: dict[str, Any] = {"n_runs": len(scored), "agents": {}}
    for a in agents:
        tables = [s["table"][a] for s in scored if a in s.get("table", {})]
        sizes = sorted({n for t in tables for n in t["sizes"]}, key=int)
        out["agents"][a] = {
            "sizes": {
                n: {
                    k: spread([t["sizes"][n][k] for t in tables if n in t["sizes"]])
                    for k in ("valid", "optimal")
                }
                for n in sizes
            },
            "sum": {k: spread([t["sum"][k] for t in tables]) for k in ("valid", "optimal")},
        }
    return out


def arms_markdown(arms: Sequence[Arm], *, mixed: bool = False) -> str:
    """Per split and metric: one row per (arm, agents), mean ± std [min–max] per size and for the Sum.

    ``mixed``: an arm holds different experiments (``--mixed-arms``), which the heading says.
    """
    parts: list[str] = []
    for which in ("benchmark", "validation"):
        stats = [(arm, arm_statistics(arm, which)) for arm in arms]
        sizes = sorted({int(n) for _, st in stats for t in st["agents"].values() for n in t["sizes"]})
        if not sizes:
            continue
        for metric in ("valid", "optimal"):
            title = "benchmark" if which == "benchmark" else "last validation"
            parts += [f"### {title}, {metric} %: mean ± std [min–max] over an arm's runs", ""]
            head = ["arm", "runs", "agents", *[f"{n}x{n}" for n in sizes], "Sum"]
            parts += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for arm, st in stats:
                for a, t in st["agents"].items():
                    cells = [f"`{arm.name}`", str(st["n_runs"]), a]
                    for n in sizes:
                        c = t["sizes"].get(str(n))
                        cells.append(_spread_text(c[metric]) if c else "")
                    cells.append(f"**{_spread_text(t['sum'][metric])}**")
                    parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
    if not parts:
        return ""
    lines = [
        "## Arms (some mix different experiments: --mixed-arms, see the warnings)"
        if mixed
        else "## Arms (runs that differ only in their seeds)",
        "",
        "| arm | runs |",
        "|---|---|",
        *[f"| `{a.name}` | " + ", ".join(f"`{r.root}`" for r in a.runs) + " |" for a in arms],
        "",
        "std is the sample standard deviation over the arm's runs (n - 1); with one run it is `–`. Two arms "
        "whose [min–max] ranges overlap are not told apart by these runs.",
        "",
        *parts,
    ]
    return "\n".join(lines).rstrip()


def _spread_text(s: Mapping[str, Any]) -> str:
    if not s or s.get("mean") is None:
        return ""
    std = "–" if s["std"] is None else f"{s['std']:.2f}"
    if s["n"] == 1:
        return f"{s['mean']:.2f}"
    return f"{s['mean']:.2f} ± {std} [{s['min']:.2f}–{s['max']:.2f}]"


# -- the command -------------------------------------------------------------------------------------------
def unique_runs(dirs: Sequence[Path]) -> tuple[list[RunRecord], list[str]]:
    """Each run once: a directory given twice, a link to one given, or a copy of one (the same ledger
    bytes) is left out with a note. Returns the runs and the notes."""
    from envengineer.loop.rundir import LEDGER, file_digest

    runs: list[RunRecord] = []
    notes: list[str] = []
    seen: dict[Any, Path] = {}
    for d in dirs:
        ledger = d / LEDGER
        keys = [("path", d.resolve())]
        if ledger.is_file():
            keys.append(("content", file_digest(ledger)))
        first = next((seen[k] for k in keys if k in seen), None)
        if first is not None:
            same = "the same directory as" if keys[0] in seen else "a copy of"
            notes.append(f"{d} is {same} {first}: counted once")
            continue
        for k in keys:
            seen[k] = d
        runs.append(load_run(d))
    return runs, notes


def _copy_key(run: RunRecord) -> str | None:
    """What a run and its copy share: the experiment but for its name and description (so its seeds too)
    and every score it holds; None for a run without scores (nothing to tell a copy by)."""
    scores = {
        "benchmark": run.benchmark,
        "start": run.start_validation,
        "rounds": [r.validation for r in run.rounds],
    }
    if run.benchmark is None and not any(r.validation for r in run.rounds):
        return None
    experiment = {k: v for k, v in run.experiment.items() if k not in ("name", "description")}
    return json.dumps([experiment, scores], sort_keys=True, default=str)


def drop_copies(arms: Sequence[Arm]) -> tuple[list[Arm], list[str]]:
    """Each arm without the runs that repeat another of its runs: the same experiment, seeds and scores
    (a copy whose ledger differs, or a rerun of the same seed) is that run again, not another seed, so it
    is left out with a note naming both directories. Runs with the same seeds and other scores stay
    (:func:`shared_seeds` warns about them). Returns the arms and the notes."""
    out: list[Arm] = []
    notes: list[str] = []
    for arm in arms:
        kept: list[RunRecord] = []
        seen: dict[str, RunRecord] = {}
        for r in arm.runs:
            key = _copy_key(r)
            if key is not None and key in seen:
                notes.append(
                    f"arm {arm.name!r}: {r.root} is a copy of {seen[key].root} (the same experiment, seeds "
                    "and scores): counted once"
                )
                continue
            if key is not None:
                seen[key] = r
            kept.append(r)
        out.append(Arm(arm.name, kept))
    return out, notes


def shared_seeds(arms: Sequence[Arm]) -> list[str]:
    """A warning per arm in which two runs have the same seeds (they are one seed counted twice)."""
    out = []
    for arm in arms:
        by_seeds: dict[str, RunRecord] = {}
        for r in arm.runs:
            key = json.dumps(r.experiment.get("seeds"), sort_keys=True, default=str)
            if key in by_seeds:
                out.append(
                    f"arm {arm.name!r}: {by_seeds[key].root} and {r.root} have the same seeds ({key}); "
                    "they are not independent seeds"
                )
            else:
                by_seeds[key] = r
    return out


def checked_pairing(arms: Sequence[Arm], against: str | None, mixed: bool) -> Pairing:
    """The arms' scored sets (:mod:`envengineer.loop.scored_sets`); an arm pooled or compared across
    different sets is refused unless ``mixed``.

    Raises:
        ConfigError: an arm's runs were scored on different sets, or an arm and the ``against`` reference
            were not scored on one identical set, and ``mixed`` is off.
    """
    pair = pairing({a.name: a.runs for a in arms}, against)
    problems = pair.mixtures + [n.split(": its ")[0] for n in pair.unpaired.values()]
    if problems and not mixed:
        raise ConfigError(
            f"{problems[0]}; arms are pooled and paired only on identical sets (ids and boards): compare "
            "runs scored on the same boards, or pass --mixed-arms to show each arm's sets and leave those "
            "differences out"
        )
    return pair


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


def parse_arm(text: str) -> tuple[str, list[Path]]:
    """``NAME=DIR,DIR,...`` (the ``--arm`` option) -> ``(NAME, [DIR, ...])``.

    >>> parse_arm("fixed=runs/f0,runs/f1")
    ('fixed', [PosixPath('runs/f0'), PosixPath('runs/f1')])
    """
    name, sep, dirs = text.partition("=")
    paths = [Path(d.strip()) for d in dirs.split(",") if d.strip()]
    if not sep or not name.strip() or not paths:
        raise ConfigError(f"--arm {text!r} must look like NAME=DIR,DIR,... (e.g. fixed=runs/f-s0,runs/f-s1)")
    return name.strip(), paths


def _fmt(v: Any, digits: int = 2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
