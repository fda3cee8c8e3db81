"""The engineer's context: the switchable modules F, G, H, S and T of SPEC §5, rendered deterministically.

Each module renders one Markdown section from plain data (the validation ScoreReport JSON, earlier rounds,
the previous rationale, training details). Rendering is a pure function: the same inputs give the same
text byte for byte (floats at fixed precision, keys in numeric order), so prompts can be snapshot-tested and
replayed from a run directory.

=====  ==================  =============================================================================
code   module              content
=====  ==================  =============================================================================
F      failure breakdown   valid/optimal % and failure-category counts per (agents, map size)
G      guidelines          short general curriculum advice (keep what works, target the frontier, ...)
H      history             the rounds so far, each with its configuration and pooled results per size;
                           the round-0 default is included or not (``history_include_default``)
S      self-summary        the rationale the engineer wrote in the previous round
T      training details    ``bookkeeping`` (round index, rounds, epochs, samples) or ``full`` (adds the
                           algorithm, objective, reward and hyper-parameters)
E      effects             what each round's change did per size (:mod:`.effects`; in no variant)
=====  ==================  =============================================================================

The paper's cumulative ablation is available as :data:`V1` ... :data:`V6` (see :data:`VARIANTS`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.errors import ConfigError
from envengineer.mapf.config import RoundConfig, format_validation_error

TrainingDetail = Literal["none", "bookkeeping", "full"]

#: Display order of failure categories (SPEC §2.1 check order, then ``suboptimal``); others follow by name.
CATEGORY_ORDER: tuple[str, ...] = (
    "parse_error",
    "agent_mismatch",
    "invalid_action",
    "out_of_bounds",
    "hole",
    "vertex_conflict",
    "swap_conflict",
    "goal_not_reached",
    "suboptimal",
)

CATEGORY_MEANING: dict[str, str] = {
    "parse_error": "no parseable plan in the answer",
    "agent_mismatch": "a plan line missing, repeated or for an unknown agent",
    "invalid_action": "a token that is not UP, DOWN, LEFT, RIGHT or WAIT",
    "out_of_bounds": "a move leaves the grid",
    "hole": "an agent steps on a hole",
    "vertex_conflict": "two agents on the same cell at the same time",
    "swap_conflict": "two agents swap cells in one step",
    "goal_not_reached": "an agent is not on its goal at the end",
    "suboptimal": "a valid plan whose sum of costs is above the optimum",
}


# -- the switches -----------------------------------------------------------------------------------------
#: The one-letter switches of experiment files and the :class:`ContextSpec` fields they set.
SWITCHES: dict[str, str] = {
    "F": "failures",
    "G": "guidelines",
    "H": "history",
    "H_default": "history_include_default",
    "S": "self_summary",
    "T": "training_details",
    "L": "learnability",
    "E": "effects",
}


class ContextSpec(BaseModel):
    """Which context modules the engineer reads (SPEC §5).

    >>> V6.label
    'F+G+H(without default)+S+T(bookkeeping)'
    >>> ContextSpec.from_switches({"F": True, "T": "full"}).training_details
    'full'
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: bool = Field(
        default=True, description="F: validation failure categories and rates per map size."
    )
    guidelines: bool = Field(default=True, description="G: short general advice on curriculum design.")
    history: bool = Field(default=True, description="H: the configurations so far with their results.")
    history_include_default: bool = Field(
        default=False, description="H: whether the history shows the round-0 default configuration."
    )
    self_summary: bool = Field(default=True, description="S: the rationale written in the previous round.")
    learnability: bool = Field(
        default=False,
        description="L: the policy's sampled success and zero-variance share per map size in the round's "
        "training (not one of the paper's modules).",
    )
    effects: bool = Field(
        default=False, description="E: what each round's change did per map size (not a paper module)."
    )
    training_details: TrainingDetail = Field(
        default="bookkeeping",
        description="T: none; bookkeeping (round index, rounds, epochs); full (adds algorithm, objective, "
        "reward, hyper-parameters).",
    )

    @property
    def label(self) -> str:
        """A short human-readable code such as ``F+G+H(without default)+S+T(bookkeeping)``."""
        parts = []
        if self.failures:
            parts.append("F")
        if self.guidelines:
            parts.append("G")
        if self.history:
            parts.append("H(with default)" if self.history_include_default else "H(without default)")
        if self.self_summary:
            parts.append("S")
        if self.training_details != "none":
            parts.append(f"T({self.training_details})")
        if self.learnability:
            parts.append("L")
        if self.effects:
            parts.append("E")
        return "+".join(parts) or "(empty)"

    def switches(self) -> dict[str, Any]:
        """The one-letter form used in experiment files (:data:`SWITCHES`); ``E`` only where on, so that
        every earlier context's switches, and the run keys made of them, stay as they were."""
        return {k: getattr(self, field) for k, field in SWITCHES.items() if k != "E" or self.effects}

    @classmethod
    def from_switches(cls, switches: Mapping[str, Any]) -> ContextSpec:
        """Build from the one-letter form; missing switches are off (``T``: ``none``).

        Raises:
            ConfigError: an unknown switch or a value of the wrong type.
        """
        unknown = sorted(str(k) for k in switches if k not in SWITCHES)
        if unknown:
            raise ConfigError(f"unknown context switch(es) {unknown}; use {sorted(SWITCHES)}")
        data: dict[str, Any] = {field: False for field in SWITCHES.values()} | {"training_details": "none"}
        data.update({SWITCHES[k]: v for k, v in switches.items()})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"context switches: {format_validation_error(exc)}") from None


