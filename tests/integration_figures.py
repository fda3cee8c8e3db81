"""The figures every integration reproduces: `envengineer score` of the reference policies on the benchmark.

Responses come from `envengineer play benchmark --policy P` and the expected tables from
`envengineer score benchmark P.jsonl --json`, both through the real command line, once per test session.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from envengineer.cli import main
from envengineer.mapf.benchmark import load_benchmark
from envengineer.mapf.instance import Instance
from envengineer.mapf.scoring import ScoreReport

POLICIES = ("optimal", "greedy", "random")
_DIR = Path(tempfile.mkdtemp(prefix="envengineer-figures-"))
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)


@lru_cache(maxsize=1)
def benchmark() -> tuple[Instance, ...]:
    return tuple(load_benchmark())


@cache
def responses(policy: str) -> dict[str, str]:
    """Instance id -> the policy's response, as `envengineer play` writes it."""
    out = _DIR / f"{policy}.jsonl"
    assert main(["play", "benchmark", "--policy", policy, "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["id"]: r["response"] for r in rows}


@cache
def cli_table(policy: str) -> str:
    """`envengineer score`'s table (valid % / optimal % per cell and the Sum) as canonical JSON."""
    responses(policy)
    out = _DIR / f"{policy}.json"
    assert main(["score", "benchmark", str(_DIR / f"{policy}.jsonl"), "--json", str(out)]) == 0
    return json.dumps(json.loads(out.read_text())["table"], sort_keys=True)


def table_of(instances: Sequence[Instance], valid: Mapping[str, bool], optimal: Mapping[str, bool]) -> str:
    """The same table from an integration's own valid / optimal judgements."""
    verdicts: dict[str, Any] = {
        i.id: SimpleNamespace(valid=bool(valid[i.id]), optimal=bool(optimal[i.id]), failure=None)
        for i in instances
    }
    return json.dumps(ScoreReport(tuple(instances), verdicts).table(), sort_keys=True)
