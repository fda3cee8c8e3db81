"""Bridges from the testbed to the libraries researchers already train and track with.

One module per library, each importing that library only inside the functions that need it, so
``import envengineer.integrations.<name>`` costs nothing until it is used and the testbed (``mapf/``)
never depends on this package:

* :mod:`~envengineer.integrations.hf_datasets` — instance sets as ``datasets.Dataset`` / Parquet, and back;
* :mod:`~envengineer.integrations.verl` — ``compute_score`` and the Parquet layout verl reads;
* :mod:`~envengineer.integrations.gym_env` — a step-by-step multi-agent Gymnasium environment;
* :mod:`~envengineer.integrations.pettingzoo_env` — the same environment for PettingZoo (parallel, AEC);
* :mod:`~envengineer.integrations.reasoning_gym` — a reasoning-gym procedural dataset;
* :mod:`~envengineer.integrations.verifiers_env` — a verifiers taskset (package ``mapf_frozenlake``);
* :mod:`~envengineer.integrations.trackers` — ``report_to`` for TRL and per-round loop metrics.

The libraries come with the ``integrations`` extra: ``pip install -e '.[integrations]'``.
docs/integrations.md has a snippet per integration.

Errors: on a bad argument every public constructor and function here raises the project's types
(:class:`~envengineer.errors.ConfigError` for a bad option or value,
:class:`~envengineer.errors.InstanceFormatError` for malformed instance data, :class:`MissingDependency` for
a missing library), each named in its docstring;
where a library's own API names the error (a bad ``seed`` in Gymnasium's ``reset``, ``IndexError`` for an
index out of range, Python's ``TypeError`` for an unknown keyword name) that one is raised.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from envengineer.errors import ConfigError, EnvEngineerError

__all__ = ["INTEGRATIONS_EXTRA_HINT", "MissingDependency", "require"]

INTEGRATIONS_EXTRA_HINT = "pip install -e '.[integrations]'"


class MissingDependency(EnvEngineerError, ImportError):
    """An optional library an integration needs is not installed."""


def require(module: str, *, purpose: str) -> ModuleType:
    """Import an optional library, or raise a one-line error naming what to install.

    Args:
        module: The module to import (e.g. ``"gymnasium"``).
        purpose: What needs it, for the message (e.g. ``"the Gymnasium environment"``).

    Raises:
        MissingDependency: The module is not installed.
        ConfigError: ``module`` is not a module name.

    >>> require("json", purpose="a doctest").__name__
    'json'
    """
    if not isinstance(module, str) or not module.strip() or module.startswith("."):
        raise ConfigError(f"require needs an absolute module name such as 'gymnasium', got {module!r}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] != exc.name.split(".")[0]:
            raise
        raise MissingDependency(
            f"{purpose} needs the '{module.split('.')[0]}' package; install it with {INTEGRATIONS_EXTRA_HINT}"
        ) from None
