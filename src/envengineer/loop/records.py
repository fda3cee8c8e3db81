"""What the stages write into the run directory: scores, training records, manifest rows."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from envengineer.loop.rundir import atomic_write_json, read_json
from envengineer.mapf.instance import Instance


def write_scores(path: Path, report: Any) -> dict[str, Any]:
    """The report's JSON, written to ``path`` unless the evaluator already wrote exactly that."""
    scores = report.to_json() if hasattr(report, "to_json") else dict(report)
    if not (path.exists() and read_json(path) == json.loads(json.dumps(scores))):
        atomic_write_json(path, scores)
    return scores


def train_record(
    result: Any, *, model_in: str | None, seed: int, preset: str, epochs: float | None
) -> dict[str, Any]:
    """The ``metrics.json`` record of a training (or warm-start) result."""
    return {
        "model_in": model_in,
        "checkpoint": str(field_of(result, "checkpoint")),
        "seed": seed,
        "preset": preset,
        "epochs": epochs,
        "steps": int(field_of(result, "steps", 0) or 0),
        "seconds": float(field_of(result, "seconds", 0.0) or 0.0),
        "metrics": to_jsonable(field_of(result, "metrics", {}) or {}),
    }


def manifest_row(inst: Instance) -> dict[str, Any]:
    """One line of a ``manifest.jsonl``: the instance's id, seed, board hash and shape."""
    return {
        "id": inst.id,
        "seed": list(inst.seed),
        "board_hash": inst.board_hash(),
        "size": inst.size,
        "num_agents": inst.num_agents,
        "hole_ratio": round(inst.hole_ratio, 4),
        "needs_wait": inst.needs_wait,
        "optimal_soc": inst.optimal_soc,
    }


def field_of(obj: Any, name: str, *default: Any) -> Any:
    """``obj[name]`` of a dict, else ``obj.name`` (a component may return either)."""
    if isinstance(obj, dict):
        return obj.get(name, *default) if default else obj[name]
    return getattr(obj, name, *default)


def to_jsonable(obj: Any) -> Any:
    """A component's result made JSON data (paths, models, dataclasses, numpy scalars)."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if hasattr(obj, "item"):
        return obj.item()
    return repr(obj)
