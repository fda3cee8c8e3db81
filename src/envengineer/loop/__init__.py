"""The environment-engineer round loop: experiment files, run directories, the runner, reports.

>>> from envengineer.loop import Experiment
>>> Experiment.model_validate({"name": "x"}).rounds
3
"""

from __future__ import annotations

from envengineer.loop.components import Components
from envengineer.loop.context_settings import CONTEXT_VARIANTS
from envengineer.loop.demo import demo_experiment
from envengineer.loop.experiment import Experiment, load_experiment
from envengineer.loop.plan import plan
from envengineer.loop.rundir import RunDir
from envengineer.loop.runner import LoopRunner, run_experiment

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
