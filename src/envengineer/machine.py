"""What this process may use of the machine it runs on."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The cores this process may run on (``taskset`` and cpusets count; CPU quotas do not)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
