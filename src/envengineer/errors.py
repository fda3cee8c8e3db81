"""The project's exception hierarchy: one base class, messages that say what to change."""

from __future__ import annotations


class EnvEngineerError(Exception):
    """Base class of every error the project raises on purpose."""


class InstanceFormatError(EnvEngineerError, ValueError):
    """An instance (or a file of instances) does not follow the documented format."""


class ConfigError(EnvEngineerError, ValueError):
    """A configuration file or value is out of its legal space."""


class SolverBudgetExceeded(EnvEngineerError):
    """The exact solver gave up within its node budget; the instance is neither solved nor proven hard."""


class UnsolvableInstance(EnvEngineerError):
    """The instance has no conflict-free plan (e.g. an agent cannot reach its goal)."""


class GenerationError(EnvEngineerError):
    """The generator could not produce an instance that meets the requested targets within its budget."""
