"""From responses to the paper's table: valid % and optimal % per (agents, size) cell and the Sum column.

The Sum column is the unweighted mean over the sizes present for that agent count (SPEC §4). Failure
categories are counted per (agents, size); a valid but not SoC-optimal answer counts as ``suboptimal``.
An instance without a response is scored as the empty response (a ``parse_error``).
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import InstanceFormatError
from envengineer.mapf.instance import Instance
from envengineer.mapf.validator import FAILURE_CATEGORIES, Verdict, validate

log = logging.getLogger(__name__)

CATEGORIES: tuple[str, ...] = (*FAILURE_CATEGORIES, "suboptimal")


@dataclass(frozen=True)
class ScoreReport:
    """Verdicts of one set of responses and their aggregates.

    Attributes:
        instances: The scored instances, in file order.
        verdicts: Verdict per instance id.
        tokens: Completion tokens per instance id, where known.
    """

    instances: tuple[Instance, ...]
    verdicts: Mapping[str, Verdict]
    tokens: Mapping[str, int] = field(default_factory=dict)

    def cells(self) -> dict[int, dict[int, list[Verdict]]]:
        out: dict[int, dict[int, list[Verdict]]] = defaultdict(lambda: defaultdict(list))
        for inst in self.instances:
            out[inst.num_agents][inst.size].append(self.verdicts[inst.id])
        return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}

    def table(self) -> dict[str, Any]:
        """``{agents: {"sizes": {size: {n, valid, optimal}}, "sum": {valid, optimal}}}`` in percent."""
        table: dict[str, Any] = {}
        for agents, sizes in self.cells().items():
            rows = {
                str(n): {"n": len(v), "valid": _pct(v, "valid"), "optimal": _pct(v, "optimal")}
                for n, v in sizes.items()
            }
            table[str(agents)] = {
                "sizes": rows,
                "sum": {
                    key: round(sum(r[key] for r in rows.values()) / len(rows), 2)
                    for key in ("valid", "optimal")
                },
            }
        return table

    def subsets(self) -> dict[str, dict[str, Any]]:
        """Pooled over agents and sizes, per wait subset (the paper's Table 5 shape): n, valid, optimal %.

        Empty when the instances carry no ``subset`` (only benchmark-shaped sets have wr_025/050/075).
        """
        groups: dict[str, list[Verdict]] = defaultdict(list)
        for inst in self.instances:
            name = inst.meta.get("subset")
            if name:
                groups[str(name)].append(self.verdicts[inst.id])
        return {
            name: {"n": len(v), "valid": _pct(v, "valid"), "optimal": _pct(v, "optimal")}
            for name, v in sorted(groups.items())
        }

    def failures(self) -> dict[str, dict[str, dict[str, int]]]:
        """Failure category counts per agents and size (categories with a zero count omitted)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for agents, sizes in self.cells().items():
            out[str(agents)] = {}
            for n, verdicts in sizes.items():
                counts = Counter(v.failure for v in verdicts if v.failure is not None)
                out[str(agents)][str(n)] = {c: counts[c] for c in CATEGORIES if counts[c]}
        return out

    def summary(self) -> dict[str, Any]:
        vs = [self.verdicts[i.id] for i in self.instances]
        toks = [self.tokens[i.id] for i in self.instances if self.tokens.get(i.id) is not None]
        return {
            "n": len(vs),
            "valid": _pct(vs, "valid"),
            "optimal": _pct(vs, "optimal"),
            "makespan_optimal": _pct(vs, "makespan_optimal"),
            "parsed": round(100.0 * sum(v.failure != "parse_error" for v in vs) / len(vs), 2) if vs else 0.0,
            "mean_tokens": round(sum(toks) / len(toks), 1) if toks else None,
        }

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report (the shape ``envengineer score --json`` writes)."""
        verdicts = []
        for inst in self.instances:
            v = self.verdicts[inst.id]
            verdicts.append(
                {
                    "id": inst.id,
                    "num_agents": inst.num_agents,
                    "size": inst.size,
                    "subset": inst.meta.get("subset"),
                    **v.to_dict(),
                    "tokens": self.tokens.get(inst.id),
                }
            )
        return {
            "summary": self.summary(),
            "table": self.table(),
            "subsets": self.subsets(),
            "failures": self.failures(),
            "verdicts": verdicts,
        }

    def markdown(self) -> str:
        """The paper-style table: one row per agent count, ``valid / optimal`` per size, then Sum."""
        table = self.table()
        sizes = sorted({int(n) for t in table.values() for n in t["sizes"]})
        head = "| agents | " + " | ".join(f"{n}x{n}" for n in sizes) + " | Sum |"
        lines = [head, "|" + "---|" * (len(sizes) + 2)]
        for agents, t in table.items():
            cells = []
            for n in sizes:
                r = t["sizes"].get(str(n))
                cells.append(f"{r['valid']:.1f} / {r['optimal']:.1f}" if r else "")
            lines.append(
                f"| {agents} | "
                + " | ".join(cells)
                + f" | {t['sum']['valid']:.2f} / {t['sum']['optimal']:.2f} |"
            )
        s = self.summary()
        lines.append("")
        lines.append(
            f"valid / optimal %, {s['n']} instances; overall {s['valid']:.2f} / {s['optimal']:.2f}"
            f" (makespan-optimal {s['makespan_optimal']:.2f}); parsed {s['parsed']:.2f} %"
        )
        subsets = subset_table_md(self.subsets())
        if subsets:
            lines += ["", subsets]
        return "\n".join(lines)


def subset_table_md(subsets: Mapping[str, Mapping[str, Any]]) -> str:
    """Pooled valid % / optimal % per wait subset as a one-row Markdown table ('' without subsets).

    >>> print(subset_table_md({"wr_025": {"n": 4, "valid": 50.0, "optimal": 25.0}}))
    | pooled | wr_025 |
    |---|---|
    | valid / optimal % (n) | 50.00 / 25.00 (4) |
    """
    if not subsets:
        return ""
    names = sorted(subsets)
    cells = [f"{subsets[k]['valid']:.2f} / {subsets[k]['optimal']:.2f} ({subsets[k]['n']})" for k in names]
    return "\n".join(
        [
            "| pooled | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
            "| valid / optimal % (n) | " + " | ".join(cells) + " |",
        ]
    )


def score(
    instances: Sequence[Instance],
    responses: Mapping[str, str],
    tokens: Mapping[str, int | None] | None = None,
) -> ScoreReport:
    """Validate every instance's response and aggregate.

    >>> from envengineer.mapf.instance import Instance
    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> score([inst], {"x": "<answer>A0: RIGHT\\nA1: RIGHT</answer>"}).summary()["optimal"]
    100.0
    """
    unknown = set(responses) - {i.id for i in instances}
    if unknown:
        log.warning(
            "%d responses name ids that are not in the instance file (e.g. %r); ignored",
            len(unknown),
            sorted(unknown)[0],
        )
    verdicts = {inst.id: validate(inst, responses.get(inst.id, "")) for inst in instances}
    toks = {k: int(v) for k, v in (tokens or {}).items() if v is not None}
    return ScoreReport(instances=tuple(instances), verdicts=verdicts, tokens=toks)


def load_responses(path: str | Path) -> tuple[dict[str, str], dict[str, int | None]]:
    """Read a responses file: JSON Lines of ``{"id": ..., "response": "..."}`` (and ``completion_tokens``).

    When an id appears more than once, the last line wins (a resumed evaluation appends).
    """
    path = Path(path)
    if not path.exists():
        raise InstanceFormatError(f"{path}: no such responses file")
    responses: dict[str, str] = {}
    tokens: dict[str, int | None] = {}
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            d = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InstanceFormatError(
                f"{path}:{lineno}: not valid UTF-8 (a torn last line? resume the evaluation to redo it)"
            ) from None
        except json.JSONDecodeError as exc:
            raise InstanceFormatError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if (
            not isinstance(d, dict)
            or "id" not in d
            or not isinstance(d.get("response", ""), (str, type(None)))
        ):
            raise InstanceFormatError(f'{path}:{lineno}: expected {{"id": ..., "response": "..."}}')
        responses[str(d["id"])] = d.get("response") or ""
        tokens[str(d["id"])] = d.get("completion_tokens", d.get("tokens"))
    return responses, tokens


def _pct(verdicts: Sequence[Verdict], attr: str) -> float:
    return (
        round(100.0 * sum(bool(getattr(v, attr)) for v in verdicts) / len(verdicts), 2) if verdicts else 0.0
    )