#: The paper's context ablation, cumulative (SPEC §5). V4 swaps V3's history-with-default for the history
#: without it; V5 adds S to V4; V6 adds T as bookkeeping and is the final method.
V1 = ContextSpec.from_switches({"F": True})
V2 = ContextSpec.from_switches({"F": True, "G": True})
V3 = ContextSpec.from_switches({"F": True, "G": True, "H": True, "H_default": True})
V4 = ContextSpec.from_switches({"F": True, "G": True, "H": True, "H_default": False})
V5 = ContextSpec.from_switches({"F": True, "G": True, "H": True, "S": True})
V6 = ContextSpec.from_switches({"F": True, "G": True, "H": True, "S": True, "T": "bookkeeping"})
#: The paper's "full RL details instead of bookkeeping" row: V6 with T = full.
V6_FULL = ContextSpec.from_switches({"F": True, "G": True, "H": True, "S": True, "T": "full"})
FINAL = V6

VARIANTS: dict[str, ContextSpec] = {
    "V1": V1,
    "V2": V2,
    "V3": V3,
    "V4": V4,
    "V5": V5,
    "V6": V6,
    "V6-full": V6_FULL,
}


def context_spec(value: str | Mapping[str, Any] | ContextSpec) -> ContextSpec:
    """A ContextSpec from a variant name (``"V3"``), a mapping of switches, or a ContextSpec.

    A mapping may use the one-letter form (``F``, ``G``, ``H``, ``H_default``, ``S``, ``T``) or the field
    names of :class:`ContextSpec`; it may also start from a variant: ``{"variant": "V6", "T": "full"}``.

    >>> context_spec("V2").label
    'F+G'
    >>> context_spec({"variant": "V6", "T": "full"}) == V6_FULL
    True
    """
    if isinstance(value, ContextSpec):
        return value
    if isinstance(value, str):
        if value not in VARIANTS:
            raise ConfigError(f"unknown context variant {value!r}; use one of {list(VARIANTS)} or a mapping")
        return VARIANTS[value]
    if isinstance(value, Mapping):
        data = dict(value)
        base = context_spec(data.pop("variant")) if "variant" in data else None
        if set(data) <= set(ContextSpec.model_fields) and data and base is None:
            try:
                return ContextSpec.model_validate(data)
            except ValidationError as exc:
                raise ConfigError(f"context: {format_validation_error(exc)}") from None
        switches = base.switches() if base is not None else {}
        switches.update(data)
        return ContextSpec.from_switches(switches)
    raise ConfigError(
        f"context must be a variant name, a mapping of switches or a ContextSpec, got {value!r:.60}"
    )


