"""The project's user cache folder (converted models, small policies, warm-start checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The user cache of the project: ``$ENVENGINEER_CACHE``, else ``$XDG_CACHE_HOME/envengineer``."""
    env = os.environ.get("ENVENGINEER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "envengineer"
