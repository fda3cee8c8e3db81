"""The verifiers taskset plugin ``mapf-frozenlake``: MAPF-FrozenLake from envengineer.

verifiers resolves a taskset id to a top-level package exporting one ``Taskset`` subclass via ``__all__``;
this package re-exports :mod:`envengineer.integrations.verifiers_env` under that name, so
``vf-eval mapf-frozenlake`` and ``--env.taskset.id mapf-frozenlake`` find it.
"""

from envengineer.integrations.verifiers_env import (
    MapfData,
    MapfTask,
    MapfTaskConfig,
    MapfTaskset,
    MapfTasksetConfig,
    load_environment,
)

__all__ = ["MapfData", "MapfTask", "MapfTaskConfig", "MapfTaskset", "MapfTasksetConfig", "load_environment"]