# -- history ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HistoryEntry:
    """One finished round: the configuration it trained on and its validation results.

    Attributes:
        round_index: The round (0 is the first).
        config: The applied configuration of that round.
        report: The validation ScoreReport JSON (``table``, ``failures``, ``summary``; ``verdicts`` are not
            needed), or ``None`` when the round was not validated.
        is_default: True for the round-0 default configuration (the random default of SPEC §3).
    """

    round_index: int
    config: RoundConfig
    report: Mapping[str, Any] | None = None
    is_default: bool = False

    @classmethod
    def from_report(
        cls,
        round_index: int,
        config: RoundConfig,
        report: Mapping[str, Any] | None,
        *,
        is_default: bool | None = None,
    ) -> HistoryEntry:
        """Build an entry, dropping the per-instance ``verdicts``; ``is_default`` defaults to round 0."""
        compact = None if report is None else {k: v for k, v in report.items() if k != "verdicts"}
        return cls(round_index, config, compact, round_index == 0 if is_default is None else is_default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "round_index": self.round_index,
            "config": self.config.model_dump(mode="json"),
            "report": None if self.report is None else dict(self.report),
            "is_default": self.is_default,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryEntry:
        return cls(
            int(data["round_index"]),
            RoundConfig.model_validate(data["config"]),
            data.get("report"),
            bool(data.get("is_default", False)),
        )


# -- helpers over the ScoreReport JSON ---------------------------------------------------------------------
def _num_key(key: Any) -> tuple[int, Any]:
    try:
        return (0, int(key))
    except (TypeError, ValueError):
        return (1, str(key))


def _sorted_keys(mapping: Mapping[Any, Any]) -> list[Any]:
    return sorted(mapping, key=_num_key)


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _pct(v: Any) -> str:
    f = _float(v)
    return "-" if f is None else f"{f:.1f}"


def _ratio(v: Any) -> str:
    f = _float(v)
    return "-" if f is None else f"{f:.3f}"


def _ordered_categories(categories: set[str]) -> list[str]:
    known = [c for c in CATEGORY_ORDER if c in categories]
    return known + sorted(categories - set(CATEGORY_ORDER))


def per_size_rates(report: Mapping[str, Any] | None) -> dict[int, dict[str, float]]:
    """Valid and optimal % per map size, pooled over agent counts (weighted by instance counts).

    >>> per_size_rates({"table": {"3": {"sizes": {"4": {"n": 2, "valid": 50.0, "optimal": 0.0}}},
    ...                           "4": {"sizes": {"4": {"n": 2, "valid": 100.0, "optimal": 50.0}}}}})
    {4: {'n': 4.0, 'valid': 75.0, 'optimal': 25.0}}
    """
    acc: dict[int, list[float]] = {}
    table = (report or {}).get("table") or {}
    for agents in _sorted_keys(table):
        sizes = (table[agents] or {}).get("sizes") or {}
        for size in _sorted_keys(sizes):
            row = sizes[size] or {}
            n, valid, optimal = _float(row.get("n")), _float(row.get("valid")), _float(row.get("optimal"))
            if n is None or n <= 0 or valid is None:
                continue
            try:
                key = int(size)
            except (TypeError, ValueError):
                continue
            a = acc.setdefault(key, [0.0, 0.0, 0.0])
            a[0] += n
            a[1] += n * valid
            a[2] += n * (optimal or 0.0)
    return {k: {"n": a[0], "valid": a[1] / a[0], "optimal": a[2] / a[0]} for k, a in sorted(acc.items())}


def per_size_failures(report: Mapping[str, Any] | None) -> dict[int, dict[str, int]]:
    """Failure-category counts per map size, summed over agent counts."""
    out: dict[int, dict[str, int]] = {}
    failures = (report or {}).get("failures") or {}
    for agents in _sorted_keys(failures):
        for size, counts in (failures[agents] or {}).items():
            try:
                key = int(size)
            except (TypeError, ValueError):
                continue
            cell = out.setdefault(key, {})
            for cat, count in (counts or {}).items():
                f = _float(count)
                if f:
                    cell[str(cat)] = cell.get(str(cat), 0) + int(f)
    return dict(sorted(out.items()))


def _top_failures(counts: Mapping[str, int], k: int = 2) -> str:
    order = {c: i for i, c in enumerate(_ordered_categories(set(counts)))}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0]]))[:k]
    return ", ".join(f"{c} {n}" for c, n in top) or "-"


def _overall_line(report: Mapping[str, Any]) -> str | None:
    s = report.get("summary") or {}
    n = _float(s.get("n"))
    if n is None:
        return None
    return f"{int(n)} instances; valid {_pct(s.get('valid'))}%, optimal {_pct(s.get('optimal'))}%."


