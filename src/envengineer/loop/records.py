"""What the stages write into the run directory and read back: scores, training records, manifest rows.

A stage's ``scores.json`` is the testbed's ScoreReport JSON plus ``scored_set``, what it scored identified
by content (:func:`scored_set`); a resumed run reads it back through :func:`read_scores`, the same shape
check ``report`` and ``compare`` apply (:func:`envengineer.loop.integrity.scores_problem`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from envengineer.loop.integrity import scores_problem
from envengineer.loop.rundir import DamagedRunError, atomic_write_json, read_json
from envengineer.mapf.instance import Instance, instances_digest

#: The key of ``scores.json`` that names the instances scored.
SCORED_SET = "scored_set"


def scored_set(
    instances: Sequence[Instance], *, version: str | None = None, path: str | None = None
) -> dict[str, Any]:
    """What a ``scores.json`` scored: ``{"sha256", "n"}``, and for a benchmark its packaged
    ``benchmark_version`` or its ``benchmark_path`` (the file's instances). ``sha256`` is
    :func:`envengineer.mapf.instance.instances_digest`: ids and board hashes, sorted by id.
    """
    out: dict[str, Any] = {"sha256": instances_digest(instances), "n": len(instances)}
    if path is not None:
        out["benchmark_path"] = str(path)
    elif version is not None:
        out["benchmark_version"] = version
    return out


def write_scores(path: Path, report: Any, scored: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report's JSON with ``scored`` under ``scored_set``, written to ``path`` unless the evaluator
    already wrote exactly that."""
    scores = report.to_json() if hasattr(report, "to_json") else dict(report)
    if scored is not None:
        scores = {**scores, SCORED_SET: scored}
    if not (path.exists() and read_json(path) == json.loads(json.dumps(scores))):
        atomic_write_json(path, scores)
    return scores


def read_scores(path: Path) -> dict[str, Any]:
    """A finished stage's ``scores.json``, checked for the shape its readers need (the engineer's context,
    the next round's request, the run's summary).

    Raises:
        DamagedRunError: the file is missing, not JSON or not of the scores' shape; the message names it.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DamagedRunError(f"{path} cannot be read ({exc.strerror or exc}); restore it") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        data, problem = None, "not JSON"
    else:
        problem = scores_problem(data)
    if problem is not None:
        raise DamagedRunError(
            f"{path} is not a scores file ({problem}); restore it, or delete it and resume with "
            "--redo-damaged to run its stage again"
        )
    return data


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
