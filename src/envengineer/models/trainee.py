"""The packaged trainee: a small policy warm-started on the solver's plans, shipped with the package.

``policy:trainee`` names it wherever a model is named (``model:`` in an experiment, ``--model`` of the
commands): the tiny ``free-moves`` policy of :mod:`envengineer.models.small_policy`, trained with
supervised fine-tuning on the exact solver's optimal plans until more of it no longer moved its held-out
rates (docs/models.md, "The packaged trainee"). Its folder holds the weights, the tokenizer and
``manifest.json``: the commands that rebuild it, its seeds, data and steps, the commit it was built from,
its measured held-out rates, and a few boards with the answers it gives them (a test checks that the
shipped weights still give them), and each file's SHA-256. ``scripts/package_trainee.py`` writes the folder
from a training run's own record, refusing a record that lacks a fact of the build.

Loops and experiments start from it without a warm-start of their own; training from scratch stays one
option away (``model: policy:tiny`` with ``warm_start.enabled: true``).
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError

__all__ = ["MANIFEST_FILE", "TRAINEE_NAME", "is_trainee_name", "trainee_manifest", "trainee_path"]

#: The model name of the packaged trainee.
TRAINEE_NAME = "policy:trainee"
#: The record beside the weights.
MANIFEST_FILE = "manifest.json"


def is_trainee_name(name: str | Path | None) -> bool:
    """True for ``policy:trainee`` (any case, surrounding spaces ignored).

    >>> is_trainee_name("policy:trainee"), is_trainee_name("policy:tiny"), is_trainee_name(None)
    (True, False, False)
    """
    return name is not None and str(name).strip().lower() == TRAINEE_NAME


def trainee_path() -> Path:
    """The packaged trainee's folder inside the installed package.

    Raises:
        ConfigError: the folder or one of its files is missing (a damaged install).
    """
    folder = Path(str(files("envengineer") / "data" / "trainee"))
    missing = [
        name
        for name in ("config.json", "model.safetensors", "tokenizer.json", MANIFEST_FILE)
        if not (folder / name).is_file()
    ]
    if missing:
        raise ConfigError(
            f"the packaged trainee ({folder}) lacks {', '.join(missing)}; reinstall envengineer, or start "
            "from scratch with model: policy:tiny and warm_start.enabled: true"
        )
    return folder


def trainee_manifest() -> dict[str, Any]:
    """The packaged trainee's ``manifest.json``: how it was built and what it measured."""
    return json.loads((trainee_path() / MANIFEST_FILE).read_text(encoding="utf-8"))
