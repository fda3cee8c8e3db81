"""The environment-engineer round loop: experiment files, run directories, the runner, reports.

>>> from envengineer.loop import Experiment
>>> Experiment.model_validate({"name": "x"}).rounds
3
"""

from __future__ import annotations

from envengineer.loop.experiment import CONTEXT_VARIANTS, Experiment, demo_experiment, load_experiment, plan
from envengineer.loop.rundir import RunDir
from envengineer.loop.runner import Components, LoopRunner, run_experiment

__all__ = [
    "CONTEXT_VARIANTS",
    "Components",
    "Experiment",
    "LoopRunner",
    "RunDir",
    "demo_experiment",
    "load_experiment",
    "plan",
    "run_experiment",
]