# -- the modules ------------------------------------------------------------------------------------------
def render_failures(report: Mapping[str, Any] | None) -> str:
    """F: validation rates and failure-category counts per (agents, map size)."""
    lines = ["## Validation results of the round that just finished", ""]
    table = (report or {}).get("table") or {}
    if not report or not table:
        lines.append("No validation results are available.")
        return "\n".join(lines)
    overall = _overall_line(report)
    if overall:
        lines += [f"Overall: {overall}", ""]
    failures = report.get("failures") or {}
    seen: set[str] = set()
    for agents in _sorted_keys(table):
        block = table[agents] or {}
        sizes = block.get("sizes") or {}
        fails = failures.get(agents) or failures.get(str(agents)) or {}
        cats = _ordered_categories(
            {str(c) for s in fails.values() for c, n in (s or {}).items() if _float(n)}
        )
        seen.update(cats)
        total = block.get("sum") or {}
        lines.append(
            f"### {agents} agents (mean over sizes: valid {_pct(total.get('valid'))}%, "
            f"optimal {_pct(total.get('optimal'))}%)"
        )
        lines.append("")
        lines.append("| size | n | valid % | optimal % | " + "".join(f"{c} | " for c in cats).rstrip())
        lines.append("|" + "---|" * (4 + len(cats)))
        for size in _sorted_keys(sizes):
            row = sizes[size] or {}
            counts = fails.get(size) or fails.get(str(size)) or {}
            n = _float(row.get("n"))
            cells = [
                f"{size}x{size}",
                str(int(n)) if n is not None else "-",
                _pct(row.get("valid")),
                _pct(row.get("optimal")),
            ]
            cells += [str(int(_float(counts.get(c)) or 0)) for c in cats]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if seen:
        lines.append(
            "Failure categories (the first check a plan fails): "
            + "; ".join(f"{c}: {CATEGORY_MEANING.get(c, c)}" for c in _ordered_categories(seen))
            + "."
        )
    else:
        lines.append("No failures were recorded.")
    return "\n".join(lines).rstrip()


def render_learnability(sampled: Mapping[str, Any] | None) -> str:
    """L: per map size, how often the policy's sampled plans were valid in the round's training and the
    share of GRPO groups whose samples all scored the same (no gradient)."""
    lines = ["## What the policy sampled during the round's training", ""]
    rows = []
    for size in _sorted_keys(sampled or {}):
        s = (sampled or {}).get(size) or {}
        n = _float(s.get("completions"))
        if not n:
            continue
        zero = _float(s.get("zero_std"))
        rows.append(
            f"| {size}x{size} | {int(n)} | {_pct(100 * (_float(s.get('valid')) or 0.0))} | "
            f"{_pct(100 * (_float(s.get('optimal')) or 0.0))} | {'-' if zero is None else _pct(100 * zero)} |"
        )
    if not rows:
        lines.append("No training samples were recorded.")
        return "\n".join(lines)
    lines += [
        "| size | sampled plans | valid % | optimal % | groups without reward variance % |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "A group whose plans all score the same teaches nothing; sizes where about half the sampled plans "
        "are valid give the most signal.",
    ]
    return "\n".join(lines)


GUIDELINES: tuple[str, ...] = (
    "Keep what works: change a few knobs at a time, where the results give a reason to.",
    "Target the frontier: put more data on sizes where the model is partly successful (valid rate well "
    "above 0% and well below 100%); sizes it always solves or never solves teach little.",
    "Do not max out difficulty: raise hole_ratio and wait_ratio step by step at sizes the model already "
    "handles; a round full of the hardest instances gives the model nothing it can solve.",
    "Keep some easier data so that skills already learned are not forgotten.",
    "Read the failures: many hole or out_of_bounds failures call for practice with holes at that size; "
    "many vertex_conflict or swap_conflict failures call for more instances that need a wait; parse_error "
    "and agent_mismatch point to the answer format, which easier instances help with.",
)


def render_guidelines() -> str:
    """G: short general advice on curriculum design (SPEC §5)."""
    return "\n".join(["## Guidelines for designing the next round", "", *(f"- {g}" for g in GUIDELINES)])


def _history_block(entry: HistoryEntry, *, current: bool) -> list[str]:
    title = f"### Round {entry.round_index}"
    notes = []
    if entry.is_default:
        notes.append("the default starting configuration")
    if current:
        notes.append("the round that just finished")
    if notes:
        title += " (" + "; ".join(notes) + ")"
    lines = [title, ""]
    if entry.report is not None:
        overall = _overall_line(entry.report)
        if overall:
            lines += [f"Validation: {overall}", ""]
    rates = per_size_rates(entry.report)
    fails = per_size_failures(entry.report)
    ratios = entry.config.normalised_ratios()
    lines.append("| size | data_ratio | hole_ratio | wait_ratio | valid % | optimal % | top failures |")
    lines.append("|---|---|---|---|---|---|---|")
    for n in sorted(set(entry.config.sizes) | set(rates)):
        sc = entry.config.sizes.get(n)
        r = rates.get(n, {})
        lines.append(
            f"| {n}x{n} | {_ratio(ratios.get(n))} | {_ratio(sc.hole_ratio if sc else None)} | "
            f"{_ratio(sc.wait_ratio if sc else None)} | {_pct(r.get('valid'))} | {_pct(r.get('optimal'))} | "
            f"{_top_failures(fails.get(n, {}))} |"
        )
    lines.append("")
    return lines


