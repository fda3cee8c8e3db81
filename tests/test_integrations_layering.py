"""The integrations stay optional: the testbed never imports them, and they import their libraries lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "envengineer"
HEAVY = ("gymnasium", "pettingzoo", "reasoning_gym", "tensorboard", "datasets", "torch", "verl")


def test_the_testbed_never_imports_the_integrations():
    offenders = [
        str(p.relative_to(SRC)) for p in (SRC / "mapf").rglob("*.py") if "integrations" in p.read_text()
    ]
    assert offenders == []


def test_importing_the_light_integrations_and_the_cli_pulls_no_library():
    code = (
        "import sys, envengineer.integrations, envengineer.integrations.hf_datasets, "
        "envengineer.integrations.verl, envengineer.integrations.trackers, envengineer.cli, "
        "envengineer.loop.runner; envengineer.cli.build_parser(); "
        f"bad = [m for m in {HEAVY!r} if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
