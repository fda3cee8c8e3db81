"""What a stage reads: the round's :class:`RoundState` and the loop (:class:`Loop`) it runs in.

Each stage (:mod:`envengineer.loop.stages`) is a function of the loop and, for a round's stage, that round's
state; it returns the files it wrote and the facts for its ledger line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from envengineer.loop.components import Components
from envengineer.loop.experiment import Experiment
from envengineer.loop.integrity import Verifier
from envengineer.loop.rundir import RunDir
from envengineer.mapf.config import ConfigSpace, RoundConfig
from envengineer.mapf.instance import Instance

StageResult = tuple[dict[str, Any], dict[str, Any]] | tuple[dict[str, Any], dict[str, Any], str]


@dataclass
class RoundState:
    """What the loop knows about one round, rebuilt from the run directory on resume."""

    index: int
    config: RoundConfig | None = None
    model_in: str | None = None
    checkpoint: str | None = None
    validation: dict[str, Any] | None = None
    rationale: str | None = None
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class Loop(Protocol):
    """The run a stage belongs to (:class:`envengineer.loop.runner.LoopRunner` is one)."""

    exp: Experiment
    rd: RunDir
    verifier: Verifier
    comps: Components
    progress: bool
    space: ConfigSpace
    rounds: list[RoundState]
    warm_checkpoint: str | None

    @property
    def round0(self) -> RoundConfig: ...

    @property
    def start_model(self) -> str | None: ...

    @property
    def validation_set(self) -> list[Instance]: ...

    @property
    def benchmark_set(self) -> list[Instance]: ...

    @property
    def exclude(self) -> frozenset[str]: ...
