"""The project's user cache folder (converted models, small policies, warm-start checkpoints)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def cache_root() -> Path:
    """The user cache of the project: ``$ENVENGINEER_CACHE``, else ``$XDG_CACHE_HOME/envengineer``."""
    env = os.environ.get("ENVENGINEER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "envengineer"


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on the file ``path`` (created if missing; a no-op where ``fcntl``
    is unavailable): what fills a shared cache entry holds it, so that processes (lanes) filling the same
    entry wait for the first one and then read its result."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