def render_history(history: Sequence[HistoryEntry], current: HistoryEntry, *, include_default: bool) -> str:
    """H: the rounds so far (earlier ones and the one that just finished), configuration beside results.

    Rates are pooled over the validation set's agent counts. With ``include_default=False`` the round-0
    default configuration is left out.
    """
    entries = [e for e in history if e.round_index < current.round_index] + [current]
    entries = sorted(entries, key=lambda e: e.round_index)
    if not include_default:
        entries = [e for e in entries if not e.is_default]
    lines = ["## History of training rounds", ""]
    if not entries:
        lines.append("No earlier rounds to show.")
        return "\n".join(lines)
    lines += [
        "Each round's configuration with its validation results per size (pooled over agent counts).",
        "",
    ]
    for e in entries:
        lines += _history_block(e, current=e.round_index == current.round_index)
    return "\n".join(lines).rstrip()


def render_self_summary(previous_rationale: str | None) -> str:
    """S: the rationale the engineer wrote in the previous round."""
    lines = ["## Your rationale from the previous round", ""]
    text = (previous_rationale or "").strip()
    if not text:
        lines.append("None: this is your first proposal, or your previous proposal was not accepted.")
    else:
        lines += [f"> {line}".rstrip() for line in text.splitlines()]
    return "\n".join(lines)


BOOKKEEPING_KEYS = ("round_index", "total_rounds", "epochs", "num_samples", "num_agents")
FULL_KEYS = ("algorithm", "objective", "reward", "hyperparameters")


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_value(v[k])}" for k in sorted(v, key=str))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def render_training_details(
    round_index: int, details: Mapping[str, Any], level: TrainingDetail, config: RoundConfig | None = None
) -> str:
    """T: ``bookkeeping`` (where the run stands) or ``full`` (adds how the model is trained).

    Recognised keys of ``details``: ``total_rounds``, ``epochs``, ``num_samples``, ``num_agents`` (a count,
    or counts in equal shares) (bookkeeping); ``algorithm``, ``objective``, ``reward``, ``hyperparameters``
    and any other key (full).
    """
    if level == "none":
        return ""
    total = details.get("total_rounds")
    lines = ["## Training schedule" if level == "bookkeeping" else "## Training details", ""]
    nxt = round_index + 1
    if isinstance(total, int) and not isinstance(total, bool):
        head = (
            f"- Round {round_index} of {total} has just finished (rounds are numbered 0 to {total - 1}); "
            f"your configuration is used for round {nxt}"
        )
        if nxt == total - 1:
            head += ", the last one"
    else:
        head = (
            f"- Round {round_index} has just finished (rounds are numbered from 0); your configuration is "
            f"used for round {nxt}"
        )
    lines.append(head + ".")
    epochs = details.get("epochs")
    samples = details.get("num_samples", config.num_samples if config else None)
    agents = details.get("num_agents", config.num_agents if config else None)
    parts = []
    if samples is not None:
        parts.append(f"{samples} freshly generated training instances")
    if isinstance(agents, (list, tuple)) and agents:  # training.agents: a mix in equal shares
        parts.append(
            " or ".join(map(str, agents)) + " agents each" + (", in equal shares" * (len(agents) > 1))
        )
    elif agents is not None:
        parts.append(f"{agents} agents each")
    if epochs is not None:
        parts.append(f"{_value(epochs)} epochs")
    if parts:
        lines.append("- Each round trains on " + ", ".join(parts) + ".")
    if level == "full":
        labels = {
            "algorithm": "Algorithm",
            "objective": "Objective",
            "reward": "Reward",
            "hyperparameters": "Hyper-parameters",
        }
        for key in FULL_KEYS:
            if details.get(key) is not None:
                lines.append(f"- {labels[key]}: {_value(details[key])}")
        for key in sorted(str(k) for k in details):
            if key not in BOOKKEEPING_KEYS and key not in FULL_KEYS:
                lines.append(f"- {key}: {_value(details[key])}")
    return "\n".join(lines)
